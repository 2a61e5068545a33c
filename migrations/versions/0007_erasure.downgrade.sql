-- 0007 downgrade: remove erasure and retention.
drop function if exists membank.erase_scope(jsonb, boolean);
drop function if exists membank.configure_retention(interval, interval, interval, boolean);
drop procedure if exists membank.apply_retention(integer, integer, jsonb);
drop function if exists membank_private.retention_batch(integer);
drop function if exists membank_private.forget_memory(uuid, uuid);
drop function if exists membank_private.redact_revision(membank.memory_revision);
drop function if exists membank_private.redact_generated(jsonb);
drop function if exists membank_private.is_blank(text);
drop index if exists membank_private.events_append_time_idx;
drop index if exists membank_private.operations_finished_idx;
drop table if exists membank_private.retention_settings;
