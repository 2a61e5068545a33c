-- 0010 downgrade: remove profiles, scoped views and scope bindings. (Like
-- earlier revisions, it does not restore the 0004 bodies of the functions
-- that 0010's db/ files changed: downgrade to base, or upgrade again.)
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
drop function if exists membank.delete_profile_schema(text, boolean);
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
drop function if exists membank_private.apply_profile_values(membank_private.operations, jsonb);
drop function if exists membank_private.to_profile_schema(membank_private.profile_schemas);
drop function if exists membank_private.profile_field_spec(jsonb);
drop function if exists membank_private.profile_field_kind(jsonb);
drop function if exists membank_private.profile_fields(jsonb);
drop function if exists membank_private.profile_prompt(jsonb);
drop function if exists membank_private.profile_reply_schema(jsonb);
drop function if exists membank_private.profile_merge_prompt(jsonb);
drop function if exists membank_private.consolidation_reply_schema(jsonb);
drop function if exists membank_private.extraction_reply_schema(membank_private.operations);
drop function if exists membank_private.refuse_bound_role(text);
drop function if exists membank_private.bound_scopes();
drop table if exists membank_private.scope_bindings;
drop index if exists membank_private.memories_profile_field_idx;
drop index if exists membank_private.memory_revisions_scope_idx;
alter table membank_private.generation_jobs drop column if exists profile_plan;
alter table membank_private.operations drop column if exists profile_values;
drop type if exists membank.profile_field;
drop type if exists membank.profile_schema;
drop table if exists membank_private.profile_schemas;
