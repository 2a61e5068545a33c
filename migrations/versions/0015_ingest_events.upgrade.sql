-- 0015 upgrade: IngestEvents streams (Vertex AI Memory Bank's IngestEvents).

-- What ingest_events returns: the stream's state after the call.
create type membank.ingestion as (
    scope jsonb,
    stream_id text,
    appended integer,
    pending_events integer,
    operation_name uuid,
    trigger_reason text,
    last_operation_name uuid
);

-- What generate_due_streams returns: one row per operation it queued.
create type membank.due_stream as (
    scope jsonb,
    stream_id text,
    trigger_reason text,
    operation_name uuid,
    first_seq bigint,
    last_seq bigint,
    covered_events integer
);

-- A stream is the session of the same id in the same exact scope (its
-- events are that session's events). covered_seq is the watermark: the
-- session's events with append_seq <= covered_seq were given to a
-- GenerateMemories operation; it moves in the transaction that queues the
-- operation. pending_events, first_pending_time and last_event_time describe
-- the events above it (recomputed by every ingest_events and flush), so the
-- sweep finds due streams without reading events.
create table membank_private.ingest_streams (
    scope_id uuid not null,
    stream_id text not null,
    scope jsonb not null,
    generation_rule jsonb,
    covered_seq bigint not null default 0,
    pending_events integer not null default 0,
    first_pending_time timestamptz,
    last_event_time timestamptz,
    last_operation_name uuid,
    last_generation_time timestamptz,
    create_time timestamptz not null default statement_timestamp(),
    update_time timestamptz not null default statement_timestamp(),
    primary key (scope_id, stream_id),
    foreign key (scope_id, stream_id) references membank_private.sessions (scope_id, session_id)
    on delete cascade
);

create index ingest_streams_pending_idx
on membank_private.ingest_streams (last_event_time)
where pending_events > 0;

-- A session's events in append order: what a stream's watermark is read against.
create index events_session_seq_idx
on membank_private.events (scope_id, session_id, append_seq);

-- One row: the bank's default generation trigger (null: a stream without a rule is flushed at once, as in Vertex).
create table membank_private.ingestion_settings (
    singleton boolean primary key default true check (singleton),
    generation_trigger_config jsonb,
    update_time timestamptz not null default statement_timestamp()
);

insert into membank_private.ingestion_settings (singleton) values (true);

-- What add_messages returns (OpenAI-style chat messages in, a GenerateMemories operation out).
create type membank.added_messages as (
    operation_name uuid,
    appended integer,
    messages integer,
    excluded_messages integer,
    skipped_parts integer,
    event_ids text []
);
