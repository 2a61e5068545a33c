-- 0005 downgrade: remove tool permissions and compaction.
drop trigger if exists tool_rules_log_change on membank_private.tool_rules;
drop function if exists membank_private.to_tool_rule(membank_private.tool_rules);
drop function if exists membank_private.tool_rules_log_change();
drop function if exists membank_private.decide_part(membank_private.tool_rules[], text, text, text[]);
drop table if exists membank_private.tool_rules;
drop table if exists membank_private.tool_permission_settings;
drop table if exists membank_private.tool_decisions;
drop table if exists membank_private.tool_rule_changes;
drop function if exists membank.check_tool_permission(jsonb, text, text, text, text, boolean, text);
drop function if exists membank.create_tool_rule(jsonb, text, text, text, text, text[], text);
drop function if exists membank.update_tool_rule(bigint, jsonb, text, text, text[], text);
drop function if exists membank.delete_tool_rule(bigint, jsonb);
drop function if exists membank.list_tool_rules(jsonb, text);
drop function if exists membank.list_tool_rule_changes(jsonb, bigint, integer);
drop function if exists membank.list_tool_decisions(jsonb, integer);
drop function if exists membank.set_exempt_tools(jsonb, text[]);
drop function if exists membank.scope_id(jsonb);
drop function if exists membank_private.default_exempt_tools();
drop function if exists membank_private.shell_operators(text);
drop function if exists membank_private.shell_parts(text);
drop function if exists membank_private.validate_tool_pattern(text);
drop function if exists membank_private.validate_allow_operators(text[]);
drop function if exists membank_private.validate_tool_name(text, text);
drop function if exists membank_private.validate_project_id(text);
drop function if exists membank.compact_memories(jsonb, interval, integer, text[], text, boolean);
drop function if exists membank.compact_scopes(jsonb, interval, integer, integer);
drop function if exists membank_private.compaction_prompt(membank_private.operations);
drop function if exists membank_private.compaction_schema();
drop function if exists membank_private.apply_compaction(membank_private.operations, text);
drop function if exists membank_private.in_database_model();
drop type if exists membank.tool_decision;
drop type if exists membank.tool_rule;
delete from membank_private.generation_jobs as j
using membank_private.operations as o
where
    o.name = j.operation_name
    and o.stage = 'COMPACT';
update membank_private.operations set stage = 'DONE'
where stage = 'COMPACT';
alter table membank_private.operations drop constraint operations_stage_check;
alter table membank_private.operations add constraint operations_stage_check
check (stage in ('EXTRACT', 'CONSOLIDATE', 'DONE'));
