-- Applying a consolidation reply: validated as a whole plan first, then
-- applied in fact order, under the scope's write lock, with the candidates
-- re-checked and their rows locked (093_consolidation.sql).
--
-- A model's reply is a plan, and real replies are malformed in ways that
-- item-by-item checks miss: two UPDATEs of one memory (the second
-- overwrites the first with an unrelated fact), two CREATEs of one fact,
-- a DELETE and an UPDATE of one memory. So the whole reply is checked
-- before anything applies: at most one item per fact (fact_index) and one
-- UPDATE or DELETE per memory_name; the first such item in the reply wins
-- (except that an UPDATE beats a DELETE of the same memory) and the others
-- are rejected with the reason. An identical fact is never created twice in
-- one operation.

-- name: check_action: why a consolidation item cannot apply (null when it can), on its own.
-- plan: the batch's candidates; current_revisions: {name: revision} of the
-- live candidate rows; facts: the operation's facts. An UPDATE or DELETE of a
-- memory said after the fact (event times) is rejected as superseded.
create or replace function membank_private.check_action(
    item jsonb, facts jsonb, plan jsonb, current_revisions jsonb
) returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _action text := upper(item ->> 'action');
    _name text := lower(item ->> 'memory_name');
    _entry jsonb;
    _planned jsonb;
    _fact_time timestamptz;
    _memory_time timestamptz;
begin
    if jsonb_typeof(item) <> 'object' then
        return 'item: must be a JSON object';
    end if;
    if _action is null or _action not in ('CREATE', 'UPDATE', 'DELETE', 'NONE') then
        return format('action: %s is not one of CREATE, UPDATE, DELETE, NONE', coalesce(item -> 'action', 'null'));
    end if;
    select p into _entry from jsonb_array_elements(plan) as p
    where jsonb_typeof(item -> 'fact_index') = 'number' and p -> 'index' = item -> 'fact_index';
    if _entry is null then
        return format('fact_index: must be one of %s (the facts of this batch)',
                      (select string_agg(p ->> 'index', ', ' order by (p ->> 'index')::integer)
                       from jsonb_array_elements(plan) as p));
    end if;
    if item ? 'fact' and item -> 'fact' <> 'null'
       and (jsonb_typeof(item -> 'fact') <> 'string' or membank_private.is_blank(item ->> 'fact')
            or length(item ->> 'fact') > 32768) then
        return 'fact: must be a non-empty string of at most 32768 characters';
    end if;
    if _action in ('UPDATE', 'DELETE') then
        select c into _planned from jsonb_array_elements(_entry -> 'candidates') as c
        where lower(c ->> 'name') = _name;
        if _planned is null then
            return format('memory_name: %s was not among the candidates shown to the model for fact_index %s',
                          coalesce(item ->> 'memory_name', 'null'), _entry -> 'index');
        end if;
        if _name like 'fact:%' then
            return null;  -- an earlier fact of this batch: resolved when applied
        end if;
        if current_revisions -> _name is null then
            return format('memory_name: %s was deleted or expired since the model saw it', _name);
        end if;
        if current_revisions -> _name <> _planned -> 'revision' then
            return format('memory_name: %s changed since the model saw it (revision %s, now %s)',
                          _name, _planned -> 'revision', current_revisions -> _name);
        end if;
        _fact_time := (facts -> (_entry ->> 'index')::integer ->> 'event_time')::timestamptz;
        _memory_time := (_planned ->> 'event_time')::timestamptz;
        if _fact_time < _memory_time then
            return format('superseded: memory %s holds a statement said %s, after this fact (said %s); '
                          || 'an older fact never replaces a newer one', _name,
                          membank_private.said_text(_planned -> 'event_time'),
                          membank_private.said_text(facts -> (_entry ->> 'index')::integer -> 'event_time'));
        end if;
    end if;
    return null;
end
$$;

