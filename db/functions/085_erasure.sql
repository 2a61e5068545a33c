-- Erasure: what a memory bank forgets, and how it makes sure nothing of it
-- can be read back.
--
-- Three ways a fact leaves the bank, each with its own promise:
--   * expired (expire_time passed): invisible at once. Reads of the memory
--     fail (P0002); its revisions and the operations that wrote it show the
--     name, action and times, never the text (redacted when read).
--   * purged (purge_memories, or purge_expired_memories after expiry): the
--     text is destroyed, not hidden. Its revisions are redacted in place
--     (text columns set to null and the caller's labels removed, kept_labels:
--     the only change revision immutability allows), the events it was extracted from lose their text, and the
--     operations that wrote it lose its text and its source events' text.
--   * deleted (delete_memory, or DELETE by consolidation): rollback may bring
--     it back, so its revisions stay readable until the retention window
--     (retention_settings.deleted_revisions, default 30 days) and are then
--     removed by membank.apply_retention(); operation results never show its
--     text once it is deleted. A memory deleted before its expire_time is
--     expired when that time passes, as if it had lived: its revisions show
--     no text and it cannot be rolled back (is_expired), and
--     purge_expired_memories forgets it as it purges an expired one
--     (forget_expired_deletions: forget_memory, no new revision).
-- erase_scope removes everything stored under one exact scope at once.
--
-- Copies of the text. An operation keeps what it learns from (source events,
-- facts given or extracted, profile values and the context they were said
-- in) only while it runs: finish_operation replaces each source event's text
-- by its digest and drops the facts' and profile values' text
-- (strip_operation_text). What stays readable is its result,
-- generated_memories, which is redacted when read for a memory that is not
-- live and destroyed in place when that memory is purged. A purge
-- (purge_memories(force => true), purge_memories_in_batches) forgets the
-- scope's deleted memories matching its filters too (forget_deleted_memories):
-- a memory deleted before a purge is purged with the rest, its rollback
-- window ends. Conversation events that never became a memory are not
-- memories: they go with the events window of apply_retention, with their
-- session, or with erase_scope.
--
-- No resurrection. Every deletion of a memory (delete_memory, consolidation,
-- compaction, purge, expiry) records digests of the events it came from in
-- retired_sources (retire_sources); an extraction whose every source event
-- is retired is rejected with the deleted memory's name (retired_by, in
-- accept_extracted_facts), so generating the same session again with a new
-- request_id does not re-create what a user deleted. A new event, even with
-- the same words, has another id and so another digest: it can. Rollback of
-- a deleted memory releases its digests. Digests are md5 of event id and
-- text: they outlive a purge (which destroys the text) and go with erase_scope.
-- Why redact in place rather than delete a purged memory's revisions: the
-- history that a memory existed, when and by which operation stays auditable
-- (GDPR art. 17 asks that the personal data go, not the record of erasure).

-- name: redact_revision: a revision without its text (fact, structured content, metadata, extraction context).
create or replace function membank_private.redact_revision(r membank.memory_revision)
returns membank.memory_revision
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    r.fact := null;
    r.previous_fact := null;
    r.structured_content := null;
    r.previous_structured_content := null;
    r.metadata := '{}';
    r.extracted_memories := null;
    return r;
end
$$;

