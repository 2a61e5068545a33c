-- Back to retrieve_memories without rerank: drop the new signature and the
-- re-ranker's functions; the previous revision's db/functions re-create the
-- old signature at head.
drop function if exists membank.retrieve_memories(
    jsonb, text, real[], integer, double precision, jsonb, text[], text, timestamptz, timestamptz,
    text, double precision, double precision, integer, text, integer, integer, text, text[], real[],
    double precision, double precision, boolean
);
drop function if exists membank_private.rerank_features(uuid[], text[], membank.retrieved_memory[]);
-- retrieve_memories' first pass (db/functions/070, added at head after 0027;
-- it returns membank.retrieved_memory, which an older downgrade drops).
drop function if exists membank_private.fused_memories(
    jsonb[], uuid[], text[], membank_extensions.vector[], integer, integer, double precision, jsonb, text[], text,
    timestamptz, timestamptz, text, double precision, double precision, integer, integer, double precision,
    double precision
);
drop function if exists membank_private.rerank_probability(double precision[]);
drop function if exists membank_private.rerank_coefficients();
drop function if exists membank_private.rerank_feature_names();
drop function if exists membank_private.proper_nouns(text);
