-- 0009 downgrade: jobs forget their batches; the functions this revision
-- added go (0004's downgrade drops the rest; at head the db/ files bring
-- back what the code at that revision needs).
drop function if exists membank_private.validate_plan(membank_private.operations, jsonb, jsonb, jsonb);
drop function if exists membank_private.created_twice(uuid, text);
drop function if exists membank_private.created_twice(uuid, text, uuid);
drop function if exists membank_private.check_action(jsonb, jsonb, jsonb, jsonb);
drop function if exists membank_private.consolidation_prompt(membank_private.operations, jsonb);
drop function if exists membank_private.consolidation_fact_block(membank_private.operations, jsonb);
drop function if exists membank_private.said_text(jsonb);
drop function if exists membank_private.consolidation_plan(
    membank_private.operations, real[], text, integer, integer
);
drop function if exists membank_private.consolidation_batch(
    membank_private.operations, real[], text, integer, integer
);
drop function if exists membank_private.consolidation_prompt(text);
drop function if exists membank_private.consolidation_candidates(
    membank_private.operations, real[], text, integer, integer
);
drop function if exists membank_private.fact_candidates(
    membank_private.operations, integer, real[], text, integer
);
-- The batch's candidate search, whose signatures name pgvector's type
-- (wherever the extension lives): found by name.
do $$
declare
    _function regprocedure;
begin
    for _function in
        select p.oid::regprocedure from pg_catalog.pg_proc as p
        inner join pg_catalog.pg_namespace as n on n.oid = p.pronamespace
        where n.nspname = 'membank_private'
          and p.proname in ('fact_candidates', 'earlier_fact_candidates', 'earlier_facts_of_batch',
                            'scope_memory_candidates', 'quantized_scope_candidates', 'with_event_times')
    loop
        execute format('drop function %s', _function);
    end loop;
end
$$;
drop function if exists membank_private.memory_event_time(uuid);
drop function if exists membank_private.accept_extracted_facts(membank_private.operations, jsonb, jsonb, jsonb);
drop function if exists membank_private.parse_model_json(text, text);
drop function if exists membank_private.reply_items(jsonb, text);
drop function if exists membank_private.try_json(text);
drop function if exists membank_private.json_segments(text);
drop function if exists membank_private.strip_think(text);
drop function if exists membank_private.extraction_batches(membank_private.operations, integer);
drop function if exists membank_private.extraction_prompt(membank_private.operations, jsonb);
drop function if exists membank_private.event_line(jsonb);
drop function if exists membank_private.split_text(text, integer);
drop function if exists membank_private.estimate_tokens(text);
drop function if exists membank_private.token_budget();
alter table membank_private.generation_jobs
drop column token_budget,
drop column extract_batch,
drop column next_fact;
