-- Names are uuids: create_memory and generate_memories return them typed
-- uuid, but the functions that take a name accept text, so that a malformed
-- name gets an error naming the argument (22P02, parse_name). PostgreSQL
-- has no implicit cast from uuid to text, so these overloads take a uuid
-- and call the text version: SQL can chain calls, and drivers can pass
-- back the uuid they received. A quoted literal still resolves to the text
-- version (PostgreSQL prefers the string category for unknown literals).

-- name: get_memory(uuid): get_memory for a uuid-typed name.
create or replace function membank.get_memory(name uuid, scope jsonb default null)
returns membank.memory
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank.get_memory(name => name::text, scope => scope);
$$;

comment on function membank.get_memory(uuid, jsonb) is
$$get_memory(name text, scope) for a name typed uuid, e.g. (membank.create_memory(...)).name.
Raises P0002 (not found, deleted, expired or another scope), 22023 (bad scope).$$;

-- name: update_memory(uuid): update_memory for a uuid-typed name.
create or replace function membank.update_memory(
    name uuid,
    fact text default null,
    topics text[] default null,
    metadata jsonb default null,
    ttl interval default null,
    expire_time timestamptz default null,
    structured_content jsonb default null,
    scope jsonb default null,
    labels jsonb default '{}',
    source_event_ids text[] default '{}',
    expected_revision integer default null
) returns membank.memory
language sql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank.update_memory(
        name => name::text, fact => fact, topics => topics, metadata => metadata, ttl => ttl,
        expire_time => expire_time, structured_content => structured_content, scope => scope, labels => labels,
        source_event_ids => source_event_ids, expected_revision => expected_revision);
$$;

comment on function membank.update_memory(
    uuid, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[], integer
) is
$$update_memory(name text, ...) for a name typed uuid; the same arguments and behaviour.
Raises P0002 (not found, deleted, expired or another scope), 22023 naming the argument, MB003 (not at
expected_revision), MB040 (scope lock wait over membank.lock_timeout).$$;

-- name: delete_memory(uuid): delete_memory for a uuid-typed name.
create or replace function membank.delete_memory(
    name uuid, scope jsonb default null, labels jsonb default '{}', expected_revision integer default null
)
returns membank.memory
language sql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank.delete_memory(name => name::text, scope => scope, labels => labels,
                                 expected_revision => expected_revision);
$$;

comment on function membank.delete_memory(uuid, jsonb, jsonb, integer) is
$$delete_memory(name text, scope, labels, expected_revision) for a name typed uuid.
Raises P0002 (not found, already deleted, expired or another scope), MB003 (not at expected_revision), MB040.$$;

-- name: list_revisions(uuid): list_revisions for a uuid-typed name.
create or replace function membank.list_revisions(name uuid, scope jsonb default null)
returns setof membank.memory_revision
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select * from membank.list_revisions(name => name::text, scope => scope);
$$;

comment on function membank.list_revisions(uuid, jsonb) is
$$list_revisions(name text, scope) for a name typed uuid.
Raises P0002 (no revisions of that name in the scope).$$;

-- name: get_revision(uuid): get_revision for a uuid-typed name.
create or replace function membank.get_revision(name uuid, revision integer, scope jsonb default null)
returns membank.memory_revision
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank.get_revision(name => name::text, revision => revision, scope => scope);
$$;

comment on function membank.get_revision(uuid, integer, jsonb) is
$$get_revision(name text, revision, scope) for a name typed uuid.
Raises P0002 (no such revision in the scope).$$;

-- name: rollback_memory(uuid): rollback_memory for a uuid-typed name.
create or replace function membank.rollback_memory(
    name uuid, revision integer, scope jsonb default null, expected_revision integer default null
)
returns membank.memory
language sql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank.rollback_memory(name => name::text, revision => revision, scope => scope,
                                   expected_revision => expected_revision);
$$;

comment on function membank.rollback_memory(uuid, integer, jsonb, integer) is
$$rollback_memory(name text, revision, scope, expected_revision) for a name typed uuid.
Raises P0002 (no such revision in the scope), 22023 (a DELETED revision holds nothing to restore), MB003 (not at
expected_revision), MB040.$$;

-- name: get_operation(uuid): get_operation for a uuid-typed name, e.g. what generate_memories returned.
create or replace function membank.get_operation(name uuid, scope jsonb default null)
returns membank.operation
language sql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank.get_operation(name => name::text, scope => scope);
$$;

comment on function membank.get_operation(uuid, jsonb) is
$$get_operation(name text, scope) for a name typed uuid, e.g.
membank.get_operation(membank.generate_memories(...)). Raises P0002 (no such operation in that scope).$$;
