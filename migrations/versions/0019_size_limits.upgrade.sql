-- 0020: the size of each ADK "app:" state entry (bytes of its key and of
-- its value as JSON text), written with the entry, so that the app's total
-- is summed from the entries without reading (detoasting) their values.
alter table membank_private.app_state_entries add column size integer;
update membank_private.app_state_entries
set size = octet_length(key) + octet_length(value::text);
alter table membank_private.app_state_entries alter column size set not null;
