alter table membank_private.scope_lexicon_delta replica identity default;
alter table membank_private.scope_stats_delta replica identity default;
