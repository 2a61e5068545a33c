-- Structured profiles, part 2: filling them from GenerateMemories and
-- reading them.
--
-- A profile is one per (schema, exact scope); each of its fields is a
-- STRUCTURED_PROFILE memory whose structured_content is {"schema_id",
-- "field", "value", "event_time"}, so a field has revisions, TTL, metadata
-- and erasure like any memory. The unique index memories_profile_field_idx
-- (scope_id, schema_id, field) is both the read path of retrieve_profiles
-- (one index range per scope) and the guard that keeps one memory per field.
--
-- Generation (Vertex AI Memory Bank's structured profiles): extraction asks
-- the model, beside the natural-language memories, for the values the
-- conversation states for each field of each schema in effect; SQL validates
-- every value against its field (an enum outside its values or a wrong type
-- is rejected with the reason, never stored). Consolidation is per field,
-- under the scope's write lock: a field without a value is set; an enum,
-- number, integer or boolean is replaced by a newer value (by event time);
-- an array of strings takes the union; a string field that already holds
-- another value is merged by the model in the consolidation call ("ADK" +
-- "Python" -> "ADK, Python"), planned and re-checked like the candidates of
-- the facts (093_consolidation.sql): if the field changed between planning
-- and applying, the job is re-planned.

-- name: resolve_profile_schemas: the schemas an operation fills, as {schema_id: memory_schema} (22023).
create or replace function membank_private.resolve_profile_schemas(
    profile_schemas jsonb, disable_natural_language_memories boolean
) returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _result jsonb;
    _id jsonb;
    _i integer := 0;
begin
    if profile_schemas is null then
        select coalesce(jsonb_object_agg(s.schema_id, s.memory_schema), '{}') into _result
        from membank_private.profile_schemas as s;
    elsif jsonb_typeof(profile_schemas) <> 'array' or jsonb_array_length(profile_schemas) > 32 then
        perform membank_private._raise_invalid('profile_schemas', 'must be a JSON array of at most 32 schema ids',
            'e.g. ["user-profile"]; null (default) fills every schema of the bank, [] none');
    else
        _result := '{}';
        for _id in select e from jsonb_array_elements(profile_schemas) as e loop
            if jsonb_typeof(_id) <> 'string'
               or not exists (select from membank_private.profile_schemas as s where s.schema_id = _id #>> '{}') then
                perform membank_private._raise_invalid(format('profile_schemas[%s]', _i),
                    format('no profile schema %s', _id), 'list_profile_schemas() shows the schemas of this bank');
            end if;
            _result := _result || (select jsonb_build_object(s.schema_id, s.memory_schema)
                                   from membank_private.profile_schemas as s where s.schema_id = _id #>> '{}');
            _i := _i + 1;
        end loop;
    end if;
    if disable_natural_language_memories is null then
        perform membank_private._raise_invalid('disable_natural_language_memories', 'must be true or false',
            'true fills only the structured profiles of the request');
    end if;
    if disable_natural_language_memories and _result = '{}' then
        perform membank_private._raise_invalid('disable_natural_language_memories',
            'no profile schema is in effect, so nothing would be generated',
            'create a profile schema first, or name one in profile_schemas');
    end if;
    return _result;
end
$$;

-- name: profile_prompt: the part of the extraction prompt that asks for the profiles' fields.
create or replace function membank_private.profile_prompt(profile_schemas jsonb)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select E'\nAlso fill these structured profiles. Give only the fields for which the conversation states a value '
           || E'(never guess); for each, "value" in the field''s type, "context" (one sentence on where it comes from, '
           || E'e.g. "The user said they need help building an ADK agent") and "source_event_ids".\n'
           || string_agg(format(E'Profile %s:\n%s', s.key,
                  (select string_agg(format('- %s (%s)%s', f.field,
                                            case f.kind when 'enum' then 'one of: ' || (
                                                    select string_agg(e #>> '{}', ', ')
                                                    from jsonb_array_elements(f.spec -> 'enum') as e)
                                                 when 'string_array' then 'list of strings'
                                                 else f.kind end,
                                            coalesce(': ' || coalesce(f.spec ->> 'description', f.spec ->> 'title'), '')),
                                     E'\n' order by f.field)
                   from membank_private.profile_fields(s.value) as f)), E'\n' order by s.key)
    from jsonb_each(profile_schemas) as s
    having count(*) > 0;
$$;

-- name: profile_reply_schema: the JSON schema of the "profiles" part of an extraction reply.
create or replace function membank_private.profile_reply_schema(profile_schemas jsonb)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select jsonb_build_object('type', 'object', 'properties', coalesce(jsonb_object_agg(s.key, jsonb_build_object(
               'type', 'object', 'properties', (
                   select jsonb_object_agg(f.field, jsonb_build_object(
                              'type', 'object', 'required', jsonb_build_array('value'),
                              'properties', jsonb_build_object(
                                  'value', f.spec - 'title' - 'default',
                                  'context', jsonb_build_object('type', 'string'),
                                  'source_event_ids', '{"type": "array", "items": {"type": "string"}}'::jsonb)))
                   from membank_private.profile_fields(s.value) as f))), '{}'))
    from jsonb_each(profile_schemas) as s;
$$;

-- name: merge_profile_text: merge two values of a string field item by item ("ADK" + "Python" -> "ADK, Python").
create or replace function membank_private.merge_profile_text(current_value text, new_value text)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select string_agg(i.item, ', ' order by i.n)
    from (select distinct on (lower(x.item)) x.item, x.n
          from (select btrim(t.item) as item, t.n
                from regexp_split_to_table(coalesce(current_value, '') || ',' || coalesce(new_value, ''), '\s*[,;]\s*')
                     with ordinality as t (item, n)) as x
          where x.item <> ''
          order by lower(x.item), x.n) as i;
$$;

-- name: accept_profile_values: validate the "profiles" of an extraction reply; one accepted value per field.
create or replace function membank_private.accept_profile_values(o membank_private.operations, reply jsonb)
returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _schemas jsonb := coalesce(o.options -> 'profile_schemas', '{}');
    _profiles jsonb := case when jsonb_typeof(reply) = 'object' then reply -> 'profiles' end;
    _event_ids text [] := array(select e ->> 'event_id' from jsonb_array_elements(o.source_events) as e);
    _schema_id text;
    _fields jsonb;
    _field text;
    _item jsonb;
    _value jsonb;
    _spec jsonb;
    _reason text;
    _sources text [];
    _unknown text [];
    _event_time timestamptz;
    _previous jsonb;
    _accepted jsonb := '{}';
begin
    if _schemas = '{}' or _profiles is null or _profiles = 'null' then
        return '[]';
    end if;
    if jsonb_typeof(_profiles) <> 'object' then
        perform membank_private.reject_item(o.name, 'EXTRACT', jsonb_build_object('profiles', _profiles),
            'profiles: must be an object of schema ids');
        return '[]';
    end if;
    for _schema_id, _fields in select key, value from jsonb_each(_profiles) order by key loop
        if not _schemas ? _schema_id then
            perform membank_private.reject_item(o.name, 'EXTRACT', jsonb_build_object('profiles', jsonb_build_object(
                _schema_id, _fields)), format('profiles: %s is not a profile schema of this request', _schema_id));
            continue;
        end if;
        if jsonb_typeof(_fields) <> 'object' then
            continue;  -- null or empty: nothing stated for this profile
        end if;
        for _field, _item in select key, value from jsonb_each(_fields) order by key loop
            _spec := membank_private.profile_field_spec(_schemas -> _schema_id -> 'properties' -> _field);
            -- {"value", "context", "source_event_ids"}, or the bare value (fields are never objects).
            _value := case when jsonb_typeof(_item) = 'object' then _item -> 'value' else _item end;
            if _value is null or _value = 'null' then
                continue;  -- the model says the conversation states nothing for this field
            end if;
            _reason := case when _spec is null then format('%s is not a field of %s', _field, _schema_id)
                            else membank_private.check_profile_value(_spec, _value) end;
            if _reason is null and jsonb_typeof(_item) = 'object'
               and (coalesce(jsonb_typeof(_item -> 'context'), 'string') not in ('string', 'null')
                    or coalesce(jsonb_typeof(_item -> 'source_event_ids'), 'array') not in ('array', 'null')) then
                _reason := 'context must be a string and source_event_ids an array of strings';
            end if;
            _sources := case when jsonb_typeof(_item -> 'source_event_ids') = 'array'
                             then array(select jsonb_array_elements_text(_item -> 'source_event_ids')) else '{}' end;
            _unknown := array(select s from unnest(_sources) as s where s <> all(_event_ids));
            if _reason is null and cardinality(_unknown) > 0 then
                _reason := format('source_event_ids: %s not among the events of this operation',
                                  array_to_string(_unknown, ', '));
            end if;
            if _reason is not null then
                perform membank_private.reject_item(o.name, 'EXTRACT', jsonb_build_object(
                    'schema_id', _schema_id, 'field', _field, 'item', _item),
                    format('profiles.%s.%s: %s', _schema_id, _field, _reason));
                continue;
            end if;
            if cardinality(_sources) = 0 then
                _sources := _event_ids;
            end if;
            if jsonb_typeof(_value) = 'string' then
                _value := to_jsonb(btrim(_value #>> '{}'));
            end if;
            select max((e ->> 'timestamp')::timestamptz) into _event_time
            from jsonb_array_elements(o.source_events) as e where e ->> 'event_id' = any(_sources);
            _previous := _accepted -> (_schema_id || '.' || _field);
            if _previous is not null then
                -- Two values for one field in one reply: merged like two operations would be.
                _value := case membank_private.profile_field_kind(_spec)
                    when 'string' then to_jsonb(membank_private.merge_profile_text(_previous ->> 'value', _value #>> '{}'))
                    when 'string_array' then (select jsonb_agg(distinct v) from jsonb_array_elements(
                                                  (_previous -> 'value') || _value) as v)
                    else _value end;
            end if;
            _accepted := _accepted || jsonb_build_object(_schema_id || '.' || _field, jsonb_build_object(
                'schema_id', _schema_id, 'field', _field, 'kind', membank_private.profile_field_kind(_spec),
                'description', coalesce(_spec ->> 'description', _spec ->> 'title'),
                'value', _value,
                'context', coalesce(nullif(_item ->> 'context', ''), _previous ->> 'context'),
                'source_event_ids', to_jsonb(_sources), 'event_time', _event_time));
        end loop;
    end loop;
    return (select coalesce(jsonb_agg(v order by k), '[]') from jsonb_each(_accepted) as a (k, v));
end
$$;

-- name: merge_profile_values: accepted profile values of two extraction batches, one per field (later wins).
-- Fields are merged as accept_profile_values merges two values in one reply:
-- strings by merge_profile_text, string arrays as a set, anything else
-- replaced by the later batch's value.
create or replace function membank_private.merge_profile_values(earlier jsonb, later jsonb)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_agg(
               case when e is null then l
                    when l is null then e
                    else l || jsonb_build_object(
                        'value', case l ->> 'kind'
                            when 'string' then to_jsonb(membank_private.merge_profile_text(
                                e ->> 'value', l ->> 'value'))
                            when 'string_array' then (select jsonb_agg(distinct v) from jsonb_array_elements(
                                (e -> 'value') || (l -> 'value')) as v)
                            else l -> 'value' end,
                        'context', coalesce(l -> 'context', e -> 'context'),
                        'source_event_ids', (e -> 'source_event_ids') || (l -> 'source_event_ids'))
               end
               order by coalesce(e, l) ->> 'schema_id', coalesce(e, l) ->> 'field'), '[]')
    from (select v as e, v ->> 'schema_id' || '.' || (v ->> 'field') as k from jsonb_array_elements(earlier) as v) as a
    full join (select v as l, v ->> 'schema_id' || '.' || (v ->> 'field') as k
               from jsonb_array_elements(later) as v) as b using (k);
$$;

-- name: profile_plan: per accepted value, the field memory it meets now and whether the model must merge.
create or replace function membank_private.profile_plan(o membank_private.operations)
returns jsonb
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_agg(jsonb_build_object(
               'index', x.n - 1, 'schema_id', v ->> 'schema_id', 'field', v ->> 'field', 'kind', v ->> 'kind',
               'description', v -> 'description', 'name', m.name, 'revision', m.revision,
               'current', m.structured_content -> 'value', 'new', v -> 'value',
               'merge', v ->> 'kind' = 'string' and m.name is not null
                        and lower(m.structured_content ->> 'value')
                            <> lower(membank_private.merge_profile_text(m.structured_content ->> 'value', v ->> 'value'))
           ) order by x.n), '[]')
    from jsonb_array_elements(o.profile_values) with ordinality as x (v, n)
    left join membank_private.memories as m
        on m.scope_id = o.scope_id and m.memory_type = 'STRUCTURED_PROFILE'
       and m.structured_content ->> 'schema_id' = v ->> 'schema_id'
       and m.structured_content ->> 'field' = v ->> 'field'
       and m.scope = o.scope
       and (m.expire_time is null or m.expire_time > statement_timestamp());
$$;

-- name: profile_plan_key: what must not change between planning and applying: per field, memory name and revision.
create or replace function membank_private.profile_plan_key(plan jsonb)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_agg(jsonb_build_array(p -> 'schema_id', p -> 'field', p -> 'name', p -> 'revision')
                              order by p ->> 'schema_id', p ->> 'field'), '[]')
    from jsonb_array_elements(plan) as p;
$$;

-- name: profile_merge_prompt: the part of the consolidation prompt that asks the model to merge string fields.
create or replace function membank_private.profile_merge_prompt(merges jsonb)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select concat_ws(E'\n',
        'Profile fields to merge: each already holds a value and the conversation gave another. Give the merged '
        || 'current value: for lists, stacks and sets of things keep both ("ADK" and "Python" give "ADK, Python"); '
        || 'when the new value replaces the old one (a changed fact), give the new one.',
        string_agg(format('- %s.%s%s: current %s; new %s', m ->> 'schema_id', m ->> 'field',
                          coalesce(' (' || (m ->> 'description') || ')', ''), m -> 'current', m -> 'new'),
                   E'\n' order by (m ->> 'index')::integer),
        'Reply with JSON only, of the form {"actions": [], "profile_fields": [{"schema_id": "...", "field": "...", '
        || '"value": "..."}]} (actions as asked above, if any).')
    from jsonb_array_elements(merges) as m
    having count(*) > 0;
$$;

-- name: consolidation_reply_schema: the consolidation reply's JSON schema (profile_fields when merging).
create or replace function membank_private.consolidation_reply_schema(merges jsonb)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    -- plpgsql: consolidation_schema() is created later (093_consolidation.sql).
    return case when jsonb_array_length(merges) = 0 then membank_private.consolidation_schema()
                else jsonb_set(membank_private.consolidation_schema(), '{properties,profile_fields}',
                               '{"type": "array", "items": {"type": "object",
                                 "required": ["schema_id", "field", "value"], "properties": {
                                 "schema_id": {"type": "string"}, "field": {"type": "string"},
                                 "value": {"type": "string"}}}}'::jsonb) end;
end
$$;
