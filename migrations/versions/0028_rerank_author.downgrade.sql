-- Back to build_context without rerank: drop the new signature; the
-- previous revision's db/functions re-create the old one (and
-- proper_nouns) at head.
drop function if exists membank.build_context(
    jsonb, text, text, real[], integer, integer, double precision, text[], integer, integer, boolean, text, text[],
    real[], double precision, boolean
);
