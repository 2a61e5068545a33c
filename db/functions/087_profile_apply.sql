-- Structured profiles, part 3: applying an operation's profile values field
-- by field, and reading a scope's profiles (the design is in 086_profiles.sql).

-- name: apply_profile_values: consolidate an operation's profile values field by field (scope lock held).
-- merged: the model's merged values [{schema_id, field, value}] for string fields that needed merging.
create or replace function membank_private.apply_profile_values(o membank_private.operations, merged jsonb)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _v jsonb;
    _row membank_private.memories;
    _new jsonb;
    _given jsonb;
    _reason text;
    _spec jsonb;
    _retired uuid;
    _expire timestamptz;
begin
    if coalesce(jsonb_array_length(o.profile_values), 0) = 0 then
        -- Nothing to write: no lock taken again. On Citus taking it is a
        -- statement on the worker, and marks the scope's embedding work due
        -- again after the consolidation stored its vectors (lock_scope), which
        -- cost the next embedding claim a transaction on the worker finding nothing.
        return;
    end if;
    perform membank_private.lock_scope(o.scope_id);
    for _v in select v from jsonb_array_elements(o.profile_values) as v loop
        -- An expired field memory is invisible already; it gives way to the new value.
        perform membank_private.set_revision_context(jsonb_build_object('reason', 'expired'));
        delete from membank_private.memories as m
        where m.scope_id = o.scope_id and m.memory_type = 'STRUCTURED_PROFILE'
          and m.structured_content ->> 'schema_id' = _v ->> 'schema_id'
          and m.structured_content ->> 'field' = _v ->> 'field'
          and m.expire_time <= statement_timestamp();
        select * into _row from membank_private.memories as m
        where m.scope_id = o.scope_id and m.memory_type = 'STRUCTURED_PROFILE'
          and m.structured_content ->> 'schema_id' = _v ->> 'schema_id'
          and m.structured_content ->> 'field' = _v ->> 'field'
        for update;
        if _row.name is null then
            -- A deleted field does not come back from the events it came from
            -- (retired_sources, 085_erasure.sql), like a deleted fact.
            _retired := membank_private.retired_by(o.scope_id, o.source_events,
                array(select jsonb_array_elements_text(_v -> 'source_event_ids')));
            if _retired is not null then
                perform membank_private.reject_item(o.name, 'CONSOLIDATE', jsonb_build_object(
                    'schema_id', _v ->> 'schema_id', 'field', _v ->> 'field',
                    'source_event_ids', _v -> 'source_event_ids', 'memory_name', _retired),
                    format('source_event_ids: %s were the source of memory %s, which was deleted; a deleted profile '
                           'field is created again only from a new event',
                           array_to_string(array(select jsonb_array_elements_text(_v -> 'source_event_ids')), ', '),
                           _retired));
                continue;
            end if;
        end if;
        _new := _v -> 'value';
        if _row.name is not null then
            if _v ->> 'kind' in ('enum', 'number', 'integer', 'boolean') then
                if (_v ->> 'event_time')::timestamptz < (_row.structured_content ->> 'event_time')::timestamptz then
                    continue;  -- older than the value held: the newer one stays
                end if;
            elsif _v ->> 'kind' = 'string_array' then
                _new := (select jsonb_agg(e order by n) from (
                            select distinct on (e) e, n from jsonb_array_elements(
                                (_row.structured_content -> 'value') || _new) with ordinality as a (e, n)
                            order by e, n) as d);
            else
                _new := to_jsonb(membank_private.merge_profile_text(_row.structured_content ->> 'value', _new #>> '{}'));
                select g -> 'value' into _given from jsonb_array_elements(merged) as g
                where g ->> 'schema_id' = _v ->> 'schema_id' and g ->> 'field' = _v ->> 'field' limit 1;
                if _given is not null and lower(_new #>> '{}') <> lower(_row.structured_content ->> 'value') then
                    _spec := membank_private.profile_field_spec(
                        o.options -> 'profile_schemas' -> (_v ->> 'schema_id') -> 'properties' -> (_v ->> 'field'));
                    _reason := membank_private.check_profile_value(_spec, _given);
                    if _reason is null then
                        _new := to_jsonb(btrim(_given #>> '{}'));
                    else
                        perform membank_private.reject_item(o.name, 'CONSOLIDATE', jsonb_build_object(
                            'schema_id', _v ->> 'schema_id', 'field', _v ->> 'field', 'value', _given),
                            format('profile_fields.%s.%s: %s (merged item by item instead)',
                                   _v ->> 'schema_id', _v ->> 'field', _reason));
                    end if;
                end if;
            end if;
            if _new = _row.structured_content -> 'value' then
                continue;  -- nothing new for this field
            end if;
        end if;
        perform membank_private.set_revision_context(
            jsonb_build_object('operation', o.name, 'action', case when _row.name is null then 'CREATE' else 'UPDATE' end,
                               'schema_id', _v ->> 'schema_id', 'field', _v ->> 'field'),
            array(select jsonb_array_elements_text(_v -> 'source_event_ids')),
            jsonb_build_array(jsonb_build_object(
                'schema_id', _v -> 'schema_id', 'field', _v -> 'field', 'value', _v -> 'value',
                'context', _v -> 'context', 'source_event_ids', _v -> 'source_event_ids',
                'event_time', _v -> 'event_time', 'events', (
                    select coalesce(jsonb_agg(e order by n), '[]')
                    from jsonb_array_elements(o.source_events) with ordinality as x (e, n)
                    where _v -> 'source_event_ids' ? (e ->> 'event_id')))));
        if _row.name is null then
            _expire := membank_private.resolve_expire_time((o.options ->> 'ttl')::interval, null);
            if _expire is not null then
                perform membank_private.mark_due(o.scope_id, 'expiry', _expire);  -- Citus: 121_due_work.sql
            end if;
            insert into membank_private.memories as m (scope_id, scope, memory_type, structured_content, expire_time)
            values (o.scope_id, o.scope, 'STRUCTURED_PROFILE',
                    jsonb_build_object('schema_id', _v ->> 'schema_id', 'field', _v ->> 'field', 'value', _new,
                                       'event_time', _v -> 'event_time'),
                    _expire)
            returning * into _row;
            perform membank_private.clear_revision_context();
            perform membank_private.record_generated(o.name, _row, 'CREATED');
        else
            update membank_private.memories as m
            set structured_content = m.structured_content || jsonb_build_object(
                    'value', _new,
                    'event_time', to_jsonb(greatest((_v ->> 'event_time')::timestamptz,
                                                    (m.structured_content ->> 'event_time')::timestamptz)))
            where m.name = _row.name
            returning * into _row;
            perform membank_private.clear_revision_context();
            perform membank_private.record_generated(o.name, _row, 'UPDATED');
        end if;
    end loop;
    perform membank_private.clear_revision_context();
end
$$;

-- name: retrieve_profiles: an exact scope's structured profiles as {schema_id: {field: value}} in one indexed read.
create or replace function membank.retrieve_profiles(scope jsonb, schema_ids text[] default null)
returns jsonb
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _result jsonb;
begin
    -- "" or null names no schema: a caller's mistake, not an empty profile.
    perform membank_private.validate_text_array(schema_ids, 'schema_ids', 1000, 128);
    select coalesce(jsonb_object_agg(p.schema_id, p.profile), '{}') into _result
    from (select m.structured_content ->> 'schema_id' as schema_id,
                 jsonb_object_agg(m.structured_content ->> 'field', m.structured_content -> 'value') as profile
          from membank_private.memories as m
          where m.scope_id = md5(_scope::text)::uuid and m.memory_type = 'STRUCTURED_PROFILE'
            and m.scope = _scope
            and m.structured_content ? 'schema_id'
            and (m.expire_time is null or m.expire_time > statement_timestamp())
            and (schema_ids is null or m.structured_content ->> 'schema_id' = any(schema_ids))
          group by 1) as p;
    return _result;
end
$$;

comment on function membank.retrieve_profiles(jsonb, text[]) is
$$RetrieveProfiles: the structured profiles of one exact scope as one JSON object {schema_id: {field: value}}, read
from the scope's live STRUCTURED_PROFILE field memories through one index range (memories_profile_field_idx); only
the schemas in schema_ids when given (at most 1000 ids of 1..128 characters; a null or empty id is refused). A field
whose memory was deleted or has expired is absent at once; a scope with
no profile gives {}. Raises 22023 naming the argument, 42501 (a role bound to other scopes, bind_role_to_scope).$$;
