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
-- The functions that return membank.retrieved_memory or an array of it,
-- added at head after 0027 (db/functions/070): the one-server ranking
-- statement and, for Citus, the ranking on the scope's node.
drop function if exists membank_private.rank_candidates(
    bigint[], uuid[], double precision[], integer[], real[], integer[], real[], double precision[],
    membank_extensions.vector[], uuid[], jsonb[], text[], integer, integer, double precision, integer,
    double precision, double precision, double precision, integer, double precision
);
drop function if exists membank_private.rank_on_shard(
    uuid, jsonb[], text[], membank_extensions.vector[], integer, integer, double precision, integer,
    double precision, bigint, boolean, bigint[], uuid[], double precision[], integer[], real[], integer[], real[],
    double precision[]
);
drop function if exists membank_private.retrieve_on_shard(
    uuid, jsonb[], text[], membank_extensions.vector[], integer, integer, double precision, jsonb, text[], text,
    timestamptz, timestamptz, text, double precision, double precision, integer, integer, double precision
);
drop function if exists membank_private.rerank_probability(double precision[]);
drop function if exists membank_private.rerank_coefficients();
drop function if exists membank_private.rerank_feature_names();
drop function if exists membank_private.proper_nouns(text);
