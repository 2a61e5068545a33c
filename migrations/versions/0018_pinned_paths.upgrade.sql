-- 0018: compact_scopes returns (scope, operation_name, skipped); a return type
-- cannot change in place, so the old function goes and the db/ files applied
-- at head create the new one (with its grant, db/privileges.sql).
drop function if exists membank.compact_scopes(jsonb, interval, integer, integer);
