-- Revisions: read the immutable history of a memory, and roll back to it.
-- Revisions of a deleted memory stay readable until the retention window
-- (085_erasure.sql); those of an expired memory show no text, and those of a
-- purged memory have had their text removed.

-- name: to_memory_revision: the public shape of a stored revision.
create or replace function membank_private.to_memory_revision(r membank_private.memory_revisions)
returns membank.memory_revision
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select row(r.memory_name, r.revision, r.scope, r.action, r.memory_type, r.fact, r.previous_fact,
               r.structured_content, r.previous_structured_content, r.topics, r.metadata,
               r.expire_time, r.labels, r.source_event_ids, r.extracted_memories,
               r.create_time)::membank.memory_revision;
$$;

-- Replaced by the scope_id-taking versions below (every statement names its shard).
drop function if exists membank_private.is_expired(uuid);
drop function if exists membank_private.check_revisions_exist(uuid, jsonb);

-- name: is_expired: true when the memory's expire_time has passed (its revisions are then redacted).
-- Also for a memory deleted before its expire_time, once that passes: its
-- last revision (the deletion) holds the expire_time it had. Deleting a
-- memory never lets its text outlive its TTL.
create or replace function membank_private.is_expired(name uuid, scope_id uuid)
returns boolean
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select exists (select from membank_private.memories as m
                   where m.scope_id = is_expired.scope_id and m.name = is_expired.name
                     and m.expire_time <= statement_timestamp())
           or (not exists (select from membank_private.memories as m
                           where m.scope_id = is_expired.scope_id and m.name = is_expired.name)
               and coalesce((select r.action = 'DELETED' and r.expire_time <= statement_timestamp()
                             from membank_private.memory_revisions as r
                             where r.scope_id = is_expired.scope_id and r.memory_name = is_expired.name
                             order by r.revision desc
                             limit 1), false));
$$;

-- name: revisions_scope_id: the scope_id of a memory's revisions (in scope, when given); else P0002.
-- With scope the lookup goes to one shard on Citus; without, it asks every
-- shard once (index on memory_name) and the caller then goes by scope_id.
create or replace function membank_private.revisions_scope_id(
    name uuid, scope jsonb
) returns uuid
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := case when scope is not null then membank_private.validate_scope(scope) end;
    _scope_id uuid := md5(_scope::text)::uuid;
    _found uuid;
    _found_scope jsonb;
begin
    -- scope_allowed is asked after the read, not inside it: it reads a table
    -- itself (no table-reading call inside a statement on a distributed table).
    if _scope is null then
        select r.scope_id, r.scope into _found, _found_scope from membank_private.memory_revisions as r
        where r.memory_name = revisions_scope_id.name
        limit 1;
    else
        select r.scope_id, r.scope into _found, _found_scope from membank_private.memory_revisions as r
        where r.scope_id = _scope_id and r.memory_name = revisions_scope_id.name and r.scope = _scope
        limit 1;
    end if;
    if _found is null or not membank_private.scope_allowed(_found_scope) then
        raise exception 'name: memory % has no revisions', name
            using errcode = 'no_data_found',
                  hint = 'the name may be wrong, belong to another scope, or its revisions may have passed retention',
                  detail = 'argument: name';
    end if;
    return _found;
end
$$;

-- name: list_revisions: every revision of a memory, oldest first.
create or replace function membank.list_revisions(
    name text, scope jsonb default null
) returns setof membank.memory_revision
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _name uuid := membank_private.parse_name(name);
    _scope_id uuid := membank_private.revisions_scope_id(_name, scope);
    -- Read before the statement on memory_revisions: no table-reading call inside it.
    _expired boolean := membank_private.is_expired(_name, _scope_id);
    _r membank_private.memory_revisions;
begin
    -- Rows into a variable, shaped here: a whole-row argument inside the
    -- query would name the shard's row type on Citus.
    for _r in select * from membank_private.memory_revisions as r
              where r.scope_id = _scope_id and r.memory_name = _name
              order by r.revision loop
        if _expired then
            return next membank_private.redact_revision(membank_private.to_memory_revision(_r));
        else
            return next membank_private.to_memory_revision(_r);
        end if;
    end loop;
end
$$;

comment on function membank.list_revisions(text, jsonb) is
$$All revisions of the memory called name, oldest first: one per create, update, delete and rollback, each with action
(CREATED | UPDATED | DELETED), the fact after the change and previous_fact before it, labels, source_event_ids and
extracted_memories. Readable after the memory is deleted, until the retention window (configure_retention); while the
memory is expired its revisions show name, action, topics and times but no fact, structured content, metadata or
extraction context (also a memory deleted before its expire_time, once that has passed), and a purged memory's
revisions have lost that text and the caller's labels for good. With scope, the memory must be in
exactly that scope. Raises 22P02 (malformed name), P0002 (no revisions: unknown name, other scope, or past retention).$$;

-- name: get_revision: one revision of a memory.
create or replace function membank.get_revision(
    name text, revision integer, scope jsonb default null
) returns membank.memory_revision
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _name uuid := membank_private.parse_name(name);
    _scope_id uuid;
    _row membank_private.memory_revisions;
