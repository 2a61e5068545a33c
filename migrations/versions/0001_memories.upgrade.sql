-- 0001 upgrade: schemas, public row types, memories, revisions, roles.
create schema membank;
comment on schema membank is
'membank public API: long-term memory for AI agents (functions and types only).';

create schema membank_private;
comment on schema membank_private is
'membank storage and internal helpers; not an API, may change between versions.';

revoke all on schema membank, membank_private from public;

-- Public row shapes, decoupled from storage so that tables can change.
create type membank.memory as (
    name uuid,
    scope jsonb,
    memory_type text,
    fact text,
    structured_content jsonb,
    topics text [],
    metadata jsonb,
    revision integer,
    create_time timestamptz,
    update_time timestamptz,
    expire_time timestamptz
);

-- One row of list_memories: a memory, plus the token of the next page on
-- the last row of a full page.
create type membank.memory_page_item as (
    name uuid,
    scope jsonb,
    memory_type text,
    fact text,
    structured_content jsonb,
    topics text [],
    metadata jsonb,
    revision integer,
    create_time timestamptz,
    update_time timestamptz,
    expire_time timestamptz,
    next_page_token text
);

create type membank.memory_revision as (
    memory_name uuid,
    revision integer,
    scope jsonb,
    action text,
    memory_type text,
    fact text,
    previous_fact text,
    structured_content jsonb,
    previous_structured_content jsonb,
    topics text [],
    metadata jsonb,
    expire_time timestamptz,
    labels jsonb,
    source_event_ids text [],
    extracted_memories jsonb,
    create_time timestamptz
);

-- scope_id = md5 of the canonical jsonb text of the scope, as a uuid. jsonb
-- output is canonical (keys sorted, duplicates removed), so key order never
-- matters. It is the routing key: every index leads with it, and it is the
-- distribution column on Citus. Reads compare scope too, so a hash
-- collision can never leak a memory across scopes.
create table membank_private.memories (
    name uuid primary key default gen_random_uuid(),
    scope jsonb not null,
    scope_id uuid not null generated always as (md5(scope::text)::uuid) stored,
    memory_type text not null default 'NATURAL_LANGUAGE'
    check (memory_type in ('NATURAL_LANGUAGE', 'STRUCTURED_PROFILE')),
    fact text,
    structured_content jsonb,
    topics text[] not null default '{}',
    metadata jsonb not null default '{}',
    revision integer not null default 1,
    create_time timestamptz not null default statement_timestamp(),
    update_time timestamptz not null default statement_timestamp(),
    expire_time timestamptz,
    check (jsonb_typeof(metadata) = 'object'),
    check (
        (memory_type = 'NATURAL_LANGUAGE' and fact is not null)
        or (memory_type = 'STRUCTURED_PROFILE' and structured_content is not null)
    )
);

create index memories_scope_create_idx
on membank_private.memories (scope_id, create_time, name);

create index memories_expire_idx
on membank_private.memories (expire_time)
where expire_time is not null;

-- Revisions are immutable (a trigger refuses UPDATE). No foreign key: the
-- revisions of a deleted memory outlive it for the retention window.
create table membank_private.memory_revisions (
    memory_name uuid not null,
    revision integer not null,
    scope_id uuid not null,
    scope jsonb not null,
    action text not null check (action in ('CREATED', 'UPDATED', 'DELETED')),
    memory_type text not null,
    fact text,
    previous_fact text,
    structured_content jsonb,
    previous_structured_content jsonb,
    topics text[] not null,
    metadata jsonb not null,
    expire_time timestamptz,
    labels jsonb not null default '{}',
    source_event_ids text[] not null default '{}',
    extracted_memories jsonb,
    create_time timestamptz not null default statement_timestamp(),
    primary key (memory_name, revision)
);

create index memory_revisions_deleted_idx
on membank_private.memory_revisions (create_time)
where action = 'DELETED';

-- Roles are cluster-wide, so they may already exist (another database, an
-- earlier install). NOLOGIN: applications grant them to their login roles.
do $roles$
declare
    _role text;
begin
    foreach _role in array array['membank_reader', 'membank_writer', 'membank_admin'] loop
        if not exists (select from pg_catalog.pg_roles where rolname = _role) then
            execute format('create role %I nologin', _role);
        end if;
    end loop;
end
$roles$;

grant membank_reader to membank_writer;
grant membank_writer to membank_admin;
grant usage on schema membank to membank_reader;
