-- Back to 0015: keys without scope_id, GENERATED scope_id columns. A
-- generation expression cannot be added to an existing column, so each
-- generated column is rebuilt (it moves to the end of its table) with the
-- indexes on it. The scoped views read these columns; db/ recreates them at head.
drop view if exists membank.scoped_memories;
drop view if exists membank.scoped_profiles;
drop view if exists membank.scoped_revisions;

alter table membank_private.memory_embeddings drop constraint memory_embeddings_name_fkey;
alter table membank_private.embedding_jobs drop constraint embedding_jobs_name_fkey;
alter table membank_private.generation_jobs drop constraint generation_jobs_operation_name_fkey;

alter table membank_private.memory_revisions drop constraint memory_revisions_pkey;
alter table membank_private.memory_revisions add constraint memory_revisions_pkey primary key (memory_name, revision);
alter table membank_private.memory_embeddings drop constraint memory_embeddings_pkey;
alter table membank_private.memory_embeddings add constraint memory_embeddings_pkey primary key (name);
alter table membank_private.embedding_jobs drop constraint embedding_jobs_pkey;
alter table membank_private.embedding_jobs add constraint embedding_jobs_pkey primary key (name, fact_md5);
alter table membank_private.generation_jobs drop constraint generation_jobs_pkey;
alter table membank_private.generation_jobs add constraint generation_jobs_pkey primary key (id);
alter table membank_private.generation_jobs drop constraint generation_jobs_operation_name_key;
alter table membank_private.generation_jobs add constraint generation_jobs_operation_name_key unique (operation_name);
alter table membank_private.tool_rule_changes drop constraint tool_rule_changes_pkey;
alter table membank_private.tool_rule_changes add constraint tool_rule_changes_pkey primary key (id);
alter table membank_private.tool_decisions drop constraint tool_decisions_pkey;
alter table membank_private.tool_decisions add constraint tool_decisions_pkey primary key (id);

-- memories
alter table membank_private.memories
add column scope_id_generated uuid not null generated always as (md5(scope::text)::uuid) stored;
alter table membank_private.memories drop constraint memories_pkey;
drop index membank_private.memories_profile_field_idx;
drop index membank_private.memories_scope_create_idx;
drop index membank_private.memories_scope_fts_idx;
alter table membank_private.memories drop column scope_id;
alter table membank_private.memories rename column scope_id_generated to scope_id;
alter table membank_private.memories add constraint memories_pkey primary key (name);
create unique index memories_profile_field_idx
on membank_private.memories (scope_id, (structured_content ->> 'schema_id'), (structured_content ->> 'field'))
where memory_type = 'STRUCTURED_PROFILE';
create index memories_scope_create_idx on membank_private.memories (scope_id, create_time, name);
create index memories_scope_fts_idx on membank_private.memories using gin (scope_id, fts);

-- operations
alter table membank_private.operations
add column scope_id_generated uuid not null generated always as (md5(scope::text)::uuid) stored;
alter table membank_private.operations drop constraint operations_pkey;
drop index membank_private.operations_request_key_idx;
drop index membank_private.operations_session_idx;
alter table membank_private.operations drop column scope_id;
alter table membank_private.operations rename column scope_id_generated to scope_id;
alter table membank_private.operations add constraint operations_pkey primary key (name);
create unique index operations_request_key_idx
on membank_private.operations (scope_id, request_key) where error is null;
create index operations_session_idx on membank_private.operations (scope_id, session_id, create_time);

-- tool_rules
alter table membank_private.tool_rules
add column scope_id_generated uuid not null generated always as (md5(scope::text)::uuid) stored;
alter table membank_private.tool_rules drop constraint tool_rules_pkey;
drop index membank_private.tool_rules_scope_idx;
alter table membank_private.tool_rules drop column scope_id;
alter table membank_private.tool_rules rename column scope_id_generated to scope_id;
alter table membank_private.tool_rules add constraint tool_rules_pkey primary key (id);
create index tool_rules_scope_idx on membank_private.tool_rules (scope_id, tool_name, project_id);

-- tool_permission_settings (scope_id is its primary key)
alter table membank_private.tool_permission_settings
add column scope_id_generated uuid not null generated always as (md5(scope::text)::uuid) stored;
alter table membank_private.tool_permission_settings drop column scope_id;
alter table membank_private.tool_permission_settings rename column scope_id_generated to scope_id;
alter table membank_private.tool_permission_settings
add constraint tool_permission_settings_pkey primary key (scope_id);

-- scope_bindings
alter table membank_private.scope_bindings
add column scope_id_generated uuid not null generated always as (md5(scope::text)::uuid) stored;
alter table membank_private.scope_bindings drop column scope_id;
alter table membank_private.scope_bindings rename column scope_id_generated to scope_id;
alter table membank_private.scope_bindings add constraint scope_bindings_pkey primary key (role_oid, scope_id);

alter table membank_private.memory_embeddings
add constraint memory_embeddings_name_fkey foreign key (name)
references membank_private.memories (name) on delete cascade;
alter table membank_private.embedding_jobs
add constraint embedding_jobs_name_fkey foreign key (name)
references membank_private.memories (name) on delete cascade;
alter table membank_private.generation_jobs
add constraint generation_jobs_operation_name_fkey foreign key (operation_name)
references membank_private.operations (name) on delete cascade;
