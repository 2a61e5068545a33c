-- retrieve_memories takes rerank (its last argument): the old signature
-- goes, db/functions re-creates the function.
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[],
    double precision, double precision
);