-- name: validate_plan: the items of a consolidation reply that may apply, in fact order; rejects the rest.
-- Returns {"items": [...], "decided": [fact indexes the reply decided on, even by a rejected item]}.
-- One item per fact_index: the first in the reply. One UPDATE or DELETE per
-- memory_name: the first in the reply, except that an UPDATE beats a DELETE
-- of the same memory (the reply says both that something replaces it and
-- that nothing does: keeping the replacement loses nothing).
create or replace function membank_private.validate_plan(
    o membank_private.operations, plan jsonb, items jsonb, current_revisions jsonb
) returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _item jsonb;
    _reasons text [] := '{}';      -- per reply position: why it is rejected (null: accepted)
    _reason text;
    _index integer;
    _name text;
    _fact_owner jsonb := '{}';     -- fact_index -> the reply position of its item
    _memory_owner jsonb := '{}';   -- memory_name -> the reply position of its UPDATE or DELETE
    _owner integer;
    _decided integer [] := '{}';
    _n integer := 0;
begin
    for _item in select i from jsonb_array_elements(items) as i loop
        _n := _n + 1;
        _reason := membank_private.check_action(_item, o.facts, plan, current_revisions);
        _index := null;
        if jsonb_typeof(_item) = 'object' and jsonb_typeof(_item -> 'fact_index') = 'number'
           and plan @> jsonb_build_array(jsonb_build_object('index', _item -> 'fact_index')) then
            -- The model decided on this fact, even if its item is rejected.
            _index := (_item ->> 'fact_index')::numeric::integer;
            _decided := _decided || _index;
        end if;
        if _reason is null and _fact_owner ? _index::text then
            _reason := format('fact_index: %s already has an action earlier in this reply (item %s); one action '
                              || 'per fact', _index, _fact_owner ->> _index::text);
        end if;
        _name := case when upper(_item ->> 'action') in ('UPDATE', 'DELETE') then lower(_item ->> 'memory_name') end;
        if _reason is null and _name is not null and _memory_owner ? _name then
            _owner := (_memory_owner ->> _name)::integer;
            if upper(_item ->> 'action') = 'UPDATE' and upper(items -> (_owner - 1) ->> 'action') = 'DELETE' then
                _reasons[_owner] := format('memory_name: %s also has an UPDATE in this reply (item %s), which is '
                                           || 'kept; one action per memory', _name, _n);
                _fact_owner := _fact_owner - (items -> (_owner - 1) ->> 'fact_index')::numeric::integer::text;
            else
                _reason := format('memory_name: %s already has an %s earlier in this reply (item %s); one action '
                                  || 'per memory', _name, upper(items -> (_owner - 1) ->> 'action'), _owner);
            end if;
        end if;
        _reasons[_n] := _reason;
        if _reason is null then
            _fact_owner := _fact_owner || jsonb_build_object(_index::text, _n);
            if _name is not null then
                _memory_owner := _memory_owner || jsonb_build_object(_name, _n);
            end if;
        end if;
    end loop;
    for _n in 1 .. jsonb_array_length(items) loop
        if _reasons[_n] is not null then
            perform membank_private.reject_item(o.name, 'CONSOLIDATE', items -> (_n - 1), _reasons[_n]);
        end if;
    end loop;
    return jsonb_build_object(
        'items', (select coalesce(jsonb_agg(i order by (i ->> 'fact_index')::numeric::integer, n), '[]')
                  from jsonb_array_elements(items) with ordinality as x (i, n)
                  where _reasons[n] is null),
        'decided', to_jsonb(_decided));
end
$$;

-- name: created_twice: the name of a memory this operation already created with the same text (case-insensitive).
-- operation_scope_id: the operation's scope (its shard, on Citus), which the caller read the operation from.
drop function if exists membank_private.created_twice(uuid, text);
create or replace function membank_private.created_twice(operation_name uuid, fact_text text, operation_scope_id uuid)
returns text
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    return (select g -> 'memory' ->> 'name'
            from membank_private.operations as o, jsonb_array_elements(o.generated_memories) as g
            where o.scope_id = operation_scope_id and o.name = operation_name and g ->> 'action' = 'CREATED'
              and lower(btrim(g -> 'memory' ->> 'fact')) = lower(btrim(fact_text))
            limit 1);
end
$$;

-- name: merged_topics: a memory's topics with added ones, each once, in order (an UPDATE's SET on Citus).
create or replace function membank_private.merged_topics(held text[], added text[])
returns text[]
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select array(select distinct t from unnest(held || added) as t order by t);
$$;

