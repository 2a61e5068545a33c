-- retrieve_memories and build_context take min_relevance (their last
-- argument): the old signatures go, db/functions re-creates both.
drop function if exists membank.build_context(
    jsonb, text, text, real[], integer, integer, double precision, text[], integer, integer, boolean, text, text[],
    real[]
);
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[]
);
-- and the one with session neighbours' neighbour_weight (0023)
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[],
    double precision
);

-- Each retrieved memory's relevance (073_relevance.sql): last, so that
-- the columns before it keep their positions.
alter type membank.retrieved_memory add attribute relevance double precision;
