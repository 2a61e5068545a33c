-- 0020 downgrade: entries without their size.
alter table membank_private.app_state_entries drop column size;
