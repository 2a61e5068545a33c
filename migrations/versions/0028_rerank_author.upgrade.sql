-- The re-ranker no longer reads names out of texts (076_rerank.sql at head).
drop function if exists membank_private.proper_nouns(text);
