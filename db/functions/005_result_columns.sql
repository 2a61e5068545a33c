-- The meaning of each column of the public row types that API functions
-- return, as COMMENT ON COLUMN: psql's \d+ shows them, and
-- docs/sql-reference.md lists them under each function (python -m
-- membank.docs; tests/test_docs.py fails on a result column without one).
-- Functions returning TABLE (...) carry theirs in a "Columns:" block of
-- their own comment (PostgreSQL has no comment per argument).

-- membank.memory: one memory, as create/get/update/delete/rollback return it.
comment on column membank.memory.name is
'The memory''s name, a uuid chosen by the bank: the key for get, update, delete and revisions.';
comment on column membank.memory.scope is
'The exact scope (JSON object of string keys to string values) the memory belongs to; it never changes.';
comment on column membank.memory.memory_type is
'NATURAL_LANGUAGE (a fact) or STRUCTURED_PROFILE (a profile field, in structured_content).';
comment on column membank.memory.fact is
'The fact in natural language (null for a STRUCTURED_PROFILE memory).';
comment on column membank.memory.structured_content is
'For a STRUCTURED_PROFILE memory, its JSON object (profile schema id, field and value); else null.';
comment on column membank.memory.topics is
'Topic labels, sorted and distinct (managed ones such as USER_PREFERENCES, or custom).';
comment on column membank.memory.metadata is
'The caller''s JSON object (filterable by containment in list and retrieve).';
comment on column membank.memory.revision is
'Revision number, 1 at creation, +1 per change: the expected_revision of a compare-and-set update or delete.';
comment on column membank.memory.create_time is
'When the memory was created (timestamptz).';
comment on column membank.memory.update_time is
'When it last changed (timestamptz).';
comment on column membank.memory.expire_time is
'When it expires and becomes invisible (timestamptz), or null: never.';

-- list_memories and retrieve_memories add their own columns to the memory's.
comment on column membank.memory_page_item.next_page_token is
'On the last row of a full page, the page_token of the next page; null otherwise (and at the end).';
comment on column membank.retrieved_memory.distance is
'Cosine distance between the query vector and the memory''s (0..2, smaller is closer; the smallest over the '
'queries); null when either has no current vector.';
comment on column membank.retrieved_memory.similarity is
'1 - distance (cosine similarity, -1..1); null when distance is.';
comment on column membank.retrieved_memory.text_rank is
'Full-text score: the sum of the IDF in the scope of the query words the memory matches (0: none).';
comment on column membank.retrieved_memory.vector_rank is
'1-based position in the vector list (null: not in it).';
comment on column membank.retrieved_memory.text_match_rank is
'1-based position in the full-text list (null: not in it).';
comment on column membank.retrieved_memory.score is
'The fused score results are ordered by (RRF, or the convex combination with fusion => ''convex''); larger is better.';
comment on column membank.retrieved_memory.matched_signals is
'Which lists found the memory: {vector}, {text} or {vector,text} (empty when listing without a query).';
comment on column membank.retrieved_memory.degraded is
'True when the memory or the query has no current vector, so only the text could match it.';
comment on column membank.retrieved_memory.next_page_token is
'Without a query (listing), the page_token of the next page on the last row of a full page; else null.';
comment on column membank.retrieved_memory.relevance is
'0..1: the estimated probability that the memory is evidence for the query (073_relevance.sql, fitted by '
'bench/fit_relevance.py); null without a query. min_relevance gates the top_k on it.';

do $$
declare
    _column record;
begin
    -- The memory's own columns mean the same in the two types that extend it.
    for _column in
        select t.typname, a.attname, pg_catalog.col_description(m.typrelid, ma.attnum) as meaning
        from pg_catalog.pg_type as t
        inner join pg_catalog.pg_attribute as a on t.typrelid = a.attrelid and a.attnum > 0
        inner join pg_catalog.pg_type as m on m.typname = 'memory' and m.typnamespace = t.typnamespace
        inner join pg_catalog.pg_attribute as ma on m.typrelid = ma.attrelid and a.attname = ma.attname
        where t.typnamespace = 'membank'::regnamespace and t.typname in ('memory_page_item', 'retrieved_memory')
    loop
        execute pg_catalog.format('comment on column membank.%I.%I is %L',
                                  _column.typname, _column.attname, _column.meaning);
    end loop;
