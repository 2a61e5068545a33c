-- Structured profiles, part 1: profile schemas and the validation of values.
--
-- A profile schema is a JSON Schema object, as pydantic's
-- BaseModel.model_json_schema() writes it, whose top-level properties are
-- the profile's fields. Each field is one of: string; enum (a Literal[...]
-- of strings: "enum" with or without "type": "string"); number; integer;
-- boolean; array of strings. An Optional field (anyOf [X, {"type":
-- "null"}]) is X. "description" (and "title") are shown to the model. Any
-- other construct ($ref, nested objects, arrays of other things, oneOf) is
-- refused with 22023 naming its path (memory_schema.properties.x.type), so
-- nothing the extraction cannot validate is ever accepted.
-- Schemas are bank-wide configuration (no user text): membank_admin
-- manages them, every reader can read them. Source of the shape: Vertex AI
-- Memory Bank's structured profiles (StructuredMemoryCustomizationConfig,
-- MemoryProfile {schema_id, profile}).

-- name: profile_field_spec: a field's property with Optional (anyOf [X, null]) unwrapped; null if unsupported.
create or replace function membank_private.profile_field_spec(prop jsonb)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case
        when jsonb_typeof(prop) <> 'object' then null
        when jsonb_typeof(prop -> 'anyOf') = 'array' and jsonb_array_length(prop -> 'anyOf') = 2
             and (prop -> 'anyOf') @> '[{"type": "null"}]'
            then (prop - 'anyOf' - 'default')
                 || (select a from jsonb_array_elements(prop -> 'anyOf') as a where a <> '{"type": "null"}' limit 1)
        else prop
    end;
$$;

-- name: profile_field_kind: string | enum | number | integer | boolean | string_array, or null when unsupported.
create or replace function membank_private.profile_field_kind(prop jsonb)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    with p as (select membank_private.profile_field_spec(prop) as s)
    select case
        when p.s is null then null
        when p.s ? 'enum' then
            case when jsonb_typeof(p.s -> 'enum') = 'array' and jsonb_array_length(p.s -> 'enum') > 0
                      and not exists (select from jsonb_array_elements(p.s -> 'enum') as e
                                      where jsonb_typeof(e) <> 'string')
                      and coalesce(p.s ->> 'type', 'string') = 'string'
                 then 'enum' end
        when p.s ->> 'type' in ('string', 'number', 'integer', 'boolean')
             and not (p.s ?| array['$ref', 'properties', 'oneOf', 'allOf', 'anyOf']) then p.s ->> 'type'
        when p.s ->> 'type' = 'array' and p.s -> 'items' ->> 'type' = 'string'
             and not (p.s -> 'items' ? 'enum') then 'string_array'
    end
    from p;
$$;

-- name: validate_schema_id: check a profile schema id (1..128 characters of letters, digits, - _ .).
create or replace function membank_private.validate_schema_id(schema_id text, argument text default 'schema_id')
returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if schema_id is null or schema_id !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' then
        perform membank_private._raise_invalid(argument,
            format('%s is not a schema id', coalesce(to_jsonb(left(schema_id, 80))::text, 'null')),
            'a schema id is 1 to 128 letters, digits, "-", "_" or ".", starting with a letter or digit, '
            || 'e.g. user-profile');
    end if;
    return schema_id;
end
$$;

-- name: validate_memory_schema: check a profile's JSON Schema; 22023 names the path of the first unsupported part.
create or replace function membank_private.validate_memory_schema(memory_schema jsonb)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _field text;
    _prop jsonb;
    _path text;
    _spec jsonb;
