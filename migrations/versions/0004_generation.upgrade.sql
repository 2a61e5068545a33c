-- 0004 upgrade: GenerateMemories operations and the generation job queue.

-- The speaker's UTC offset of each event, as given in its timestamp:
-- "yesterday" said at 23:30 -05:00 is the day before the speaker's date,
-- not before the UTC date. validate_events returns it, so its shape changes.
alter table membank_private.events add column utc_offset interval not null default interval '0';
drop function if exists membank_private.validate_events(jsonb);
-- parse_name gained a kind (memory or operation) for its message.
drop function if exists membank_private.parse_name(text, text);

-- One GenerateMemories operation as the API shows it.
create type membank.operation as (
    name uuid,
    scope jsonb,
    session_id text,
    done boolean,
    error jsonb,
    generated_memories jsonb,
    rejected_items jsonb,
    stage text,
    model_calls integer,
    create_time timestamptz,
    update_time timestamptz
);

-- A claimed generation job: what the worker must carry to a model.
create type membank.generation_job as (
    job_id bigint,
    operation_name uuid,
    stage text,
    attempt integer,
    embed_texts text [],
    prompt text,
    response_schema jsonb,
    input jsonb
);

-- request_key is the idempotency key: a client's request_id, or a hash of
-- the whole request (scope, source events, facts and options). While an
-- operation with that key has not failed, the same request returns it.
create table membank_private.operations (
    name uuid primary key default gen_random_uuid(),
    scope jsonb not null,
    scope_id uuid not null generated always as (md5(scope::text)::uuid) stored,
    session_id text,
    request_key uuid not null,
    options jsonb not null,
    source_events jsonb not null default '[]',
    facts jsonb not null default '[]',
    stage text not null default 'EXTRACT'
    check (stage in ('EXTRACT', 'CONSOLIDATE', 'DONE')),
    done boolean not null default false,
    error jsonb,
    generated_memories jsonb not null default '[]',
    rejected_items jsonb not null default '[]',
    model_calls integer not null default 0,
    create_time timestamptz not null default statement_timestamp(),
    update_time timestamptz not null default statement_timestamp()
);

create unique index operations_request_key_idx
on membank_private.operations (scope_id, request_key) where error is null;

create index operations_session_idx
on membank_private.operations (scope_id, session_id, create_time);

-- One row per operation that still needs a model call. The worker holds
-- the row lock (FOR UPDATE SKIP LOCKED) for the whole call, so a worker
-- that dies releases it. plan: the consolidation candidates (names and
-- revisions) the model was shown; fact_embeddings: the facts' vectors.
create table membank_private.generation_jobs (
    id bigint generated always as identity primary key,
    operation_name uuid not null unique
    references membank_private.operations (name) on delete cascade,
    scope_id uuid not null,
    attempts integer not null default 0,
    replans integer not null default 0,
    retry_time timestamptz not null default statement_timestamp(),
    last_error text,
    plan jsonb,
    fact_embeddings real[],
    embedding_model text,
    create_time timestamptz not null default statement_timestamp()
);

create index generation_jobs_retry_idx
on membank_private.generation_jobs (retry_time);