end
$$;

-- membank.memory_revision: one immutable revision (list_revisions, get_revision).
comment on column membank.memory_revision.memory_name is 'The memory''s name.';
comment on column membank.memory_revision.revision is 'The revision number (1, 2, ...).';
comment on column membank.memory_revision.scope is 'The memory''s exact scope.';
comment on column membank.memory_revision.action is
'What this revision recorded: CREATED, UPDATED or DELETED (a rollback is labelled {"rollback_to": n}).';
comment on column membank.memory_revision.memory_type is 'NATURAL_LANGUAGE or STRUCTURED_PROFILE.';
comment on column membank.memory_revision.fact is
'The fact as of this revision (null once purged or expired: redacted).';
comment on column membank.memory_revision.previous_fact is 'The fact before this revision (null for CREATED).';
comment on column membank.memory_revision.structured_content is 'A profile field''s JSON as of this revision.';
comment on column membank.memory_revision.previous_structured_content is
'The profile field''s JSON before this revision.';
comment on column membank.memory_revision.topics is 'Topic labels as of this revision.';
comment on column membank.memory_revision.metadata is 'The caller''s metadata as of this revision.';
comment on column membank.memory_revision.expire_time is 'The expiry as of this revision (null: never).';
comment on column membank.memory_revision.labels is
'Labels of the change: the caller''s, and membank''s own (e.g. the operation that made it, {"reason": "purge"}).';
comment on column membank.memory_revision.source_event_ids is
'The ids of the events the change was extracted from (empty when none).';
comment on column membank.memory_revision.extracted_memories is
'What extraction saw for this change (the facts extracted and their context), or null.';
comment on column membank.memory_revision.create_time is 'When the revision was written.';

-- membank.event: one conversation event (list_events).
comment on column membank.event.session_id is 'The session the event belongs to.';
comment on column membank.event.event_id is 'The caller''s id of the event, unique in its (scope, session).';
comment on column membank.event.author is 'Who said it: user, assistant, system, a tool or an agent''s name.';
comment on column membank.event.text is 'What was said (null once redacted by a purge or a finished operation).';
comment on column membank.event.event_time is 'When it was said (the event''s timestamp).';
comment on column membank.event.append_time is 'When the bank stored it (database clock).';

-- membank.operation: a GenerateMemories operation (get_operation, list_operations).
comment on column membank.operation.name is 'The operation''s name (uuid).';
comment on column membank.operation.scope is 'The exact scope it works in.';
comment on column membank.operation.session_id is 'The session it generates from (null for facts given directly).';
comment on column membank.operation.done is
'False while queued or running; true when finished (with or without error).';
comment on column membank.operation.error is
'Null, or {"code", "message"} (and "attempts", "stage") when it failed and applied nothing further.';
comment on column membank.operation.generated_memories is
'JSON array of {"memory", "action": CREATED | UPDATED | DELETED} in the order applied (empty: a valid no-op).';
comment on column membank.operation.rejected_items is
'JSON array of {"stage", "item", "reason"}: each model item that was not applied, and why.';
comment on column membank.operation.stage is 'EXTRACT, CONSOLIDATE, COMPACT or DONE.';
comment on column membank.operation.model_calls is 'Model calls made so far, failed ones included.';
comment on column membank.operation.create_time is 'When it was queued.';
comment on column membank.operation.update_time is 'When it last changed.';

-- membank.generation_job: a claimed model call (claim_generation_jobs, prepare_consolidation).
comment on column membank.generation_job.job_id is
'The job''s id: pass it to prepare_consolidation, complete_generation_job or fail_generation_job.';
comment on column membank.generation_job.operation_name is 'The operation the job works for.';
comment on column membank.generation_job.stage is 'EXTRACT, CONSOLIDATE or COMPACT.';
comment on column membank.generation_job.attempt is 'The attempt this claim is (1 for the first).';
comment on column membank.generation_job.embed_texts is
'CONSOLIDATE: the facts to embed (passage mode) before prepare_consolidation; null: reuse the stored vectors.';
comment on column membank.generation_job.prompt is
'The prompt to send to the model (null for CONSOLIDATE until prepare_consolidation returns it).';
comment on column membank.generation_job.response_schema is 'The JSON schema the model''s reply must follow.';
comment on column membank.generation_job.input is
'The same request as structured JSON (events or facts, candidates, topics), for offline providers.';

