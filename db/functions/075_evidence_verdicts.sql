-- Evidence verdicts: the check at the context boundary, in one round trip.
--
-- Before a memory enters an agent's prompt it is judged again against the
-- bank's current state (pyclient/membank/context.py assembles the prompt):
-- * block:   its scope is not one of the requested scopes, or it is
--            deleted, expired or not fetchable in the requested scopes;
-- * wait:    a GenerateMemories operation of this session is still running
--            in its scope, so it may be about to change (it still enters);
-- * degrade: weaker evidence than a clean hit: expected but missed by
--            similarity search, a revision newer than the one retrieved (the
--            current revision enters), or matched by text only (no vector);
-- * allow:   retrieved, in scope, current revision, embedded.
-- Every lookup is bound to the exact requested scopes: a memory of another
-- scope reads as not fetchable, and its text, revisions and times are never
-- read. Verdicts rest on state (live, expire_time, revision actions), never
-- on fact text.

-- name: evidence_verdicts: judge retrieved and expected memories for a session's context.
create or replace function membank.evidence_verdicts(
    scopes jsonb,
    session_id text default null,
    retrieved jsonb default '[]',
    expected text[] default null,
    generated_lookback integer default 5
) returns table (
    memory_name uuid,
    verdict text,
    reason text,
    source text,
    rank integer,
    scope jsonb,
    retrieved_revision integer,
    revision integer,
    create_time timestamptz,
    update_time timestamptz,
    expire_time timestamptz,
    operation uuid,
    checked_time timestamptz,
    memory_type text,
    fact text,
    structured_content jsonb,
    topics text[],
    metadata jsonb
)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scopes jsonb [] := membank_private.validate_scopes(scopes, 'scopes');
    -- Every read below names the scope_id (on Citus: the scope's shard, not every shard).
    _scope_ids uuid [] := array(select md5(s::text)::uuid from unnest(_scopes) as s);
    _now timestamptz := statement_timestamp();
    _running jsonb := '{}';  -- scope_id (text) -> newest running operation of the session
    _expected uuid [] := '{}';
    _generated uuid [] := '{}';
    _seen uuid [] := '{}';
    _item jsonb;
    _ordinal integer;
    _name uuid;
    _scope jsonb;
    _rev integer;
    _source text;
    _text_only boolean;
    _m membank_private.memories;
    _first membank_private.memory_revisions;
    _last membank_private.memory_revisions;
    _op record;
    _g jsonb;
begin
    if retrieved is null then
        retrieved := '[]';
    end if;
    if jsonb_typeof(retrieved) <> 'array' or jsonb_array_length(retrieved) > 1000 then
        perform membank_private._raise_invalid('retrieved',
            format('must be a JSON array of at most 1000 objects, got %s', jsonb_typeof(retrieved)),
            'pass retrieve_memories rows in rank order as [{"name", "scope", "revision", "degraded"}]');
    end if;
    if cardinality(expected) > 1000 then
        perform membank_private._raise_invalid('expected', format('lists %s names', cardinality(expected)),
            'pass at most 1000 memory names');
    end if;
    if generated_lookback is null or generated_lookback not between 0 and 10000 then
        perform membank_private._raise_invalid('generated_lookback',
            format('must be between 0 and 10000, got %s', coalesce(generated_lookback::text, 'null')),
            'the default is 5; 0 expects nothing from the session''s operations');
    end if;
    -- Validate every retrieved item before judging any (nothing half-answered).
    for _item, _ordinal in select e, o from jsonb_array_elements(retrieved) with ordinality as x (e, o) loop
        if jsonb_typeof(_item) <> 'object' or jsonb_typeof(_item -> 'name') is distinct from 'string'
           or jsonb_typeof(_item -> 'scope') is distinct from 'object'
           or coalesce(jsonb_typeof(_item -> 'revision'), 'number') not in ('number', 'null')
           or coalesce(jsonb_typeof(_item -> 'degraded'), 'boolean') not in ('boolean', 'null') then
            perform membank_private._raise_invalid('retrieved',
                format('item %s must be an object with name (text), scope (object), revision (integer) and '
                       'degraded (boolean)', _ordinal),
                'e.g. [{"name": "<uuid>", "scope": {"user_id": "u1"}, "revision": 1, "degraded": false}]');
        end if;
        perform membank_private.parse_name(_item ->> 'name', 'retrieved');
    end loop;
    _expected := coalesce((select array_agg(membank_private.parse_name(e, 'expected') order by o)
                           from unnest(expected) with ordinality as x (e, o)), '{}');

    -- This session's operations, per requested scope: the newest running one
    -- gives wait; the generated_lookback newest finished ones (oldest first,
    -- those without error) name the memories the session expects to see.
    if session_id is not null then
        for _scope in select s from unnest(_scopes) as s loop
            select o.name into _op from membank_private.operations as o
            where o.scope_id = md5(_scope::text)::uuid and o.scope = _scope
              and o.session_id = evidence_verdicts.session_id and not o.done
            order by o.create_time desc, o.name limit 1;
            if found then
                _running := _running || jsonb_build_object(md5(_scope::text), _op.name);
            end if;
            if generated_lookback > 0 then
                for _op in
                    select f.* from (
                        select o.error, o.generated_memories, o.create_time, o.name
                        from membank_private.operations as o
                        where o.scope_id = md5(_scope::text)::uuid and o.scope = _scope
                          and o.session_id = evidence_verdicts.session_id and o.done
                        order by o.create_time desc, o.name limit generated_lookback
                    ) as f
                    order by f.create_time, f.name desc
                loop
                    continue when _op.error is not null;
                    for _g in select e from jsonb_array_elements(_op.generated_memories) as e loop
                        _name := (_g -> 'memory' ->> 'name')::uuid;
                        if _g ->> 'action' = 'DELETED' then
                            _generated := array_remove(_generated, _name);
                        elsif not _name = any(_generated) then
                            _generated := _generated || _name;
                        end if;
                    end loop;
                end loop;
            end if;
        end loop;
    end if;

    -- Retrieved memories in rank order, then expected ones not retrieved.
    for _item, _ordinal, _source in
        select e, o::integer, 'retrieval' from jsonb_array_elements(retrieved) with ordinality as x (e, o)
        union all
        select jsonb_build_object('name', e), o::integer, 'expected'
        from unnest(_expected || _generated) with ordinality as x (e, o)
        order by 3 desc, 2
    loop
        _name := (_item ->> 'name')::uuid;
        if _source = 'expected' then
            continue when _name = any(_seen);
        end if;
        _seen := _seen || _name;
        _scope := _item -> 'scope';
        _rev := (_item ->> 'revision')::integer;
        _text_only := coalesce((_item ->> 'degraded')::boolean, false);
        memory_name := _name;
        source := _source;
        rank := case when _source = 'retrieval' then _ordinal end;
        scope := _scope;
        retrieved_revision := _rev;
        checked_time := _now;
        revision := null; create_time := null; update_time := null; expire_time := null; operation := null;
        memory_type := null; fact := null; structured_content := null; topics := null; metadata := null;
        if _scope is not null and not _scope = any(_scopes) then
            verdict := 'block';
            reason := 'scope differs from the requested scopes';
            return next;
            continue;
        end if;
        -- The row, live or not, but only in the given scope (expected: any requested scope).
        select * into _m from membank_private.memories as m
        where m.scope_id = any(case when _scope is null then _scope_ids else array[md5(_scope::text)::uuid] end)
          and m.name = _name and m.scope = any(case when _scope is null then _scopes else array[_scope] end);
        if _m.name is null then
            select * into _last from membank_private.memory_revisions as r
            where r.scope_id = any(case when _scope is null then _scope_ids else array[md5(_scope::text)::uuid] end)
              and r.memory_name = _name and r.scope = any(case when _scope is null then _scopes else array[_scope] end)
            order by r.revision desc limit 1;
            verdict := 'block';
            if _last.memory_name is null then
                reason := case when _scope is null then 'expected but not fetchable in the requested scopes'
                               else 'not fetchable: no memory or revision of that name in its scope' end;
            else
                select * into _first from membank_private.memory_revisions as r
                where r.scope_id = _last.scope_id and r.memory_name = _name and r.scope = _last.scope
                order by r.revision limit 1;
                revision := _last.revision;
                update_time := _last.create_time;
                expire_time := _last.expire_time;
                create_time := _first.create_time;
                reason := case
                    when _last.action = 'DELETED' then format('deleted (revision %s)', _last.revision)
                    when _last.expire_time <= _now then 'expired'
                    when _scope is null then 'expected but not fetchable in the requested scopes'
                    else 'not fetchable although its last revision is live' end;
            end if;
            return next;
            continue;
        end if;
        scope := _m.scope;
        revision := _m.revision;
        create_time := _m.create_time;
        update_time := _m.update_time;
        expire_time := _m.expire_time;
        if _m.expire_time <= _now then
            verdict := 'block';
            reason := 'expired';
            return next;
            continue;
        end if;
        operation := (_running ->> md5(_m.scope::text))::uuid;
        if operation is not null then
            verdict := 'wait';
            reason := 'a GenerateMemories operation of this session is still running in its scope';
        elsif _source = 'expected' then
            verdict := 'degrade';
            reason := 'listing its scope finds it; similarity search missed it';
        elsif _rev is not null and _rev <> _m.revision then
            verdict := 'degrade';
            reason := format('stale revision: retrieved revision %s, current %s; the current revision enters',
                             _rev, _m.revision);
        elsif _text_only then
            verdict := 'degrade';
            reason := 'matched by text only: no current vector';
        else
            verdict := 'allow';
            reason := 'retrieved in scope, current revision, embedded';
        end if;
        memory_type := _m.memory_type;
        fact := _m.fact;
        structured_content := _m.structured_content;
        topics := _m.topics;
        metadata := _m.metadata;
        return next;
    end loop;
end
$$;

comment on function membank.evidence_verdicts(jsonb, text, jsonb, text[], integer) is
$$Evidence verdicts at the context boundary, one row per memory considered: the retrieved ones in rank order, then
the expected ones not retrieved. scopes: the exact scope (JSON object) or scopes (array of 1..16) the context is for;
session_id: the session (null: no operations are consulted); retrieved: JSON array of retrieve_memories results as
{"name", "scope", "revision" (as retrieved), "degraded" (text-only match)}, at most 1000; expected: names (uuid as
text) of memories that should be there, at most 1000; generated_lookback (0..10000, default 5): the memories created
or updated (and not later deleted) by the session's that many newest finished GenerateMemories operations without
error are expected too. Each row: memory_name, verdict (allow | degrade | wait | block), reason, source (retrieval |
expected), rank (1-based, retrieved only), scope, retrieved_revision, the evidence revision, create_time, update_time,
expire_time (of the live memory; of its last revision when it is gone), operation (the newest running operation of
the session in its scope, for wait), checked_time (statement time); and, only for a memory that may enter (allow,
degrade, wait), its current memory_type, fact, structured_content, topics and metadata. block: scope not requested,
deleted, expired, or not fetchable in the requested scopes (a memory of another scope is never read). wait: an
operation of this session is still running in its scope. degrade: expected but missed by similarity; revision changed
since retrieval (the current one enters); text-only match. allow: otherwise. Raises 22023 naming scopes, retrieved,
expected or generated_lookback; 22P02 for a malformed name in retrieved or expected.
Columns:
- memory_name: the memory considered.
- verdict: allow, degrade, wait or block.
- reason: why, in words.
- source: retrieval (it was in retrieved) or expected (expected and not retrieved).
- rank: its 1-based position in retrieved (null for expected).
- scope: the memory's exact scope.
- retrieved_revision: the revision that retrieval saw.
- revision: the evidence revision (the current one, or the last one when the memory is gone).
- create_time: the memory's create_time.
- update_time: its update_time.
- expire_time: its expire_time (of its last revision when it is gone).
- operation: for wait, the newest running operation of the session in its scope.
- checked_time: when the verdict was made (statement time).
- memory_type: for allow, degrade and wait: its current memory_type (else null, as the four below).
- fact: its current fact.
- structured_content: its current structured_content.
- topics: its current topics.
- metadata: its current metadata.$$;
