-- The re-ranker no longer reads names out of texts (076_rerank.sql at head).
drop function if exists membank_private.proper_nouns(text);
-- build_context takes rerank (its last argument, default on): the old
-- signature goes, db/functions re-creates the function.
drop function if exists membank.build_context(
    jsonb, text, text, real[], integer, integer, double precision, text[], integer, integer, boolean, text, text[],
    real[], double precision
);