-- name: apply_consolidation: apply one batch's consolidation reply; 'replan', 'next' (another batch) or 'done'.
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
    _first integer := (job.plan -> 0 ->> 'index')::integer;
    _last integer := (job.plan -> -1 ->> 'index')::integer;
    _valid jsonb;
    _item jsonb;
    _fact jsonb;
    _text text;
    _target text;
    _twin text;
    _revisions jsonb;
    _row membank_private.memories;
    _results jsonb := '{}';  -- fact_index -> the memory its action created, updated or found (for fact:j)
    -- generated_memories items of this batch, appended in one update (before
    -- a DELETE: the erasure trigger reads the list to retire the sources)
    _generated jsonb := '[]';
    _vectors vector[];
    _embedded_names text [] := '{}';
    _embedded_facts integer [] := '{}';
    _action text;
    _topics text [];
    _context_set boolean := false;
    _i integer;
begin
    select * into _op from membank_private.operations as o
    where o.scope_id = job.scope_id and o.name = job.operation_name;
    perform membank_private.lock_scope(_op.scope_id);
    -- Profile fields are consolidated with the first batch of facts (next_fact 0) only.
    -- The candidates are searched again only when what they were searched
    -- in changed since the plan (candidates_unchanged, 093_consolidation.sql):
    -- otherwise the search would give the plan's lists back.
    if (not membank_private.candidates_unchanged(_op.scope_id, job.plan_stamp)
        and membank_private.plan_key(membank_private.consolidation_candidates(
            _op, job.fact_embeddings, job.embedding_model, _first, _last)) <> membank_private.plan_key(job.plan)
        or membank_private.profile_plan_key(case when coalesce(job.next_fact, 0) = 0
                                                 then membank_private.profile_plan(_op) else '[]' end)
           <> membank_private.profile_plan_key(coalesce(job.profile_plan, '[]')))
       and job.replans < 3 then
        update membank_private.generation_jobs as j set replans = j.replans + 1, plan = null, profile_plan = null
        where j.scope_id = job.scope_id and j.id = job.id;
        return 'replan';
    end if;
    -- Lock the candidates in name order and read their current revisions.
    select coalesce(jsonb_object_agg(m.name::text, m.revision), '{}') into _revisions
    from (select m.name, m.revision
          from membank_private.memories as m
          where m.scope_id = _op.scope_id and m.name in (select (c ->> 'name')::uuid
                           from jsonb_array_elements(job.plan) as p, jsonb_array_elements(p -> 'candidates') as c
                           where c ->> 'name' not like 'fact:%')
            and membank_private.is_live(m.expire_time)
          order by m.name
          for update) as m;

    _valid := membank_private.validate_plan(_op, job.plan, membank_private.reply_items(reply, 'actions'), _revisions);
    -- A batch with no facts (profile fields only) has no range: coalesce makes the loop empty.
    -- Each write of this loop sets its fact's revision context first, and
    -- the context stays set until the loop ends (on Citus clearing it after
    -- each fact was a statement on the worker per fact).
    for _i in coalesce(_first, 0) .. coalesce(_last, -1) loop
        -- A fact the reply did not mention at all is created: nothing extracted
        -- is lost silently. (A fact whose only item was rejected is not.)
        select i into _item from jsonb_array_elements(_valid -> 'items') as i where (i ->> 'fact_index')::numeric::integer = _i;
        if _item is null and not (_valid -> 'decided') @> to_jsonb(_i) then
            _item := jsonb_build_object('fact_index', _i, 'action', 'CREATE');
        end if;
        continue when _item is null;
        _fact := _op.facts -> _i;
        _text := membank_private.trim_blank(coalesce(_item ->> 'fact', _fact ->> 'fact'));
        _action := upper(_item ->> 'action');
        _target := lower(_item ->> 'memory_name');
        _row := null;
        if _target like 'fact:%' then
            -- fact:j is what fact j's action left: its memory, or nothing.
            _target := _results ->> substr(_target, 6);
            if _target is null then
                _action := case _action when 'UPDATE' then 'CREATE' else 'NONE' end;
            end if;
        end if;
        if _action = 'CREATE' then
            _twin := coalesce(membank_private.created_twice(_op.name, _text, _op.scope_id),
                              (select g -> 'memory' ->> 'name' from jsonb_array_elements(_generated) as g
                               where g ->> 'action' = 'CREATED'
                                 and lower(btrim(g -> 'memory' ->> 'fact')) = lower(btrim(_text))
                               limit 1));
            if _twin is not null then
                perform membank_private.reject_item(_op.name, 'CONSOLIDATE', _item,
                    format('fact: identical to memory %s, created by this operation; a fact is created once', _twin));
                _results := _results || jsonb_build_object(_i::text, _twin);
                continue;
            end if;
            _row := membank_private.insert_fact(_op, _fact, _text, clear_context => false);
            _context_set := true;
            _generated := _generated || jsonb_build_array(membank_private.generated_entry(_row, 'CREATED'));
        elsif _action = 'UPDATE' then
            perform membank_private.set_fact_context(_op, _fact, 'UPDATE');
            _context_set := true;
            -- The topics merged by an immutable function of the column, which
            -- Citus sends with the UPDATE (it runs no sub-query over a column
            -- inside one): the memory as it is under the scope's write lock.
            _topics := array(select jsonb_array_elements_text(_fact -> 'topics'));
            update membank_private.memories as m
            set fact = _text, topics = membank_private.merged_topics(m.topics, _topics)
            where m.scope_id = _op.scope_id and m.name = _target::uuid
              and (m.fact is distinct from _text or not m.topics @> _topics)
            returning * into _row;
            if _row.name is not null then
                _generated := _generated || jsonb_build_array(membank_private.generated_entry(_row, 'UPDATED'));
            end if;
            _results := _results || jsonb_build_object(_i::text, _target);
        elsif _action = 'DELETE' then
            perform membank_private.record_generated_entries(_op.name, _op.scope_id, _generated);
            _generated := '[]';
            perform membank_private.set_fact_context(_op, _fact, 'DELETE');
            _context_set := true;
            delete from membank_private.memories as m where m.scope_id = _op.scope_id and m.name = _target::uuid
            returning * into _row;
            if _row.name is not null then
                _generated := _generated || jsonb_build_array(membank_private.generated_entry(_row, 'DELETED'));
            end if;
            _row := null;
        elsif _revisions ? _target or _target in (select r.value from jsonb_each_text(_results) as r) then
            _results := _results || jsonb_build_object(_i::text, _target);  -- NONE: the memory that holds it
        end if;
        if _row.name is not null then
            _results := _results || jsonb_build_object(_i::text, _row.name::text);
            -- The fact's vector is the memory's when the text is the fact's: store it now.
            if _text = _fact ->> 'fact' then
                _embedded_names := _embedded_names || _row.name::text;
                _embedded_facts := _embedded_facts || _i;
            end if;
        end if;
    end loop;
    if _context_set then
        perform membank_private.clear_revision_context();  -- later statements do not inherit the last fact's
    end if;
    perform membank_private.record_generated_entries(_op.name, _op.scope_id, _generated);
    if cardinality(_embedded_names) > 0 and job.fact_embeddings is not null then
        -- the rows unpacked once (fact_vectors): a slice of the record's array per fact copied all of it
        _vectors := membank_private.fact_vectors(job.fact_embeddings);
        -- as vectors: text, parsed back, cost more than the writes
        perform membank_private.store_vectors(
            job.embedding_model, array_length(job.fact_embeddings, 2), _embedded_names::uuid [],
            array(select md5(_op.facts -> x.i ->> 'fact')::uuid
                  from unnest(_embedded_facts) with ordinality as x (i, n) order by x.n),
            array(select _vectors[x.i + 1]
                  from unnest(_embedded_facts) with ordinality as x (i, n) order by x.n),
            _op.scope_id);
    end if;
    if coalesce(job.next_fact, 0) = 0 then
        -- The profile fields, field by field; the model's merged values where it gave them.
        perform membank_private.apply_profile_values(_op, coalesce(
            case when jsonb_typeof(reply -> 'profile_fields') = 'array' then reply -> 'profile_fields' end, '[]'));
    end if;
    if _last + 1 < jsonb_array_length(_op.facts) then
        -- The next batch is planned against what this one wrote, in a new transaction.
        update membank_private.generation_jobs as j
        set next_fact = _last + 1, plan = null, profile_plan = null, replans = 0, attempts = 0, last_error = null
        where j.scope_id = job.scope_id and j.id = job.id;
        return 'next';
    end if;
    perform membank_private.finish_operation(_op.name, operation_scope_id => _op.scope_id);
    return 'done';
end
$$;
