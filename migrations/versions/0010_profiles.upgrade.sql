-- 0010 upgrade: structured profiles and scoped views for plain-SQL readers.

-- generate_memories gained profile_schemas and disable_natural_language_memories.
drop function if exists membank.generate_memories(
    jsonb, jsonb, text, timestamptz, timestamptz, jsonb, jsonb, jsonb, boolean, text, interval
);

-- A profile schema: a JSON Schema object whose top-level properties are the
-- profile's fields. Bank-wide (not per scope): it holds no user text.
create table membank_private.profile_schemas (
    schema_id text primary key,
    memory_schema jsonb not null,
    create_time timestamptz not null default statement_timestamp(),
    update_time timestamptz not null default statement_timestamp()
);

create type membank.profile_schema as (
    schema_id text,
    memory_schema jsonb,
    create_time timestamptz,
    update_time timestamptz
);

-- One field of a profile as the scoped view shows it.
create type membank.profile_field as (
    schema_id text,
    field text,
    value jsonb,
    memory_name uuid,
    revision integer,
    update_time timestamptz,
    expire_time timestamptz
);

-- The profile values an extraction accepted, waiting to be consolidated.
alter table membank_private.operations
add column profile_values jsonb not null default '[]';

-- The profile fields the consolidation model was shown: (schema_id, field,
-- memory name, revision, value) per value, re-checked before applying.
alter table membank_private.generation_jobs add column profile_plan jsonb;

-- A profile field is a STRUCTURED_PROFILE memory whose structured_content
-- is {"schema_id", "field", "value", "event_time"}. One per (scope, schema,
-- field): the index is retrieve_profiles' read path and the last guard
-- against two concurrent operations creating the same field twice.
create unique index memories_profile_field_idx
on membank_private.memories (
    scope_id, (structured_content ->> 'schema_id'), (structured_content ->> 'field')
)
where memory_type = 'STRUCTURED_PROFILE';

-- Which exact scopes a database role may read (bind_role_to_scope). A role
-- with bindings, or a member of one, sees only those scopes through the API
-- and the scoped views.
create table membank_private.scope_bindings (
    role_name name not null,
    scope jsonb not null,
    scope_id uuid not null generated always as (md5(scope::text)::uuid) stored,
    create_time timestamptz not null default statement_timestamp(),
    primary key (role_name, scope_id)
);

-- membank.scoped_revisions reads one scope's revisions.
create index memory_revisions_scope_idx
on membank_private.memory_revisions (scope_id, create_time);
