-- 0014 downgrade: no retired sources (a deleted memory can be regenerated again).
drop table membank_private.retired_sources;
