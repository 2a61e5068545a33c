-- 0004 downgrade: remove GenerateMemories operations and jobs.
drop function if exists membank.generate_memories(
    jsonb, jsonb, text, timestamptz, timestamptz, jsonb, jsonb, jsonb, boolean, text, interval
);
drop function if exists membank.get_operation(text, jsonb);
drop function if exists membank.list_operations(jsonb, text, boolean, integer);
drop function if exists membank.claim_generation_jobs(integer);
drop function if exists membank.prepare_consolidation(bigint, real[], text);
drop function if exists membank.complete_generation_job(bigint, text);
drop function if exists membank.fail_generation_job(bigint, text, boolean);
drop function if exists membank.generation_backlog();
drop function if exists membank_private.apply_consolidation(membank_private.generation_jobs, jsonb);
drop function if exists membank_private.check_action(jsonb, integer, jsonb, jsonb);
drop function if exists membank_private.apply_creates(uuid);
drop function if exists membank_private.apply_create(membank_private.operations, jsonb, text);
drop function if exists membank_private.set_fact_context(membank_private.operations, jsonb, text);
drop function if exists membank_private.record_generated(uuid, membank_private.memories, text);
drop function if exists membank_private.consolidation_prompt(membank_private.operations, jsonb);
drop function if exists membank_private.consolidation_schema();
drop function if exists membank_private.plan_key(jsonb);
drop function if exists membank_private.consolidation_candidates(membank_private.operations, real[], text);
drop function if exists membank_private.accept_extracted_facts(membank_private.operations, jsonb);
drop function if exists membank_private.parse_model_json(text);
drop function if exists membank_private.extraction_prompt(membank_private.operations);
drop function if exists membank_private.describe_time(timestamptz);
drop function if exists membank_private.extraction_schema();
drop function if exists membank_private.resolve_source_events(jsonb, jsonb, text, timestamptz, timestamptz);
drop function if exists membank_private.reject_item(uuid, text, jsonb, text);
drop function if exists membank_private.finish_operation(uuid, jsonb);
drop function if exists membank_private.to_operation(membank_private.operations);
drop function if exists membank_private.validate_direct_facts(jsonb);
drop function if exists membank_private.validate_examples(jsonb);
drop function if exists membank_private.validate_generation_topics(jsonb);
drop function if exists membank_private.managed_topics();
drop table if exists membank_private.generation_jobs;
drop table if exists membank_private.operations;
drop type if exists membank.generation_job;
drop type if exists membank.operation;