begin
    if memory_schema is null or jsonb_typeof(memory_schema) <> 'object' then
        perform membank_private._raise_invalid('memory_schema',
            format('must be a JSON object, got %s', coalesce(jsonb_typeof(memory_schema), 'null')),
            'pass a JSON Schema object such as pydantic''s Model.model_json_schema()');
    end if;
    if octet_length(memory_schema::text) > 65536 then
        perform membank_private._raise_invalid('memory_schema', format('is %s bytes', octet_length(memory_schema::text)),
            'a profile schema is at most 65536 bytes as text');
    end if;
    if memory_schema ? 'type' and memory_schema -> 'type' <> '"object"' then
        perform membank_private._raise_invalid('memory_schema.type',
            format('must be "object", got %s', memory_schema -> 'type'), 'a profile is an object of fields');
    end if;
    if jsonb_typeof(memory_schema -> 'properties') is distinct from 'object'
       or memory_schema -> 'properties' = '{}' then
        perform membank_private._raise_invalid('memory_schema.properties',
            'must be a non-empty object of fields', 'e.g. {"properties": {"job_status": {"type": "string"}}}');
    end if;
    if (select count(*) from jsonb_object_keys(memory_schema -> 'properties')) > 64 then
        perform membank_private._raise_invalid('memory_schema.properties', 'has more than 64 fields',
            'split a large profile into several schemas');
    end if;
    for _field, _prop in select key, value from jsonb_each(memory_schema -> 'properties') order by key loop
        _path := format('memory_schema.properties.%s', _field);
        if _field !~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$' then
            perform membank_private._raise_invalid(_path, 'is not a field name',
                'field names are 1 to 128 letters, digits or "_", starting with a letter or "_"');
        end if;
        if jsonb_typeof(_prop) <> 'object' then
            perform membank_private._raise_invalid(_path, 'must be a JSON Schema object',
                'e.g. {"type": "string", "description": "the user''s technical stack"}');
        end if;
        if _prop ? 'description' and (jsonb_typeof(_prop -> 'description') <> 'string'
                                      or length(_prop ->> 'description') > 2000) then
            perform membank_private._raise_invalid(_path || '.description', 'must be a string of at most 2000 characters',
                'the description tells the model what the field holds');
        end if;
        if membank_private.profile_field_kind(_prop) is null then
            _spec := membank_private.profile_field_spec(_prop);
            perform membank_private._raise_invalid(
                _path || case when _spec is null then '.anyOf'
                              when _spec ? '$ref' then '.$ref'
                              when _spec ? 'enum' then '.enum'
                              when _spec ->> 'type' = 'array' then '.items'
                              else '.type' end,
                format('is not supported (%s)', left(coalesce(_spec, _prop)::text, 200)),
                'a field is a string, number, integer, boolean, an enum of strings (Literal[...]) or an array of '
                || 'strings; Optional[X] is X');
        end if;
    end loop;
    return memory_schema;
end
$$;

-- name: profile_fields: a schema's fields as (field, kind, spec), in name order.
create or replace function membank_private.profile_fields(memory_schema jsonb)
returns table (field text, kind text, spec jsonb)
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select p.key, membank_private.profile_field_kind(p.value), membank_private.profile_field_spec(p.value)
    from jsonb_each(memory_schema -> 'properties') as p
    order by p.key;
$$;

