-- Imports: memories moved in from another memory store (`membank import mem0`).
--
-- An imported memory keeps what it was in its old store: its id (as the
-- memory's name), its scope, its metadata and its create/update times. The
-- name is the import's idempotency key: a name membank already holds (live,
-- deleted or expired: its revisions stay) is skipped, so running an import
-- again stores nothing twice and does not revive a memory deleted since,
-- while membank keeps that memory's revisions (retention and erasure remove
-- them; the old store still holds the row, and a re-run imports it again).
-- The old store's vector is not kept: it was made by another embedding model,
-- and a bank holds one model's vectors (050_embeddings.sql), so the fact is
-- queued for the bank's embedder like any new memory. Revision 1 (CREATED)
-- carries the labels given (e.g. {"imported_from": "mem0"}) and is dated when
-- membank recorded it; the memory's create_time and update_time are the old
-- store's.

-- name: lock_import_name: serialise imports of one old id, waiting at most membank.lock_timeout (else MB040).
create or replace function membank_private.lock_import_name(name uuid)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _timeout text := membank_private.scope_lock_timeout();
    _callers text := current_setting('lock_timeout');
begin
    perform set_config('lock_timeout', _timeout, true);
    perform pg_advisory_xact_lock(hashtextextended('membank.import_memory:' || name::text, 0));
    perform set_config('lock_timeout', _callers, true);
exception
    when lock_not_available then
        raise exception 'name: another import of this id held it for longer than %', _timeout
            using errcode = 'MB040',
                  detail = format('name: %s', name),
                  hint = 'nothing was written; retry the import (the wait limit is the setting membank.lock_timeout)';
end
$$;

-- name: import_memory: store one memory moved in from another store, under its old id, once.
create or replace function membank.import_memory(
    scope jsonb,
    fact text,
    name text,
    metadata jsonb default '{}',
    create_time timestamptz default null,
    update_time timestamptz default null,
    labels jsonb default '{}'
) returns membank.memory
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _name uuid := membank_private.parse_name(name);
    _scope jsonb := membank_private.validate_scope(scope);
    _scope_id uuid := md5(_scope::text)::uuid;
    _fact text := membank_private.validate_fact(fact);
    _metadata jsonb := membank_private.validate_object(coalesce(metadata, '{}'), 'metadata');
    _labels jsonb := membank_private.validate_object(coalesce(labels, '{}'), 'labels');
    _now timestamptz := statement_timestamp();
    _created timestamptz := coalesce(create_time, update_time, statement_timestamp());
    _updated timestamptz;
    _row membank_private.memories;
begin
    -- The old id is checked in every scope (so a re-run imports nothing
    -- twice): a role bound to scopes would learn whether an id exists in
    -- another tenant's scope, so imports are for unbound admins only.
    perform membank_private.refuse_bound_caller('import_memory');
    if _created > _now then
        perform membank_private._raise_invalid('create_time',
            format('must not be in the future, got %s', _created),
            'give the time the memory was created in its old store, or null for now');
    end if;
    _updated := coalesce(update_time, _created);
    if _updated < _created or _updated > _now then
        perform membank_private._raise_invalid('update_time',
            format('must be between create_time (%s) and now, got %s', _created, _updated),
            'give the time the memory was last changed in its old store, or null for its create_time');
    end if;
    -- Two imports of one old id into two scopes hold different scope locks:
    -- without a lock on the name both would see it free and both write it.
    -- (Imports run where they are called, the coordinator on Citus, so a
    -- node-local advisory lock serialises them.) Any login can take an
    -- advisory lock, so the wait is bounded like a scope lock's, and taken
    -- before the scope lock, which is never held while waiting for it.
    perform membank_private.lock_import_name(_name);
    perform membank_private.lock_scope(_scope_id);
    -- A name held in any scope (as a memory or by revisions a deletion left)
    -- was imported before, or is another memory's: nothing is written.
    -- (select 1, not an empty target list: on Citus each subquery becomes an
    -- intermediate result, and one of no columns cannot be read back: 42601.)
    if exists (select 1 from membank_private.memories as m where m.name = _name)
       or exists (select 1 from membank_private.memory_revisions as r where r.memory_name = _name) then
        return null;
    end if;
    perform membank_private.set_revision_context(_labels, '{}');
    insert into membank_private.memories as m (
        name, scope_id, scope, memory_type, fact, metadata, create_time, update_time
    ) values (
        _name, _scope_id, _scope, 'NATURAL_LANGUAGE', _fact, _metadata, _created, _updated
    ) returning * into _row;
    perform membank_private.clear_revision_context();
    return membank_private.to_memory(_row);
end
$$;

comment on function membank.import_memory(jsonb, text, text, jsonb, timestamptz, timestamptz, jsonb) is
$$Import one memory from another memory store (membank import mem0) under its old id, once (admin).
Arguments: scope jsonb (as create_memory); fact text 1..32768 chars; name text: the memory's old id, a UUID, kept as its
membank name; metadata jsonb object; create_time and update_time timestamptz (the old store's; null: now, and
create_time) with create_time <= update_time <= now; labels jsonb object kept on revision 1 (CREATED).
Returns membank.memory, or null when the name is already held (a memory or the revisions of a deleted one, in any
scope): an import run again writes nothing twice and revives nothing deleted while membank keeps its revisions (until
apply_retention removes a deleted memory's revisions, or erase_scope its scope: after that a re-run imports the old
store's row again, so delete or erase in the old store too). The fact is queued for embedding by
the bank's model (the old store's vector is not kept: another model made it). Raises 22023 (invalid_parameter_value)
naming the argument, with a hint, and 42501 for a role bound to scopes; nothing is written on error.$$;
