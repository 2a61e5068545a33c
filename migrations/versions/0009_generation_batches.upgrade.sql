-- 0009 upgrade: an operation's model calls are made in batches bounded in
-- tokens. The job keeps the budget it was cut with (so that a changed
-- setting never shifts batches half way), the extraction batch it is at and
-- the first fact of the next consolidation batch.
alter table membank_private.generation_jobs
add column token_budget integer,
add column extract_batch integer not null default 0,
add column next_fact integer not null default 0;

-- Signatures that changed: prompts and validation take the batch's events,
-- and a reply is parsed against the kind of reply asked for.
drop function if exists membank_private.extraction_prompt(membank_private.operations);
drop function if exists membank_private.parse_model_json(text);
drop function if exists membank_private.accept_extracted_facts(membank_private.operations, jsonb);
drop function if exists membank_private.consolidation_candidates(membank_private.operations, real[], text);
drop function if exists membank_private.check_action(jsonb, integer, jsonb, jsonb);