-- name: kept_labels: the labels of a revision that survive its memory's erasure: only those membank itself wrote.
-- A caller's labels (create_memory, update_memory, delete_memory: any JSON
-- object) may quote the memory's text, so they go with it; what stays is
-- the record of what happened: {"reason": "purge" | "expired" |
-- "delete_profile_schema"}, {"rollback_to": n}, and an operation's
-- {"operation": name, "action": ..., "compacted_into": name}.
create or replace function membank_private.kept_labels(labels jsonb)
returns jsonb
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_object_agg(l.key, l.value), '{}')
    from jsonb_each(case when jsonb_typeof(labels) = 'object' then labels else '{}' end) as l (key, value)
    where (l.key = 'reason' and l.value in ('"purge"', '"expired"', '"delete_profile_schema"'))
       or (l.key = 'rollback_to' and jsonb_typeof(l.value) = 'number')
       or (l.key in ('operation', 'compacted_into') and jsonb_typeof(l.value) = 'string'
           and (l.value #>> '{}') ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
       or (l.key = 'action'
           and l.value in ('"COMPACT"', '"CREATED"', '"UPDATED"', '"DELETED"', '"CREATE"', '"UPDATE"', '"DELETE"'));
$$;

-- name: is_redacted_update: true when an UPDATE of a revision only removes its text.
create or replace function membank_private.is_redacted_update(
    o membank_private.memory_revisions, n membank_private.memory_revisions
) returns boolean
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select n.fact is null and n.previous_fact is null and n.structured_content is null
           and n.previous_structured_content is null and n.extracted_memories is null and n.metadata = '{}'
           -- the caller's labels go too (kept_labels)
           and n.labels in (o.labels, membank_private.kept_labels(o.labels))
           and (n.memory_name, n.revision, n.scope_id, n.scope, n.action, n.memory_type, n.topics, n.expire_time,
                n.source_event_ids, n.create_time)
               is not distinct from
               (o.memory_name, o.revision, o.scope_id, o.scope, o.action, o.memory_type, o.topics, o.expire_time,
                o.source_event_ids, o.create_time);
$$;

-- name: redact_generated: generated_memories with the text of non-live memories (or of one memory) removed.
-- only_name = null: every entry whose memory is not live now (deleted, expired,
-- purged) loses fact, structured_content and metadata; only_name = a name: that
-- memory's entries, whatever its state (used when it is purged).
create or replace function membank_private.redact_generated(generated jsonb, only_name uuid default null)
returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _live uuid [];
begin
    if only_name is null and jsonb_array_length(generated) > 0 then
        -- The live ones among the named memories, read by (scope_id, name)
        -- before the items are walked: on Citus one read of the scope's
        -- shard (the memory as stored carries its scope), where a lookup
        -- per item would be a correlated query on every shard.
        _live := array(
            select m.name
            from membank_private.memories as m
            where m.scope_id = any(array(select md5((g -> 'memory' -> 'scope')::text)::uuid
                                         from jsonb_array_elements(generated) as x (g)))
              and m.name = any(array(select (g -> 'memory' ->> 'name')::uuid
                                     from jsonb_array_elements(generated) as x (g)))
              and (m.expire_time is null or m.expire_time > statement_timestamp()));
    end if;
    return (
        select coalesce(jsonb_agg(
            case when (only_name is null and (g -> 'memory' ->> 'name')::uuid = any(_live))
                      or (only_name is not null and g -> 'memory' ->> 'name' is distinct from only_name::text)
                 then g
                 else jsonb_set(g, '{memory}', coalesce(g -> 'memory', '{}')
                                || '{"fact": null, "structured_content": null, "metadata": {}}')
            end order by x.n), '[]')
        from jsonb_array_elements(generated) with ordinality as x (g, n));
end
$$;

-- name: redact_rejected: rejected_items with the items that quote or name a forgotten memory emptied.
-- only_name = null: items naming (memory_name) a memory that existed and is
-- not live now (deleted, expired, purged) lose their item; only_name = a name (a purge): items naming it, or holding
-- one of its texts (facts) as any value, lose their item. Stage and reason stay.
create or replace function membank_private.redact_rejected(
    rejected jsonb, only_name uuid default null, facts text[] default null
)
returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _named uuid [];
    _existed uuid [];
    _live uuid [];
begin
    -- The named memories' state, read before the items are walked (on Citus
    -- a lookup per item would be a correlated query over the shards).
    if only_name is null then
        _named := array(select (r -> 'item' ->> 'memory_name')::uuid
                        from jsonb_array_elements(rejected) as x (r)
                        where r -> 'item' ->> 'memory_name' ~ '^[0-9a-fA-F-]{36}$');
    end if;
    if cardinality(_named) > 0 then
        _existed := array(select distinct v.memory_name from membank_private.memory_revisions as v
                          where v.memory_name = any(_named));
        _live := array(select m.name from membank_private.memories as m
                       where m.name = any(_named)
                         and (m.expire_time is null or m.expire_time > statement_timestamp()));
    end if;
    return (
    select coalesce(jsonb_agg(
        case when (only_name is null and r -> 'item' ->> 'memory_name' ~ '^[0-9a-fA-F-]{36}$'
                   -- a memory that existed (it has revisions) and is not live now; a name
                   -- no memory ever had is the model's mistake, shown as it was offered
                   and (r -> 'item' ->> 'memory_name')::uuid = any(_existed)
                   and not (r -> 'item' ->> 'memory_name')::uuid = any(coalesce(_live, '{}')))
                  or (only_name is not null and (
                       lower(r -> 'item' ->> 'memory_name') = only_name::text
                       or exists (select from jsonb_path_query(r -> 'item', 'strict $.**') as v (value)
                                  where jsonb_typeof(v.value) = 'string' and v.value #>> '{}' = any(facts))))
             then r || '{"item": null}'
             else r
        end order by x.n), '[]')
    from jsonb_array_elements(rejected) with ordinality as x (r, n));
end
$$;

-- name: event_digest: the digest of one source event (its id and text) that retired_sources records; null without text.
create or replace function membank_private.event_digest(event_id text, event_text text)
returns uuid
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case when event_text is not null then md5(jsonb_build_array(event_id, event_text)::text)::uuid end;
$$;

-- name: strip_operation_text: an operation's inputs without their text (source events by digest), once it is done.
-- Takes and returns the three columns (not the row type), so that older
-- migrations' downgrades can drop the operations table without this function.
create or replace function membank_private.strip_operation_text(
    inout source_events jsonb, inout facts jsonb, inout profile_values jsonb
)
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select
        (select coalesce(jsonb_agg(case when e ? 'text'
                                        then (e - 'text') || jsonb_build_object('digest', coalesce(e ->> 'digest',
                                                 membank_private.event_digest(e ->> 'event_id', e ->> 'text')::text))
                                        else e end order by x.n), '[]')
         from jsonb_array_elements(source_events) with ordinality as x (e, n)),
        -- Direct facts are {"fact", ...}; compaction's candidates carry "fact" too.
        (select coalesce(jsonb_agg(case when jsonb_typeof(f) = 'object' then f || '{"fact": null}'
                                        else 'null'::jsonb end order by x.n), '[]')
         from jsonb_array_elements(facts) with ordinality as x (f, n)),
        (select coalesce(jsonb_agg(case when jsonb_typeof(v) = 'object' then v || '{"value": null, "context": null}'
                                        else 'null'::jsonb end order by x.n), '[]')
         from jsonb_array_elements(profile_values) with ordinality as x (v, n));
$$;

-- name: retire_sources: record the digests of a deleted memory's source events (085_erasure.sql: no resurrection).
create or replace function membank_private.retire_sources(name uuid, scope_id uuid, scope jsonb)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _event_ids text [] := array(
        select distinct s.id from membank_private.memory_revisions as r
        cross join lateral unnest(r.source_event_ids) as s (id)
        where r.scope_id = retire_sources.scope_id and r.memory_name = retire_sources.name);
begin
    if cardinality(_event_ids) = 0 then
        return;
    end if;
    -- The events as stored (by scope and id) and as the operations that wrote
    -- the memory saw them (inline events are stored nowhere else).
    insert into membank_private.retired_sources as t (scope_id, scope, digest, memory_name)
    select distinct retire_sources.scope_id, retire_sources.scope, d.digest, retire_sources.name
    from (
        select membank_private.event_digest(e.event_id, e.text) as digest
        from membank_private.events as e
        where e.scope_id = retire_sources.scope_id and e.event_id = any(_event_ids)
        union all
        select coalesce((e ->> 'digest')::uuid, membank_private.event_digest(e ->> 'event_id', e ->> 'text'))
        from membank_private.operations as o
        cross join lateral jsonb_array_elements(o.source_events) as e
        where o.scope_id = retire_sources.scope_id
          and o.generated_memories @> jsonb_build_array(
              jsonb_build_object('memory', jsonb_build_object('name', retire_sources.name)))
          and e ->> 'event_id' = any(_event_ids)
    ) as d
    where d.digest is not null
    on conflict do nothing;
end
$$;

-- name: retired_by: the deleted memory whose retired source events are all of these sources' events, or null.
create or replace function membank_private.retired_by(scope_id uuid, events jsonb, sources text[])
returns uuid
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    with d as (
        select distinct coalesce((e ->> 'digest')::uuid,
                                 membank_private.event_digest(e ->> 'event_id', e ->> 'text')) as digest
        from jsonb_array_elements(events) as e
        where e ->> 'event_id' = any(sources)
    ), m as (
        select (select min(r.memory_name::text) from membank_private.retired_sources as r
                where r.scope_id = retired_by.scope_id and r.digest = d.digest) as name
        from d
    )
    select case when count(*) > 0 and count(m.name) = count(*) then min(m.name)::uuid end from m;
$$;

-- name: forget_deleted_memories: destroy the text of a scope's deleted (not live, not purged) memories that match.
-- Their last revision (the deletion) holds the metadata and topics the filters match.
create or replace function membank_private.forget_deleted_memories(
    scope_id uuid, scope jsonb, metadata_filter jsonb, topics text[]
) returns bigint
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _name uuid;
    _count bigint := 0;
begin
    for _name in
        select l.memory_name
        from membank_private.memory_revisions as l
        where l.scope_id = forget_deleted_memories.scope_id and l.scope = forget_deleted_memories.scope
          and l.action = 'DELETED'
          -- Every correlation names scope_id too: on Citus the subqueries then run on the scope's shard.
          and not exists (select from membank_private.memory_revisions as x
                          where x.scope_id = l.scope_id and x.memory_name = l.memory_name and x.revision > l.revision)
          and not exists (select from membank_private.memories as m
                          where m.scope_id = l.scope_id and m.name = l.memory_name)
          and (metadata_filter is null or l.metadata @> metadata_filter)
          and (forget_deleted_memories.topics is null or l.topics && forget_deleted_memories.topics)
          and exists (select from membank_private.memory_revisions as t
                      where t.scope_id = l.scope_id and t.memory_name = l.memory_name
                        and (t.fact is not null or t.previous_fact is not null or t.structured_content is not null
                             or t.previous_structured_content is not null or t.extracted_memories is not null))
        order by l.memory_name
    loop
        perform membank_private.forget_memory(_name, forget_deleted_memories.scope_id);
        _count := _count + 1;
    end loop;
    return _count;
end
$$;

-- name: forget_memory: destroy a purged memory's text wherever it is stored (revisions, source events, operations).
create or replace function membank_private.forget_memory(name uuid, scope_id uuid)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _event_ids text [];
    _facts text [];
    _op record;
begin
    select array_agg(distinct s.id) into _event_ids
    from membank_private.memory_revisions as r
    cross join lateral unnest(r.source_event_ids) as s (id)
    where r.scope_id = forget_memory.scope_id and r.memory_name = forget_memory.name;
    select array_agg(distinct f.fact) into _facts
    from membank_private.memory_revisions as r
    cross join lateral (values (r.fact), (r.previous_fact)) as f (fact)
    where r.scope_id = forget_memory.scope_id and r.memory_name = forget_memory.name and f.fact is not null;

    update membank_private.memory_revisions as r
    set fact = null, previous_fact = null, structured_content = null, previous_structured_content = null,
        metadata = '{}', extracted_memories = null, labels = membank_private.kept_labels(r.labels)
    where r.scope_id = forget_memory.scope_id and r.memory_name = forget_memory.name
      and (r.fact is not null or r.previous_fact is not null or r.structured_content is not null
           or r.previous_structured_content is not null or r.extracted_memories is not null
           or r.metadata <> '{}' or r.labels <> membank_private.kept_labels(r.labels));

    -- The turns it was extracted from (by event id, in its scope).
    -- An ADK event (append_session_event) holds its text in the payload's content too.
    update membank_private.events as e
    set text = null, payload = e.payload - 'content'
    where e.scope_id = forget_memory.scope_id and e.event_id = any(_event_ids)
      and (e.text is not null or e.payload ? 'content');

    -- The operations that wrote it: its entries, its source events, the facts given for it.
    -- Computed by a query, then written: Citus refuses these expressions
    -- over columns (a STABLE function, subqueries) in an UPDATE.
    for _op in
        select o.name, membank_private.redact_generated(o.generated_memories, forget_memory.name) as generated,
        (
            select coalesce(jsonb_agg(case when e ->> 'event_id' = any(_event_ids) and e ? 'text'
                                           then (e - 'text') || jsonb_build_object('digest', coalesce(e ->> 'digest',
                                                    membank_private.event_digest(e ->> 'event_id', e ->> 'text')::text))
                                           else e end order by x.n), '[]')
            from jsonb_array_elements(o.source_events) with ordinality as x (e, n)) as source_events,
        (
            select coalesce(jsonb_agg(case when f ->> 'fact' = any(_facts)
                                           then f || '{"fact": null}' else f end order by x.n), '[]')
            from jsonb_array_elements(o.facts) with ordinality as x (f, n)) as facts
        from membank_private.operations as o
        where o.scope_id = forget_memory.scope_id
          and (o.generated_memories @> jsonb_build_array(
                   jsonb_build_object('memory', jsonb_build_object('name', forget_memory.name)))
               -- a running operation learning from the same events or facts
               or exists (select from jsonb_array_elements(o.source_events) as e
                          where e ->> 'event_id' = any(_event_ids) and e ? 'text')
               or exists (select from jsonb_array_elements(o.facts) as f where f ->> 'fact' = any(_facts)))
        order by o.name
        for update
    loop
        update membank_private.operations as o
        set generated_memories = _op.generated, source_events = _op.source_events, facts = _op.facts
        where o.scope_id = forget_memory.scope_id and o.name = _op.name;
    end loop;

    -- An error of an operation that learned from the same events or facts:
    -- a model's reply or a provider's message may quote them, so the
    -- message goes (the code, stage and attempts stay).
    update membank_private.operations as o
    set error = o.error || '{"message": "redacted: the memory it quoted was purged"}'::jsonb  -- Citus: no STABLE call
    where o.scope_id = forget_memory.scope_id and o.error ? 'message'
      and o.error ->> 'message' <> 'redacted: the memory it quoted was purged'
      and (exists (select from jsonb_array_elements(o.source_events) as e where e ->> 'event_id' = any(_event_ids))
           or exists (select from jsonb_array_elements(o.facts) as f where f ->> 'fact' = any(_facts)));
    update membank_private.generation_jobs as j
    set last_error = 'redacted: the memory it quoted was purged'
    from membank_private.operations as o
    where j.scope_id = forget_memory.scope_id and o.scope_id = j.scope_id and o.name = j.operation_name
      and j.last_error is not null
      and exists (select from jsonb_array_elements(o.source_events) as e where e ->> 'event_id' = any(_event_ids));

    -- Items a model offered and the operation rejected, when they name it or
    -- quote one of its texts (any operation of the scope).
    -- Redacted once per row; only the rows it changes are written.
    for _op in
        select r.name, r.redacted from (
            select x.name, x.rejected_items,
                   membank_private.redact_rejected(x.rejected_items, forget_memory.name, _facts) as redacted
            from membank_private.operations as x
            where x.scope_id = forget_memory.scope_id and x.rejected_items <> '[]') as r
        where r.rejected_items is distinct from r.redacted
        order by r.name
    loop
        update membank_private.operations as o set rejected_items = _op.redacted
        where o.scope_id = forget_memory.scope_id and o.name = _op.name;
    end loop;
end
$$;

-- name: erase_scope: remove (or with force => false only count) everything stored under one exact scope.
create or replace function membank.erase_scope(scope jsonb, force boolean default false)
returns jsonb
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _scope_id uuid := md5(_scope::text)::uuid;
    _counts jsonb;
    _kept jsonb;
    _sessions text [];
    _lock_timeout text := current_setting('lock_timeout');
begin
    if force is null then
        perform membank_private._raise_invalid('force', 'must be true or false',
            'force => false (default) only counts; force => true erases');
    end if;
    -- Lock order (015_scope_locks.sql): a generation job before its scope's
    -- write lock, as complete_generation_job and prepare_consolidation take
    -- them; the wait is bounded like the scope lock's (MB040).
    begin
        perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
        perform from membank_private.generation_jobs as j where j.scope_id = _scope_id order by j.id for update;
        perform set_config('lock_timeout', _lock_timeout, true);
    exception
        when lock_not_available then
            raise exception 'scope: a worker held one of this scope''s generation jobs for longer than %',
                membank_private.scope_lock_timeout()
                using errcode = 'MB040', detail = format('scope_id: %s', _scope_id),
                      hint = 'nothing was erased; retry the call (the wait limit is the setting membank.lock_timeout)';
    end;
    perform membank_private.lock_scope(_scope_id);
    -- Rows are matched by scope_id and, where the row holds it, by the scope
    -- itself, so an md5 collision can never erase another scope's data.
    select coalesce(array_agg(s.session_id order by s.session_id), '{}') into _sessions
    from membank_private.sessions as s where s.scope_id = _scope_id and s.scope = _scope;
    select jsonb_build_object(
        'memories', (select count(*) from membank_private.memories as m
                     where m.scope_id = _scope_id and m.scope = _scope),
        'revisions', (select count(*) from membank_private.memory_revisions as r
                      where r.scope_id = _scope_id and r.scope = _scope),
        'embeddings', (select count(*) from membank_private.memory_embeddings as e
                       inner join membank_private.memories as m on m.scope_id = e.scope_id and m.name = e.name
                       where m.scope_id = _scope_id and m.scope = _scope),
        'embedding_jobs', (select count(*) from membank_private.embedding_jobs as j
                           inner join membank_private.memories as m on m.scope_id = j.scope_id and m.name = j.name
                           where m.scope_id = _scope_id and m.scope = _scope),
        'lexicon', (select count(*) from membank_private.scope_lexicon as l where l.scope_id = _scope_id),
        'events', (select count(*) from membank_private.events as e
                   where e.scope_id = _scope_id and e.session_id = any(_sessions)),
        'sessions', cardinality(_sessions),
        'ingest_streams', (select count(*) from membank_private.ingest_streams as t
                           where t.scope_id = _scope_id and t.scope = _scope),
        'user_states', (select count(*) from membank_private.scope_states as u
                        where u.scope_id = _scope_id and u.scope = _scope),
        'operations', (select count(*) from membank_private.operations as o
                       where o.scope_id = _scope_id and o.scope = _scope),
        'generation_jobs', (select count(*) from membank_private.generation_jobs as j
                            inner join membank_private.operations as o on o.scope_id = j.scope_id and o.name = j.operation_name
                            where o.scope_id = _scope_id and o.scope = _scope),
        'tool_rules', (select count(*) from membank_private.tool_rules as t
                       where t.scope_id = _scope_id and t.scope = _scope),
        'tool_rule_changes', (select count(*) from membank_private.tool_rule_changes as t
                              where t.scope_id = _scope_id and t.scope = _scope),
        'tool_decisions', (select count(*) from membank_private.tool_decisions as t
                           where t.scope_id = _scope_id and t.scope = _scope),
        'tool_permission_settings', (select count(*) from membank_private.tool_permission_settings as t
                                     where t.scope_id = _scope_id and t.scope = _scope),
        'retired_sources', (select count(*) from membank_private.retired_sources as t
                            where t.scope_id = _scope_id and t.scope = _scope),
        -- A role bound to the scope (bind_role_to_scope) names it: the binding goes too.
        'scope_bindings', (select count(*) from membank_private.scope_bindings as b
                           where b.scope_id = _scope_id and b.scope = _scope)
    ) into _counts;
    -- ADK "app:" state is the application's, read by every user of the app
    -- (ADK's contract): the keys whose current value this scope wrote stay,
    -- unlinked from it; counted here so the operator knows they exist.
    _kept := jsonb_build_object('app_state_keys', (
        select count(*) from membank_private.app_state_entries as a
        where a.scope_id = _scope_id
          and not exists (select from membank_private.app_state_entries as l
                          where l.app_name = a.app_name and l.key = a.key and l.seq > a.seq)));
    if force then
        -- Its superseded app: entries go, its current ones lose the link to the scope (rows
        -- another writer holds are being deleted by it: skipped, never waited for).
        -- Only when the scope has some: app_state_entries and scope_bindings
        -- are reference tables on Citus, where a write goes to every node.
        if exists (select from membank_private.app_state_entries as x where x.scope_id = _scope_id) then
            delete from membank_private.app_state_entries as a
            where (a.app_name, a.key, a.seq) in (
                select x.app_name, x.key, x.seq from membank_private.app_state_entries as x
                where x.scope_id = _scope_id
                  and exists (select from membank_private.app_state_entries as l
                              where l.app_name = x.app_name and l.key = x.key and l.seq > x.seq)
                for update skip locked);
            update membank_private.app_state_entries as a set scope_id = null
            where (a.app_name, a.key, a.seq) in (
                select x.app_name, x.key, x.seq from membank_private.app_state_entries as x
                where x.scope_id = _scope_id for update skip locked);
        end if;
        -- Memories first (embeddings and embedding jobs cascade; the revision
        -- trigger writes DELETED revisions, removed with the rest below).
        delete from membank_private.memories as m where m.scope_id = _scope_id and m.scope = _scope;
        delete from membank_private.memory_revisions as r where r.scope_id = _scope_id and r.scope = _scope;
        -- A scope's lexicon and statistics are keyed by scope_id alone; they
        -- go only when no memory of a colliding scope still counts in them.
        if not exists (select from membank_private.memories as m where m.scope_id = _scope_id) then
            delete from membank_private.scope_lexicon_base as l where l.scope_id = _scope_id;
            delete from membank_private.scope_lexicon_delta as l where l.scope_id = _scope_id;
            delete from membank_private.scope_stats_base as s where s.scope_id = _scope_id;
            delete from membank_private.scope_stats_delta as s where s.scope_id = _scope_id;
        end if;
        delete from membank_private.sessions as s
        where s.scope_id = _scope_id and s.session_id = any(_sessions);  -- events, IngestEvents streams cascade
        delete from membank_private.ingest_streams as t where t.scope_id = _scope_id and t.scope = _scope;
        -- ADK "user:" state of the scope (sessions' own state went with their rows).
        delete from membank_private.scope_states as u where u.scope_id = _scope_id and u.scope = _scope;
        delete from membank_private.operations as o
        where o.scope_id = _scope_id and o.scope = _scope;  -- generation jobs cascade
        delete from membank_private.tool_rules as t where t.scope_id = _scope_id and t.scope = _scope;
        delete from membank_private.tool_rule_changes as t where t.scope_id = _scope_id and t.scope = _scope;
        delete from membank_private.tool_decisions as t where t.scope_id = _scope_id and t.scope = _scope;
        delete from membank_private.tool_permission_settings as t where t.scope_id = _scope_id and t.scope = _scope;
        if (_counts ->> 'scope_bindings')::integer > 0 then
            delete from membank_private.scope_bindings as b where b.scope_id = _scope_id and b.scope = _scope;
        end if;
        -- After the memories: their deletion above retired their sources.
        delete from membank_private.retired_sources as t where t.scope_id = _scope_id and t.scope = _scope;
    end if;
    return jsonb_build_object('scope_id', _scope_id, 'erased', force, 'counts', _counts, 'kept', _kept,
                              'session_ids', to_jsonb(_sessions));
end
$$;

comment on function membank.erase_scope(jsonb, boolean) is
$$Right to erasure: remove everything stored under one exact scope (a JSON object; never a prefix: {"user_id":"u1"}
does not touch {"user_id":"u1","app":"x"}): memories, their revisions (no revision is kept), embeddings, embedding
jobs, full-text lexicon entries, sessions and their events and IngestEvents streams, ADK user: state,
GenerateMemories operations and their jobs, tool rules, their change log, tool decisions, exempt-tool settings, the
digests of deleted memories' source events (retired_sources) and role bindings to the scope. With force =>
false (the default) nothing is removed and the counts are returned. Returns jsonb {"scope_id": uuid, "erased":
boolean, "counts": {"memories", "revisions", "embeddings", "embedding_jobs", "lexicon", "events", "sessions",
"ingest_streams",
"user_states" (rows of ADK user: state: one per app the scope's user has state in), "operations", "generation_jobs", "tool_rules", "tool_rule_changes", "tool_decisions", "tool_permission_settings",
"retired_sources", "scope_bindings"}, "kept": {"app_state_keys": ADK app: state keys whose current value this scope
wrote, which stay because every user of the app reads them (erasing unlinks them from the scope)},
"session_ids": [the scope's session ids]}: the client deletes those sessions'
Valkey buffer keys (membank erase --scope). A role bound to the scope stays restricted (to nothing, when this was its
last scope). Admin only. Raises 22023 naming the argument (bad scope, null force).$$;

-- name: configure_retention: set the retention windows; returns them.
create or replace function membank.configure_retention(
    deleted_revisions interval default null,
    finished_operations interval default null,
    events interval default null,
    forever text[] default '{}'
) returns jsonb
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _kind text;
    _row membank_private.retention_settings;
begin
    foreach _kind in array coalesce(forever, '{}') loop
        if _kind is null or _kind not in ('deleted_revisions', 'finished_operations', 'events') then
            perform membank_private._raise_invalid('forever', format('unknown kind %s', to_jsonb(_kind)),
                'kinds are deleted_revisions, finished_operations and events');
        end if;
    end loop;
    if deleted_revisions < interval '0' or finished_operations < interval '0' or events < interval '0' then
        perform membank_private._raise_invalid(case when deleted_revisions < interval '0' then 'deleted_revisions'
                                                    when finished_operations < interval '0' then 'finished_operations'
                                                    else 'events' end,
            'must not be negative', 'a window of 0 removes at the next apply_retention');
    end if;
    perform membank_private.refuse_bound_caller('configure_retention');
    -- A bank-wide row: the wait for another call holding it is bounded (MB040).
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    update membank_private.retention_settings as s
    set deleted_revisions = case when 'deleted_revisions' = any(forever) then null
                                 else coalesce(configure_retention.deleted_revisions, s.deleted_revisions) end,
        finished_operations = case when 'finished_operations' = any(forever) then null
                                   else coalesce(configure_retention.finished_operations, s.finished_operations) end,
        events = case when 'events' = any(forever) then null
                      else coalesce(configure_retention.events, s.events) end,
        update_time = statement_timestamp()
    returning * into _row;
    return jsonb_build_object('deleted_revisions', _row.deleted_revisions::text,
                              'finished_operations', _row.finished_operations::text,
                              'events', _row.events::text);
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('retention', 'the retention settings');
end
$$;

comment on function membank.configure_retention(interval, interval, interval, text[]) is
$$Set how long what is no longer current is kept before membank.apply_retention() removes it: deleted_revisions (the
revisions of a memory deleted with delete_memory, counted from its deletion; default 30 days), finished_operations
(done GenerateMemories operations, from their last update; default 90 days), events (conversation events, from when
they were appended; default kept for ever). A null argument leaves that window as it is; forever lists the kinds to
keep for ever. Returns the windows as jsonb (interval text, null = for ever). Admin only.
Raises 22023 naming the argument (negative window, unknown kind), 42501 for a role bound to scopes, MB040 after
waiting membank.lock_timeout for another call holding the settings (retryable).$$;

-- name: retention_batch: remove up to batch_size rows of each kind past its retention window; returns counts.
-- A SECURITY DEFINER function because the procedure that commits between
-- batches may carry neither SECURITY DEFINER nor a SET clause.
create or replace function membank_private.retention_batch(batch_size integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _s membank_private.retention_settings;
    _revisions bigint := 0;
    _operations bigint := 0;
    _events bigint := 0;
    _sessions bigint := 0;
begin
    perform membank_private.refuse_bound_caller('apply_retention');  -- every scope's maintenance
    select * into _s from membank_private.retention_settings;
    if membank_private.on_citus() then
        -- No FOR UPDATE over several shards: scope by scope (120_scope_by_scope_jobs.sql).
        return membank_private.retention_by_scope(batch_size, _s.deleted_revisions, _s.finished_operations, _s.events);
    end if;
    if _s.deleted_revisions is not null then
        -- Memories whose last revision is a deletion older than the window
        -- and that no rollback has brought back.
        with gone as (
            select r.memory_name
            from membank_private.memory_revisions as r
            where r.action = 'DELETED'
              and r.create_time < statement_timestamp() - _s.deleted_revisions
              and not exists (select from membank_private.memories as m where m.name = r.memory_name)
              and not exists (select from membank_private.memory_revisions as l
                              where l.memory_name = r.memory_name and l.revision > r.revision)
            order by r.create_time
            limit batch_size
        ), removed as (
            delete from membank_private.memory_revisions as r
            using gone as g where r.memory_name = g.memory_name
            returning 1
        )
        select count(*) into _revisions from removed;
    end if;
    if _s.finished_operations is not null then
        with old as (
            select o.name from membank_private.operations as o
            where o.done and o.update_time < statement_timestamp() - _s.finished_operations
            order by o.update_time
            limit batch_size
            for update skip locked
        ), removed as (
            delete from membank_private.operations as o using old where o.name = old.name returning 1
        )
        select count(*) into _operations from removed;
    end if;
    if _s.events is not null then
        with old as (
            select e.scope_id, e.session_id, e.event_id from membank_private.events as e
            where e.append_time < statement_timestamp() - _s.events
            order by e.append_time
            limit batch_size
            for update skip locked
        ), removed as (
            delete from membank_private.events as e using old
            where (e.scope_id, e.session_id, e.event_id) = (old.scope_id, old.session_id, old.event_id)
            returning 1
        )
        select count(*) into _events from removed;
        with empty as (
            select s.scope_id, s.session_id from membank_private.sessions as s
            where s.update_time < statement_timestamp() - _s.events
              and not exists (select from membank_private.events as e
                              where e.scope_id = s.scope_id and e.session_id = s.session_id)
            limit batch_size
            for update skip locked
        ), removed as (
            delete from membank_private.sessions as s using empty
            where (s.scope_id, s.session_id) = (empty.scope_id, empty.session_id)
            returning 1
        )
        select count(*) into _sessions from removed;
    end if;
    return jsonb_build_object('revisions', _revisions, 'operations', _operations, 'events', _events,
                              'sessions', _sessions);
end
$$;