-- name: check_profile_value: why value cannot be stored in a field of spec (null when it can).
create or replace function membank_private.check_profile_value(spec jsonb, value jsonb)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case membank_private.profile_field_kind(spec)
        when 'string' then
            case when jsonb_typeof(value) <> 'string' then format('must be a string, got %s', jsonb_typeof(value))
                 when btrim(value #>> '{}') = '' then 'must not be blank'
                 when length(value #>> '{}') > 32768 then 'is longer than 32768 characters' end
        when 'enum' then
            case when not (membank_private.profile_field_spec(spec) -> 'enum') @> jsonb_build_array(value)
                 then format('%s is not one of %s', value,
                             (select string_agg(e #>> '{}', ', ')
                              from jsonb_array_elements(membank_private.profile_field_spec(spec) -> 'enum') as e)) end
        when 'number' then
            case when jsonb_typeof(value) <> 'number' then format('must be a number, got %s', jsonb_typeof(value)) end
        when 'integer' then
            case when jsonb_typeof(value) <> 'number' then format('must be an integer, got %s', jsonb_typeof(value))
                 when (value #>> '{}')::numeric <> trunc((value #>> '{}')::numeric)
                 then format('must be an integer, got %s', value) end
        when 'boolean' then
            case when jsonb_typeof(value) <> 'boolean' then format('must be true or false, got %s', value) end
        when 'string_array' then
            case when jsonb_typeof(value) <> 'array'
                      or exists (select from jsonb_array_elements(value) as e where jsonb_typeof(e) <> 'string')
                 then format('must be an array of strings, got %s', left(value::text, 100))
                 when jsonb_array_length(value) > 1000 then 'has more than 1000 items' end
        else 'the field''s schema is not supported'
    end;
$$;

-- name: to_profile_schema: the public shape of a stored profile schema.
create or replace function membank_private.to_profile_schema(s membank_private.profile_schemas)
returns membank.profile_schema
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select row(s.schema_id, s.memory_schema, s.create_time, s.update_time)::membank.profile_schema;
$$;

-- name: create_profile_schema: register a profile schema (JSON Schema of fields) under schema_id.
create or replace function membank.create_profile_schema(schema_id text, memory_schema jsonb)
returns membank.profile_schema
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.profile_schemas;
begin
    perform membank_private.refuse_bound_caller('create_profile_schema');
    -- A bank-wide row: the wait for another call holding it is bounded (MB040).
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    insert into membank_private.profile_schemas as s (schema_id, memory_schema)
    values (membank_private.validate_schema_id(schema_id), membank_private.validate_memory_schema(memory_schema))
    on conflict do nothing
    returning * into _row;
    if _row.schema_id is null then
        raise exception 'schema_id: profile schema % exists', to_jsonb(schema_id)
            using errcode = 'unique_violation', detail = 'argument: schema_id',
                  hint = 'use update_profile_schema to change it, or another schema_id';
    end if;
    return membank_private.to_profile_schema(_row);
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('schema_id', 'this profile schema');
end
$$;

comment on function membank.create_profile_schema(text, jsonb) is
$$Register a structured-profile schema for the whole bank. schema_id: 1..128 letters, digits, "-", "_", "." (e.g.
user-profile); memory_schema: a JSON Schema object (as pydantic's model_json_schema() writes it, at most 64 KiB) whose
top-level properties are the fields, each a string, number, integer, boolean, enum of strings (Literal[...]) or array
of strings (Optional[X] counts as X); descriptions are shown to the model. GenerateMemories then fills one profile per
(schema, scope), each field a STRUCTURED_PROFILE memory. Returns membank.profile_schema. Raises 22023 naming the
argument or the path of an unsupported construct (memory_schema.properties.job_status.type), 23505 (schema_id exists),
42501 for a role bound to scopes, MB040 after waiting membank.lock_timeout for another call on this schema_id.
Shape after Vertex AI Memory Bank's structured profiles.$$;

-- name: get_profile_schema: one profile schema by id.
create or replace function membank.get_profile_schema(schema_id text)
returns membank.profile_schema
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.profile_schemas;
begin
    perform membank_private.check_node_privileges();  -- profile schemas belong to no scope
    select * into _row from membank_private.profile_schemas as s where s.schema_id = get_profile_schema.schema_id;
    if _row.schema_id is null then
        raise exception 'schema_id: no profile schema %', to_jsonb(schema_id)
            using errcode = 'no_data_found', detail = 'argument: schema_id',
                  hint = 'list_profile_schemas() shows the schemas of this bank';
    end if;
    return membank_private.to_profile_schema(_row);
end
$$;

comment on function membank.get_profile_schema(text) is
$$The profile schema registered as schema_id (membank.profile_schema: schema_id, memory_schema, create_time,
update_time). Raises P0002 (no such schema).$$;

-- name: list_profile_schemas: every profile schema of the bank, by id.
create or replace function membank.list_profile_schemas()
returns setof membank.profile_schema
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.profile_schemas;
begin
    perform membank_private.check_node_privileges();  -- profile schemas belong to no scope
    -- Row by row: on Citus a whole row passed to a function inside the query
    -- would arrive from the reference table's shard as the shard's row type.
    for _row in select s.* from membank_private.profile_schemas as s order by s.schema_id loop
        return next membank_private.to_profile_schema(_row);
    end loop;
end
$$;

comment on function membank.list_profile_schemas() is
$$Every profile schema of the bank (membank.profile_schema rows), ordered by schema_id. Raises nothing.$$;

-- name: update_profile_schema: replace a profile schema's JSON Schema.
create or replace function membank.update_profile_schema(schema_id text, memory_schema jsonb)
returns membank.profile_schema
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.profile_schemas;
begin
    perform membank_private.refuse_bound_caller('update_profile_schema');
    -- A bank-wide row: the wait for another call holding it is bounded (MB040).
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    update membank_private.profile_schemas as s
    set memory_schema = membank_private.validate_memory_schema(update_profile_schema.memory_schema),
        update_time = statement_timestamp()
    where s.schema_id = update_profile_schema.schema_id
    returning * into _row;
    if _row.schema_id is null then
        raise exception 'schema_id: no profile schema %', to_jsonb(schema_id)
            using errcode = 'no_data_found', detail = 'argument: schema_id',
                  hint = 'create it with create_profile_schema';
    end if;
    return membank_private.to_profile_schema(_row);
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('schema_id', 'this profile schema');
end
$$;

comment on function membank.update_profile_schema(text, jsonb) is
$$Replace the JSON Schema of profile schema schema_id (same rules as create_profile_schema). Operations started
afterwards use the new fields; stored field memories stay as they are (delete a dropped field's memories with
delete_memory). Returns membank.profile_schema. Raises 22023 naming the path, P0002 (no such schema), 42501 for a
role bound to scopes, MB040 after waiting membank.lock_timeout for another call holding the schema (retryable).$$;

-- name: delete_profile_schema: remove a profile schema; with force, also every field memory of it in every scope.
create or replace function membank.delete_profile_schema(schema_id text, force boolean default false)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _count bigint;
    _scope_id uuid;
begin
    if force is null then
        perform membank_private._raise_invalid('force', 'must be true or false',
            'force => true also deletes the field memories of this schema in every scope');
    end if;
    perform membank_private.refuse_bound_caller('delete_profile_schema');
    -- A bank-wide row: the wait for another call holding it is bounded (MB040).
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    perform from membank_private.profile_schemas as s where s.schema_id = delete_profile_schema.schema_id for update;
    if not found then
        raise exception 'schema_id: no profile schema %', to_jsonb(schema_id)
            using errcode = 'no_data_found', detail = 'argument: schema_id',
                  hint = 'list_profile_schemas() shows the schemas of this bank';
    end if;
    select count(*) into _count from membank_private.memories as m
    where m.memory_type = 'STRUCTURED_PROFILE' and m.structured_content ->> 'schema_id' = delete_profile_schema.schema_id;
    if _count > 0 and not force then
        raise exception 'schema_id: % field memories of profile schema % exist', _count, to_jsonb(schema_id)
            using errcode = 'dependent_objects_still_exist', detail = 'argument: schema_id',
                  hint = 'pass force => true to delete them too (each with a DELETED revision)';
    end if;
    -- Each scope's write lock first, in scope order (015_scope_locks.sql).
    for _scope_id in select distinct m.scope_id from membank_private.memories as m
                     where m.memory_type = 'STRUCTURED_PROFILE'
                       and m.structured_content ->> 'schema_id' = delete_profile_schema.schema_id
                     order by m.scope_id loop
        perform membank_private.lock_scope(_scope_id);
    end loop;
    perform membank_private.set_revision_context(jsonb_build_object('reason', 'delete_profile_schema'));
    delete from membank_private.memories as m
    where m.memory_type = 'STRUCTURED_PROFILE' and m.structured_content ->> 'schema_id' = delete_profile_schema.schema_id;
    perform membank_private.clear_revision_context();
    delete from membank_private.profile_schemas as s where s.schema_id = delete_profile_schema.schema_id;
    return _count;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('schema_id', 'this profile schema');
end
$$;

comment on function membank.delete_profile_schema(text, boolean) is
$$Remove profile schema schema_id. While field memories of it exist (in any scope), refuses unless force => true,
which deletes them too, each with a DELETED revision labelled {"reason": "delete_profile_schema"}. Returns the number
of field memories deleted. Raises P0002 (no such schema), 2BP01 (field memories exist and force is false), 22023,
42501 for a role bound to scopes, MB040 after waiting membank.lock_timeout for another call holding the schema or a
scope's write lock (retryable).$$;
