-- 0009 downgrade: remove profiles, scoped views and scope bindings.
drop view if exists membank.scoped_memories;
drop view if exists membank.scoped_profiles;
drop view if exists membank.scoped_revisions;
drop function if exists membank.set_scope(jsonb, boolean);
drop function if exists membank.current_scope();
drop function if exists membank.bind_role_to_scope(name, jsonb);
drop function if exists membank.unbind_role_from_scope(name, jsonb);
drop function if exists membank.list_scope_bindings(name);
drop function if exists membank_private.scope_allowed(jsonb);
drop function if exists membank_private.check_scope_allowed(jsonb, text);
drop function if exists membank_private.active_scope();
drop function if exists membank.create_profile_schema(text, jsonb);
drop function if exists membank.get_profile_schema(text);
drop function if exists membank.list_profile_schemas();
drop function if exists membank.update_profile_schema(text, jsonb);
drop function if exists membank.delete_profile_schema(text);
drop function if exists membank.retrieve_profiles(jsonb, text[]);
drop function if exists membank.generate_memories(
    jsonb, jsonb, text, timestamptz, timestamptz, jsonb, jsonb, jsonb, boolean, text, interval, jsonb, boolean
);
drop function if exists membank_private.validate_memory_schema(jsonb);
drop function if exists membank_private.validate_schema_id(text, text);
drop function if exists membank_private.check_profile_value(jsonb, jsonb);
drop function if exists membank_private.resolve_profile_schemas(jsonb, boolean);
drop function if exists membank_private.accept_profile_values(membank_private.operations, jsonb);
drop function if exists membank_private.profile_plan(membank_private.operations);
drop function if exists membank_private.profile_plan_key(jsonb);
drop function if exists membank_private.merge_profile_text(text, text);
drop function if exists membank_private.apply_profile_values(
    membank_private.operations, jsonb, jsonb, boolean
);
drop function if exists membank_private.needs_profile_model(membank_private.operations);
drop table if exists membank_private.scope_bindings;
drop index if exists membank_private.memories_profile_field_idx;
alter table membank_private.generation_jobs drop column if exists profile_plan;
alter table membank_private.operations drop column if exists profile_values;
drop type if exists membank.profile_field;
drop type if exists membank.profile_schema;
drop table if exists membank_private.profile_schemas;