begin
    if revision is null then
        perform membank_private._raise_invalid('revision', 'must not be null',
            'pass a revision number that list_revisions shows');
    end if;
    _scope_id := membank_private.revisions_scope_id(_name, scope);
    select * into _row from membank_private.memory_revisions as r
    where r.scope_id = _scope_id and r.memory_name = _name and r.revision = get_revision.revision;
    if _row.memory_name is null then
        raise exception 'revision: memory % has no revision %', _name, revision
            using errcode = 'no_data_found',
                  hint = 'list_revisions shows the revision numbers that exist',
                  detail = 'argument: revision';
    end if;
    if membank_private.is_expired(_name, _scope_id) then
        return membank_private.redact_revision(membank_private.to_memory_revision(_row));
    end if;
    return membank_private.to_memory_revision(_row);
end
$$;

comment on function membank.get_revision(text, integer, jsonb) is
$$One revision (1-based number) of the memory called name; see list_revisions for its fields (and what is redacted
for expired and purged memories). Raises 22P02 (malformed name), P0002 (unknown memory or revision),
22023 (revision is null).$$;

-- name: rollback_memory: restore a memory's content from an earlier revision, as a new revision.
create or replace function membank.rollback_memory(
    name text, revision integer, scope jsonb default null, expected_revision integer default null
) returns membank.memory
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _target membank.memory_revision;
    _row membank_private.memories;
    _scope_id uuid;
    _last integer;
    _first timestamptz;
    _expire_time timestamptz;
begin
    if revision is null then
        perform membank_private._raise_invalid('revision', 'must not be null',
            'pass a revision number that list_revisions shows');
    end if;
    _target := membank.get_revision(name, revision, scope);
    _scope_id := md5(_target.scope::text)::uuid;
    if membank_private.is_expired(_target.memory_name, _scope_id) then
        -- Expired is forgotten: its revisions show no text to restore.
        raise exception 'name: memory % has expired', _target.memory_name
            using errcode = 'no_data_found', detail = 'argument: name',
                  hint = 'an expired memory cannot be rolled back; create it again';
    end if;
    if _target.action = 'DELETED' then
        perform membank_private._raise_invalid('revision',
            format('revision %s records a deletion and holds no content to restore', revision),
            'roll back to a CREATED or UPDATED revision');
    end if;
    perform membank_private.set_revision_context(jsonb_build_object('rollback_to', revision));
    perform membank_private.lock_scope(_scope_id);
    select * into _row from membank_private.memories as m
    where m.scope_id = _scope_id and m.name = _target.memory_name for update;
    -- The current revision: the live row's, else the newest (the deletion).
    select max(r.revision), min(r.create_time) into _last, _first
    from membank_private.memory_revisions as r where r.scope_id = _scope_id and r.memory_name = _target.memory_name;
    -- A deleted memory comes back with the expiry it had (its deletion's): deleting never lifts a TTL.
    select r.expire_time into _expire_time
    from membank_private.memory_revisions as r
    where r.scope_id = _scope_id and r.memory_name = _target.memory_name and r.revision = _last;
    perform membank_private.check_revision(_target.memory_name, coalesce(_row.revision, _last), expected_revision);
    if _row.name is not null then
        -- Live: restore the content; the expiry stays as it is now.
        update membank_private.memories as m
        set fact = _target.fact, structured_content = _target.structured_content,
            topics = _target.topics, metadata = _target.metadata
        where m.scope_id = _scope_id and m.name = _row.name
        returning * into _row;
    else
        -- Deleted: bring it back under the same name, with the expiry it had
        -- when deleted (not passed: is_expired refused that above), and its
        -- revision numbers continuing after the deletion.
        if _expire_time is not null then
            perform membank_private.mark_due(_scope_id, 'expiry', _expire_time);  -- Citus: 121_due_work.sql
        end if;
        insert into membank_private.memories as m (
            name, scope_id, scope, memory_type, fact, structured_content, topics, metadata, revision, create_time,
            expire_time
        ) values (
            _target.memory_name, _scope_id, _target.scope, _target.memory_type, _target.fact,
            _target.structured_content, _target.topics, _target.metadata, _last + 1, _first, _expire_time
        ) returning * into _row;
    end if;
    perform membank_private.clear_revision_context();
    return membank_private.to_memory(_row);
end
$$;

comment on function membank.rollback_memory(text, integer, jsonb, integer) is
$$Restore the fact, structured_content, topics and metadata of revision (1-based) of the memory called name. The
rollback is itself a new revision labelled {"rollback_to": revision}: UPDATED for a live memory, CREATED when it brings
a deleted memory back under the same name (with the expire_time it had when deleted). The current expiry of a live
memory is kept. An expired memory is refused (P0002): expiry forgets, and its revisions show no text to restore; so is
a memory deleted before its expire_time once that has passed.
expected_revision (compare-and-set): when given, the rollback happens only if the memory is still at that revision
(for a deleted memory: the number of its DELETED revision).
Raises 22P02 (malformed name), P0002 (unknown memory or revision, expired memory), 22023 (revision is null or a
deletion), MB003 (no longer at expected_revision; nothing written), MB040 (scope lock wait over membank.lock_timeout;
retry).$$;
