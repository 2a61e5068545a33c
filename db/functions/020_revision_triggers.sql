-- Revisions are written by triggers on membank_private.memories, so every
-- path that changes a memory (API, purge, TTL purge, later consolidation)
-- records one, and none can forget. What the caller knows beyond the row
-- (labels, source event ids, extracted memories) travels in the
-- transaction-local setting membank.revision_context, set by
-- set_revision_context() and cleared by clear_revision_context().

-- name: set_revision_context: attach labels/sources to the revisions written next.
create or replace function membank_private.set_revision_context(
    labels jsonb default '{}',
    source_event_ids text[] default '{}',
    extracted_memories jsonb default null
) returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- carry_setting: on Citus the trigger reading it runs on the worker (015_scope_locks.sql).
    select membank_private.carry_setting('membank.revision_context', jsonb_build_object(
        'labels', coalesce(labels, '{}'),
        'source_event_ids', to_jsonb(coalesce(source_event_ids, '{}')),
        'extracted_memories', extracted_memories)::text);
$$;

-- name: clear_revision_context: forget the context so later statements do not inherit it.
create or replace function membank_private.clear_revision_context()
returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select membank_private.carry_setting('membank.revision_context', '');
$$;

-- name: memories_before_update: bump the revision, keep name and scope fixed.
create or replace function membank_private.memories_before_update()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if new.name <> old.name or new.scope <> old.scope then
        raise exception 'a memory''s name and scope never change'
            using errcode = 'MB001',
                  hint = 'create a new memory in the other scope and delete this one';
    end if;
    new.revision := old.revision + 1;
    new.update_time := statement_timestamp();
    return new;
end
$$;

-- name: memories_write_revision: append the immutable revision of a change.
create or replace function membank_private.memories_write_revision()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _ctx jsonb := nullif(current_setting('membank.revision_context', true), '')::jsonb;
    _row membank_private.memories := case when tg_op = 'DELETE' then old else new end;
    -- A purge (purge_memories, purge_expired_memories) destroys the text;
    -- a delete keeps it readable until retention (085_erasure.sql).
    _forget boolean := tg_op = 'DELETE' and coalesce(_ctx #>> '{labels,reason}' in ('purge', 'expired'), false);
    -- Computed here, not inside VALUES: Citus refuses sub-queries in an
    -- INSERT ... VALUES on a distributed table, and a simple CASE deparses
    -- wrongly on the shard side (text = boolean).
    _revision integer := case when tg_op = 'DELETE' then old.revision + 1 else new.revision end;
    _action text := case when tg_op = 'INSERT' then 'CREATED' when tg_op = 'UPDATE' then 'UPDATED' else 'DELETED' end;
    _sources text[] := '{}';
    _labels jsonb := coalesce(_ctx -> 'labels', '{}');
    _old_fact text;
    _old_content jsonb;
    -- On Citus this fires on a shard (memories_<id>): its statements go to
    -- the colocated shards by name, not through Citus (shard_table, 015).
    _shard boolean := tg_table_name <> 'memories';
    _retire boolean;
begin
    -- A sub-query only for a list to unpack: an expression holding one is
    -- run as a query on every call, even when the list is empty.
    if coalesce(_ctx -> 'source_event_ids', '[]') <> '[]' then
        _sources := array(select jsonb_array_elements_text(_ctx -> 'source_event_ids'));
    end if;
    if tg_op <> 'INSERT' and not _forget then
        _old_fact := old.fact;
        _old_content := old.structured_content;
    end if;
    if _shard then
        execute format(
            'insert into %s (memory_name, revision, scope_id, scope, action, memory_type, fact, previous_fact,'
            ' structured_content, previous_structured_content, topics, metadata, expire_time, labels,'
            ' source_event_ids, extracted_memories, create_time)'
            ' values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, statement_timestamp())',
            membank_private.shard_table('memory_revisions', _row.scope_id))
        using _row.name, _revision, _row.scope_id, _row.scope, _action, _row.memory_type,
              case when not _forget then _row.fact end, _old_fact,
              case when not _forget then _row.structured_content end, _old_content,
              _row.topics, case when _forget then '{}' else _row.metadata end, _row.expire_time,
              _labels, _sources, _ctx -> 'extracted_memories';
    else
        insert into membank_private.memory_revisions (
            memory_name, revision, scope_id, scope, action, memory_type,
            fact, previous_fact, structured_content, previous_structured_content,
            topics, metadata, expire_time, labels, source_event_ids,
            extracted_memories, create_time
        ) values (
            _row.name, _revision, _row.scope_id, _row.scope, _action, _row.memory_type,
            case when not _forget then _row.fact end, _old_fact,
            case when not _forget then _row.structured_content end, _old_content,
            _row.topics, case when _forget then '{}' else _row.metadata end, _row.expire_time,
            _labels, _sources, _ctx -> 'extracted_memories', statement_timestamp()
        );
    end if;
    -- Whatever deleted it, the events it came from may not bring it back
    -- (retired_sources, 085_erasure.sql); a rollback that re-creates it releases them.
    if tg_op = 'DELETE' and _shard then
        -- retire_sources reads the scope's events and operations through
        -- Citus: only for a memory whose revisions name a source event (the
        -- revisions read on the shard first).
        execute format('select exists (select from %s as r where r.scope_id = $1 and r.memory_name = $2'
                       ' and r.source_event_ids <> ''{}'')',
                       membank_private.shard_table('memory_revisions', old.scope_id))
        into _retire using old.scope_id, old.name;
        if _retire then
            perform membank_private.retire_sources(old.name, old.scope_id, old.scope);
        end if;
    elsif tg_op = 'DELETE' then
        perform membank_private.retire_sources(old.name, old.scope_id, old.scope);
    elsif tg_op = 'INSERT' and _shard then
        execute format('delete from %s as t where t.scope_id = $1 and t.memory_name = $2',
                       membank_private.shard_table('retired_sources', new.scope_id))
        using new.scope_id, new.name;
    elsif tg_op = 'INSERT' then
        delete from membank_private.retired_sources as t where t.scope_id = new.scope_id and t.memory_name = new.name;
    end if;
    if _forget then
        perform membank_private.forget_memory(old.name, old.scope_id);
    end if;
    return null;
end
$$;

-- name: memory_revisions_immutable: refuse any UPDATE of a revision, except one that only removes its text.
create or replace function membank_private.memory_revisions_immutable()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    -- Erasure (085_erasure.sql) may set a revision's text columns to null;
    -- nothing else about a revision ever changes.
    -- The rows as the table's type: on a Citus shard old and new are of the
    -- shard's own row type (memory_revisions_<shard id>), which no function takes.
    if membank_private.is_redacted_update(row(old.*)::membank_private.memory_revisions,
                                          row(new.*)::membank_private.memory_revisions) then
        return new;
    end if;
    raise exception 'memory revisions are immutable'
        using errcode = 'MB002',
              hint = 'record a change by updating the memory; its trigger writes a new revision';
end
$$;

create or replace trigger memories_before_update
before update on membank_private.memories
for each row execute function membank_private.memories_before_update();

create or replace trigger memories_write_revision
after insert or update or delete on membank_private.memories
for each row execute function membank_private.memories_write_revision();

create or replace trigger memory_revisions_immutable
before update on membank_private.memory_revisions
for each row execute function membank_private.memory_revisions_immutable();
