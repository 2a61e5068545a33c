-- Applying a consolidation reply: item by item, under the scope's write lock,
-- with the candidates re-checked and their rows locked (093_consolidation.sql).

-- name: check_action: why a consolidation item cannot apply (null when it can).
create or replace function membank_private.check_action(
    item jsonb, fact_count integer, plan jsonb, current_revisions jsonb
) returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _action text := upper(item ->> 'action');
    _name text := lower(item ->> 'memory_name');
    _planned jsonb;
begin
    if jsonb_typeof(item) <> 'object' then
        return 'item: must be a JSON object';
    end if;
    if _action is null or _action not in ('CREATE', 'UPDATE', 'DELETE', 'NONE') then
        return format('action: %s is not one of CREATE, UPDATE, DELETE, NONE', coalesce(item -> 'action', 'null'));
    end if;
    if jsonb_typeof(item -> 'fact_index') is distinct from 'number'
       or (item ->> 'fact_index')::numeric not between 0 and fact_count - 1
       or (item ->> 'fact_index')::numeric <> floor((item ->> 'fact_index')::numeric) then
        return format('fact_index: must be an integer between 0 and %s', fact_count - 1);
    end if;
    if item ? 'fact' and item -> 'fact' <> 'null'
       and (jsonb_typeof(item -> 'fact') <> 'string' or membank_private.is_blank(item ->> 'fact')
            or length(item ->> 'fact') > 32768) then
        return 'fact: must be a non-empty string of at most 32768 characters';
    end if;
    if _action in ('UPDATE', 'DELETE') then
        select c into _planned
        from jsonb_array_elements(plan) as p, jsonb_array_elements(p -> 'candidates') as c
        where c ->> 'name' = _name
        limit 1;
        if _planned is null then
            return format('memory_name: %s was not among the candidates shown to the model',
                          coalesce(item ->> 'memory_name', 'null'));
        end if;
        if current_revisions -> _name is null then
            return format('memory_name: %s was deleted or expired since the model saw it', _name);
        end if;
        if current_revisions -> _name <> _planned -> 'revision' then
            return format('memory_name: %s changed since the model saw it (revision %s, now %s)',
                          _name, _planned -> 'revision', current_revisions -> _name);
        end if;
    end if;
    return null;
end
$$;

-- name: apply_consolidation: apply a consolidation reply; 'replan' when the candidates changed since planning.
create or replace function membank_private.apply_consolidation(
    job membank_private.generation_jobs, reply jsonb
) returns text
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _op membank_private.operations;
    _items jsonb := case jsonb_typeof(reply) when 'array' then reply else reply -> 'actions' end;
    _item jsonb;
    _fact jsonb;
    _text text;
    _reason text;
    _revisions jsonb;
    _row membank_private.memories;
    _decided integer [] := '{}';
    _embedded_names text [] := '{}';
    _embedded_facts integer [] := '{}';
    _i integer;
begin
    select * into _op from membank_private.operations as o where o.name = job.operation_name;
    perform membank_private.lock_scope(_op.scope_id);
    if membank_private.plan_key(membank_private.consolidation_candidates(
           _op, job.fact_embeddings, job.embedding_model)) <> membank_private.plan_key(job.plan)
       and job.replans < 3 then
        update membank_private.generation_jobs as j set replans = j.replans + 1, plan = null where j.id = job.id;
        return 'replan';
    end if;
    -- Lock the candidates in name order and read their current revisions.
    select coalesce(jsonb_object_agg(m.name::text, m.revision), '{}') into _revisions
    from (select m.name, m.revision
          from membank_private.memories as m
          where m.name in (select (c ->> 'name')::uuid
                           from jsonb_array_elements(job.plan) as p, jsonb_array_elements(p -> 'candidates') as c)
            and membank_private.is_live(m.expire_time)
          order by m.name
          for update) as m;

    for _item in select i from jsonb_array_elements(_items) as i loop
        _reason := membank_private.check_action(_item, jsonb_array_length(_op.facts), job.plan, _revisions);
        if jsonb_typeof(_item -> 'fact_index') = 'number'
           and (_item ->> 'fact_index')::numeric between 0 and jsonb_array_length(_op.facts) - 1 then
            -- The model decided on this fact, even if its item is rejected.
            _decided := _decided || floor((_item ->> 'fact_index')::numeric)::integer;
        end if;
        if _reason is not null then
            perform membank_private.reject_item(_op.name, 'CONSOLIDATE', _item, _reason);
            continue;
        end if;
        _i := (_item ->> 'fact_index')::integer;
        _fact := _op.facts -> _i;
        _text := membank_private.trim_blank(coalesce(_item ->> 'fact', _fact ->> 'fact'));
        case upper(_item ->> 'action')
            when 'CREATE' then
                _row := membank_private.apply_create(_op, _fact, _text);
            when 'UPDATE' then
                perform membank_private.set_fact_context(_op, _fact, 'UPDATE');
                update membank_private.memories as m
                set fact = _text,
                    topics = array(select distinct t from unnest(m.topics || array(
                        select jsonb_array_elements_text(_fact -> 'topics'))) as t order by t)
                where m.name = (_item ->> 'memory_name')::uuid
                  and (m.fact is distinct from _text
                       or not m.topics @> array(select jsonb_array_elements_text(_fact -> 'topics')))
                returning * into _row;
                perform membank_private.clear_revision_context();
                -- _revisions keeps the planned revision: a later item of this
                -- reply may change the same memory again.
                if _row.name is not null then
                    perform membank_private.record_generated(_op.name, _row, 'UPDATED');
                end if;
            when 'DELETE' then
                perform membank_private.set_fact_context(_op, _fact, 'DELETE');
                delete from membank_private.memories as m where m.name = (_item ->> 'memory_name')::uuid
                returning * into _row;
                perform membank_private.clear_revision_context();
                _revisions := _revisions - (_item ->> 'memory_name');
                perform membank_private.record_generated(_op.name, _row, 'DELETED');
                _row := null;
            else
                _row := null;
        end case;
        -- The fact's vector is the memory's when the text is the fact's: store it now.
        if _row.name is not null and _text = _fact ->> 'fact' then
            _embedded_names := _embedded_names || _row.name::text;
            _embedded_facts := _embedded_facts || _i;
        end if;
    end loop;
    -- A fact the reply did not mention at all is created: nothing extracted is
    -- lost silently. (A fact whose only item was rejected is not.)
    for _i in 0 .. jsonb_array_length(_op.facts) - 1 loop
        if _i <> all(_decided) then
            _fact := _op.facts -> _i;
            _row := membank_private.apply_create(_op, _fact, _fact ->> 'fact');
            _embedded_names := _embedded_names || _row.name::text;
            _embedded_facts := _embedded_facts || _i;
        end if;
    end loop;
    if cardinality(_embedded_names) > 0 and job.fact_embeddings is not null then
        perform membank.store_embeddings(
            job.embedding_model, array_length(job.fact_embeddings, 2), _embedded_names,
            array(select md5(_op.facts -> x.i ->> 'fact')
                  from unnest(_embedded_facts) with ordinality as x (i, n) order by x.n),
            array(select array(select unnest(job.fact_embeddings[x.i + 1:x.i + 1]))::vector::text
                  from unnest(_embedded_facts) with ordinality as x (i, n) order by x.n));
    end if;
    perform membank_private.finish_operation(_op.name);
    return 'done';
end
$$;
