-- Logical replication (Citus's online shard moves) identifies an updated or
-- deleted row by its replica identity: the whole row for these two tables.
alter table membank_private.scope_lexicon_delta replica identity full;
alter table membank_private.scope_stats_delta replica identity full;
