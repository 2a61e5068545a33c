-- 0025 downgrade: no relevance, no min_relevance.
drop function if exists membank.build_context(
    jsonb, text, text, real[], integer, integer, double precision, text[], integer, integer, boolean, text, text[],
    real[], double precision
);
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[],
    double precision, double precision
);
drop function if exists membank.default_min_relevance();
drop function if exists membank_private.check_min_relevance(double precision);
drop function if exists membank_private.relevance(
    double precision, double precision, double precision, double precision, integer, integer
);
drop function if exists membank_private.relevance_features(
    double precision, double precision, double precision, double precision, integer, integer
);
drop function if exists membank_private.answerability(double precision, double precision, double precision);
drop function if exists membank_private.relevance_coefficients(text);
drop function if exists membank_private.query_signals(text[], uuid[]);
alter type membank.retrieved_memory drop attribute if exists relevance;
