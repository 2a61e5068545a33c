-- scope_id becomes a plain column where it was GENERATED (Citus cannot
-- distribute by a generated column); the check keeps it equal to the scope.
alter table membank_private.memories alter column scope_id drop expression;
alter table membank_private.memories
add constraint memories_scope_id_check check (scope_id = md5(scope::text)::uuid);
alter table membank_private.operations alter column scope_id drop expression;
alter table membank_private.operations
add constraint operations_scope_id_check check (scope_id = md5(scope::text)::uuid);
alter table membank_private.tool_rules alter column scope_id drop expression;
alter table membank_private.tool_rules
add constraint tool_rules_scope_id_check check (scope_id = md5(scope::text)::uuid);
alter table membank_private.tool_permission_settings alter column scope_id drop expression;
alter table membank_private.tool_permission_settings
add constraint tool_permission_settings_scope_id_check check (scope_id = md5(scope::text)::uuid);
alter table membank_private.scope_bindings alter column scope_id drop expression;
alter table membank_private.scope_bindings
add constraint scope_bindings_scope_id_check check (scope_id = md5(scope::text)::uuid);

-- Foreign keys go first: they hang on the primary keys being replaced.
alter table membank_private.memory_embeddings drop constraint memory_embeddings_name_fkey;
alter table membank_private.embedding_jobs drop constraint embedding_jobs_name_fkey;
alter table membank_private.generation_jobs drop constraint generation_jobs_operation_name_fkey;

alter table membank_private.memories drop constraint memories_pkey;
alter table membank_private.memories add constraint memories_pkey primary key (name, scope_id);
alter table membank_private.memory_revisions drop constraint memory_revisions_pkey;
alter table membank_private.memory_revisions
add constraint memory_revisions_pkey primary key (memory_name, revision, scope_id);
alter table membank_private.memory_embeddings drop constraint memory_embeddings_pkey;
alter table membank_private.memory_embeddings
add constraint memory_embeddings_pkey primary key (name, scope_id);
alter table membank_private.embedding_jobs drop constraint embedding_jobs_pkey;
alter table membank_private.embedding_jobs
add constraint embedding_jobs_pkey primary key (name, fact_md5, scope_id);
alter table membank_private.operations drop constraint operations_pkey;
alter table membank_private.operations add constraint operations_pkey primary key (name, scope_id);
alter table membank_private.generation_jobs drop constraint generation_jobs_pkey;
alter table membank_private.generation_jobs add constraint generation_jobs_pkey primary key (id, scope_id);
alter table membank_private.generation_jobs drop constraint generation_jobs_operation_name_key;
alter table membank_private.generation_jobs
add constraint generation_jobs_operation_name_key unique (operation_name, scope_id);
alter table membank_private.tool_rules drop constraint tool_rules_pkey;
alter table membank_private.tool_rules add constraint tool_rules_pkey primary key (id, scope_id);
alter table membank_private.tool_rule_changes drop constraint tool_rule_changes_pkey;
alter table membank_private.tool_rule_changes add constraint tool_rule_changes_pkey primary key (id, scope_id);
alter table membank_private.tool_decisions drop constraint tool_decisions_pkey;
alter table membank_private.tool_decisions add constraint tool_decisions_pkey primary key (id, scope_id);

alter table membank_private.memory_embeddings
add constraint memory_embeddings_name_fkey foreign key (name, scope_id)
references membank_private.memories (name, scope_id) on delete cascade;
alter table membank_private.embedding_jobs
add constraint embedding_jobs_name_fkey foreign key (name, scope_id)
references membank_private.memories (name, scope_id) on delete cascade;
alter table membank_private.generation_jobs
add constraint generation_jobs_operation_name_fkey foreign key (operation_name, scope_id)
references membank_private.operations (name, scope_id) on delete cascade;
