-- 0015 downgrade: drop the IngestEvents functions, then their storage.
drop function if exists membank.ingest_events(jsonb, text, jsonb, jsonb, boolean);
drop function if exists membank.generate_due_streams(timestamptz, integer);
drop function if exists membank.configure_ingestion(jsonb);
drop function if exists membank_private.validate_trigger_config(jsonb, text);
drop function if exists membank_private.stream_trigger(membank_private.ingest_streams, jsonb, timestamptz);
drop function if exists membank_private.refresh_stream(uuid, text);
drop function if exists membank_private.flush_stream(membank_private.ingest_streams, text, timestamptz);
drop function if exists membank_private.parse_trigger_duration(jsonb, text);
drop function if exists membank_private.bank_generation_rule();
drop function if exists membank.add_messages(jsonb, jsonb, text, text[], jsonb);
drop function if exists membank_private.message_events(jsonb, text, jsonb);
drop function if exists membank.build_context(
    jsonb, text, text, real[], integer, integer, double precision, text[], integer, integer, boolean, text, text[],
    real[]
);
drop function if exists membank_private.context_profile_lines(jsonb[]);
drop function if exists membank_private.scope_key_text(jsonb);
drop function if exists membank_private.cut_to_tokens(text, integer);
drop table if exists membank_private.ingestion_settings;
drop index if exists membank_private.events_session_seq_idx;
drop table if exists membank_private.ingest_streams;
drop type if exists membank.due_stream;
drop type if exists membank.ingestion;
drop type if exists membank.added_messages;