-- membank.profile_schema (create/get/list/update_profile_schema).
comment on column membank.profile_schema.schema_id is 'The profile schema''s id.';
comment on column membank.profile_schema.memory_schema is
'Its JSON schema: {"properties": {field: {"type", "description"}}}.';
comment on column membank.profile_schema.create_time is 'When it was created.';
comment on column membank.profile_schema.update_time is 'When it last changed.';

-- membank.added_messages (add_messages).
comment on column membank.added_messages.operation_name is 'The GenerateMemories operation started over the messages.';
comment on column membank.added_messages.appended is 'Messages stored as new events (0 when all were stored before).';
comment on column membank.added_messages.messages is 'Messages in the call.';
comment on column membank.added_messages.excluded_messages is
'Messages stored but kept out of extraction (roles not in extract_roles).';
comment on column membank.added_messages.skipped_parts is 'Content parts that are not text, skipped.';
comment on column membank.added_messages.event_ids is 'The event id of each message, in message order.';

-- membank.ingestion (ingest_events) and membank.due_stream (generate_due_streams).
comment on column membank.ingestion.scope is 'The exact scope.';
comment on column membank.ingestion.stream_id is 'The stream (the session of the same id).';
comment on column membank.ingestion.appended is 'New events stored by this call.';
comment on column membank.ingestion.pending_events is 'The stream''s events not yet covered by an operation.';
comment on column membank.ingestion.operation_name is 'The operation this call queued, else null.';
comment on column membank.ingestion.trigger_reason is
'Why it was queued: event_count, force_flush, no_rule, flush_after_24h; null when nothing was.';
comment on column membank.ingestion.last_operation_name is 'The stream''s newest operation (null: none yet).';
comment on column membank.due_stream.scope is 'The exact scope.';
comment on column membank.due_stream.stream_id is 'The stream.';
comment on column membank.due_stream.trigger_reason is
'Why it was due: event_count, idle_duration, fixed_interval, no_rule or flush_after_24h.';
comment on column membank.due_stream.operation_name is 'The operation queued.';
comment on column membank.due_stream.first_seq is 'The first append sequence number the operation covers.';
comment on column membank.due_stream.last_seq is 'The last append sequence number it covers.';
comment on column membank.due_stream.covered_events is 'How many events it covers.';

-- membank.tool_rule and membank.tool_decision (tool permissions).
comment on column membank.tool_rule.id is 'The rule''s id.';
comment on column membank.tool_rule.scope is 'The exact scope it belongs to.';
comment on column membank.tool_rule.project_id is 'Null: a global rule (tier 3); else a project rule (tier 2).';
comment on column membank.tool_rule.tool_name is 'The tool it applies to (* for every tool).';
comment on column membank.tool_rule.pattern is 'The regular expression matched against a whole command part.';
comment on column membank.tool_rule.decision is 'ALLOW or BLOCK.';
comment on column membank.tool_rule.allow_operators is 'For ALLOW: the shell operators it lets through.';
comment on column membank.tool_rule.description is 'The caller''s description.';
comment on column membank.tool_rule.revision is 'Revision number, +1 per update.';
comment on column membank.tool_rule.create_time is 'When it was created.';
comment on column membank.tool_rule.update_time is 'When it last changed.';
comment on column membank.tool_decision.decision is 'ALLOW, BLOCK or PROMPT_USER.';
comment on column membank.tool_decision.reason is 'Why, in words (the rule or the fail-closed cause).';
comment on column membank.tool_decision.rule_id is 'The deciding rule''s id, or null.';
comment on column membank.tool_decision.tier is
'0 exempt tool, 1 allow-once grant, 2 project rule, 3 global rule; null when no rule decided.';
