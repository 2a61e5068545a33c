-- Consolidation: each extracted fact against the nearest memories of its
-- scope (the hybrid retrieval). The model decides CREATE / UPDATE / DELETE /
-- NONE per fact, naming candidates; SQL applies the decisions.
--
-- Concurrency (DESIGN.md): the plan is made outside locks against a
-- snapshot (candidate names and revisions, kept on the job). To apply, the
-- scope's write lock is taken (015_scope_locks.sql), the candidates are
-- searched again (only when what they are searched in changed since the
-- plan: candidates_unchanged below), and if they differ from what the
-- model saw, the job is
-- re-planned (at most 3 times) while the lock is held, so the next plan
-- applies. Candidate rows are then locked FOR UPDATE in name order and
-- their revisions checked. Two workers consolidating "I love cats" and
-- "I hate cats" for one scope thus end in one memory: the second sees the
-- first's memory as a candidate.
--
-- Newest truth by event time (not write time): every candidate carries the
-- event time of the statement it holds (memory_event_time), and an older
-- fact never updates or deletes a memory said later (check_action). The
-- facts of one operation are sorted by event time and consolidated in that
-- order, in batches within the token budget: within a batch, fact i also
-- sees the earlier facts of the batch as candidates named "fact:j" (what
-- fact j created or updated once applied); a later batch sees the memories
-- the earlier batches wrote.

-- name: memory_event_time: when the statement a memory holds was made (its latest revision's extracted facts).
-- Null when unknown: a memory written directly (create_memory, update_memory)
-- carries no event time and is not compared.
create or replace function membank_private.memory_event_time(memory_name uuid)
returns timestamptz
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select (select max((x ->> 'event_time')::timestamptz)
            from jsonb_array_elements(case when jsonb_typeof(r.extracted_memories) = 'array'
                                           then r.extracted_memories else '[]' end) as x)
    from membank_private.memory_revisions as r
    where r.memory_name = memory_event_time.memory_name
    order by r.revision desc
    limit 1;
$$;

-- name: fact_candidates: fact i's candidates: its nearest memories (top 5) and up to 3 earlier facts of its batch.
-- The earlier facts (first .. i - 1) are ranked by cosine distance of their
-- vectors to fact i's (the latest first without vectors) and named fact:j.
create or replace function membank_private.fact_candidates(
    o membank_private.operations, i integer, embeddings real[], embedding_model text, first integer
) returns jsonb
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _fact jsonb := o.facts -> i;
    _vector real [] := case when embeddings is not null then array(select unnest(embeddings[i + 1:i + 1])) end;
    _memories jsonb;
    _facts jsonb;
    _names uuid [];
    _latest jsonb;
begin
    select coalesce(jsonb_agg(jsonb_build_object(
               'name', r.name, 'revision', r.revision, 'fact', r.fact,
               'similarity', round(r.similarity::numeric, 4)) order by r.score desc, r.name), '[]')
    into _memories
    from membank.retrieve_memories(
        scope => o.scope, query_text => _fact ->> 'fact', query_embedding => _vector, top_k => 5,
        embedding_model => embedding_model) as r
    where r.memory_type = 'NATURAL_LANGUAGE';
    -- event_time as memory_event_time gives it, from each candidate's latest
    -- revision, read by scope_id in a statement of its own (one shard on
    -- Citus, where a table read beside the call above would run that call
    -- on a shard).
    _names := array(select (m ->> 'name')::uuid from jsonb_array_elements(_memories) as m);
    select coalesce(jsonb_object_agg(v.memory_name::text, v.extracted_memories), '{}') into _latest
    from (select distinct on (v.memory_name) v.memory_name, v.extracted_memories
          from membank_private.memory_revisions as v
          where v.scope_id = o.scope_id and v.memory_name = any(_names)
          order by v.memory_name, v.revision desc) as v;
    select coalesce(jsonb_agg(m.item || jsonb_build_object(
               'event_time', (select max((x ->> 'event_time')::timestamptz)
                              from jsonb_array_elements(case when jsonb_typeof(_latest -> (m.item ->> 'name')) = 'array'
                                                             then _latest -> (m.item ->> 'name') else '[]' end) as x))
               order by m.ord), '[]')
    into _memories
    from jsonb_array_elements(_memories) with ordinality as m (item, ord);
    select coalesce(jsonb_agg(jsonb_build_object(
               'name', 'fact:' || x.j, 'fact', o.facts -> x.j ->> 'fact',
               'similarity', round(x.similarity::numeric, 4),
               'event_time', o.facts -> x.j -> 'event_time') order by x.rank), '[]')
    into _facts
    from (select j, similarity, row_number() over (order by similarity desc nulls last, j desc) as rank
          from (select j, case when _vector is not null
                               then 1 - (_vector::vector <=> array(select unnest(embeddings[j + 1:j + 1]))::vector)
                          end as similarity
                from generate_series(first, i - 1) as j) as s) as x
    where x.rank <= 3;
    return jsonb_build_object('index', i, 'candidates', _memories || _facts);
end
$$;

-- name: consolidation_candidates: the plan for facts first .. last: each fact's candidates (fact_candidates).
create or replace function membank_private.consolidation_candidates(
    o membank_private.operations, embeddings real[], embedding_model text, first integer, last integer
) returns jsonb
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_agg(membank_private.fact_candidates(o, i, embeddings, embedding_model, first)
                              order by i), '[]')
    from generate_series(first, last) as i;
$$;

-- name: consolidation_plan: the next consolidation batch from fact first: as many facts as fit token_budget.
-- At least one fact, at most 50; the prompt (consolidation_prompt) of the
-- returned plan is estimated within token_budget unless one fact alone
-- exceeds it.
create or replace function membank_private.consolidation_plan(
    o membank_private.operations, embeddings real[], embedding_model text, first integer, token_budget integer
) returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _plan jsonb := '[]';
    _entry jsonb;
    _used integer := membank_private.estimate_tokens(membank_private.consolidation_prompt(o, '[]'));
    _cost integer;
    _i integer := first;
begin
    while _i < jsonb_array_length(o.facts) and _i < first + 50 loop
        _entry := membank_private.fact_candidates(o, _i, embeddings, embedding_model, first);
        _cost := membank_private.estimate_tokens(membank_private.consolidation_fact_block(o, _entry)) + 1;
        exit when _used + _cost > token_budget and jsonb_array_length(_plan) > 0;
        _plan := _plan || jsonb_build_array(_entry);
        _used := _used + _cost;
        _i := _i + 1;
    end loop;
    return _plan;
end
$$;

-- name: candidates_stamp: what a scope's candidate searches read, as of now (see candidates_unchanged).
-- Read before the candidates are searched, so that a write committed in
-- between shows as a change. The searches (retrieve_memories) read the
-- scope's memories and their revisions (last_write: every statement that
-- writes them sets it, under the scope's write lock), its vectors and
-- pending embedding jobs (counted: they are only added without a memory
-- write), the bank's embedding configuration (model, centroid), the
-- scope's per-scope HNSW index, and the clock (expiry).
create or replace function membank_private.candidates_stamp(scope_id uuid)
returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _last_write text;
    _vectors bigint;
    _jobs bigint;
    _config text;
    _dimension integer;
begin
    -- One read per statement, each by scope_id (on Citus a router query
    -- each; read together in one statement, Citus sent it to a shard, where
    -- the nested reads are refused).
    select s.last_write::text into _last_write
    from membank_private.scope_stats_base as s where s.scope_id = candidates_stamp.scope_id;
    select count(*) into _vectors
    from membank_private.memory_embeddings as e where e.scope_id = candidates_stamp.scope_id;
    select count(*) into _jobs
    from membank_private.embedding_jobs as j where j.scope_id = candidates_stamp.scope_id;
    select md5(c::text), c.dimension into _config, _dimension from membank_private.embedding_config as c;
    return jsonb_build_object(
        'last_write', _last_write, 'vectors', _vectors, 'embedding_jobs', _jobs, 'embedding_config', _config,
        'hnsw', case when _config is not null
                     then membank_private.scope_hnsw_ready(candidates_stamp.scope_id, _dimension) end,
        'time', statement_timestamp());
end
$$;

-- name: candidates_unchanged: true when the candidates searched after stamp was read would be found again now.
-- The searches are deterministic (ties broken by fact and name), so the same
-- inputs give the same lists; no memory of the scope may have expired since.
-- Called by apply_consolidation under the scope's write lock: a writer that
-- was running when the stamp was read has committed since, and changed it.
create or replace function membank_private.candidates_unchanged(scope_id uuid, stamp jsonb)
returns boolean
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if jsonb_typeof(stamp) is distinct from 'object' then
        return false;  -- a plan made without one
    end if;
    if membank_private.candidates_stamp(scope_id) - 'time' <> stamp - 'time' then
        return false;
    end if;
    perform from membank_private.memories as m
    where m.scope_id = candidates_unchanged.scope_id
      and m.expire_time > (stamp ->> 'time')::timestamptz
      and m.expire_time <= statement_timestamp()
    limit 1;
    return not found;
end
$$;

-- name: plan_key: what must not change between planning and applying: per fact, candidate names and revisions.
create or replace function membank_private.plan_key(plan jsonb)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_agg(jsonb_build_array(p -> 'index', (
               select coalesce(jsonb_agg(jsonb_build_array(c -> 'name', c -> 'revision') order by c ->> 'name'),
                               '[]')
               from jsonb_array_elements(p -> 'candidates') as c)) order by (p ->> 'index')::integer), '[]')
    from jsonb_array_elements(plan) as p;
$$;

-- name: consolidation_schema: the JSON schema of a consolidation reply.
create or replace function membank_private.consolidation_schema()
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select '{"type": "object", "required": ["actions"], "properties": {"actions": {"type": "array",
      "items": {"type": "object", "required": ["fact_index", "action"], "properties": {
        "fact_index": {"type": "integer"},
        "action": {"type": "string", "enum": ["CREATE", "UPDATE", "DELETE", "NONE"]},
        "memory_name": {"type": "string"},
        "fact": {"type": "string"}}}}}}'::jsonb;
$$;

-- name: said_text: an event time as the consolidation prompt shows it (YYYY-MM-DD HH:MI UTC; or unknown).
create or replace function membank_private.said_text(t jsonb)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(to_char((t #>> '{}')::timestamptz at time zone 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'), 'time unknown');
$$;

-- name: consolidation_fact_block: one new fact and its candidates as the consolidation prompt lists them.
create or replace function membank_private.consolidation_fact_block(o membank_private.operations, p jsonb)
returns text
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select format(E'%s. %s (topics: %s; said %s)\n%s', p ->> 'index',
                  to_jsonb(o.facts -> (p ->> 'index')::integer ->> 'fact'),
                  coalesce(nullif((select string_agg(t, ', ')
                                   from jsonb_array_elements_text(o.facts -> (p ->> 'index')::integer -> 'topics') as t),
                                  ''), 'none'),
                  case when jsonb_typeof(o.facts -> (p ->> 'index')::integer -> 'event_time') = 'string'
                       then membank_private.said_text(o.facts -> (p ->> 'index')::integer -> 'event_time')
                       else 'directly, now' end,
                  coalesce((select string_agg(
                                case when c ->> 'name' like 'fact:%'
                                     then format('   - memory_name %s (new fact %s above, said %s): %s',
                                                 c ->> 'name', substr(c ->> 'name', 6),
                                                 membank_private.said_text(c -> 'event_time'), to_jsonb(c ->> 'fact'))
                                     else format('   - memory_name %s (revision %s, said %s): %s',
                                                 c ->> 'name', c ->> 'revision',
                                                 membank_private.said_text(c -> 'event_time'), to_jsonb(c ->> 'fact'))
                                end, E'\n' order by m)
                            from jsonb_array_elements(p -> 'candidates') with ordinality as y (c, m)),
                           '   (no existing memories)'));
$$;

-- name: consolidation_prompt: the consolidation prompt for one batch of an operation's facts and their candidates.
create or replace function membank_private.consolidation_prompt(o membank_private.operations, plan jsonb)
returns text
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select concat_ws(E'\n',
        'You keep a memory bank current. For each new fact, decide one action against the existing memories '
        || 'listed under it:',
        '- CREATE: the fact is new; none of the listed memories holds it.',
        '- UPDATE with memory_name: the fact changes or refines that memory (a new value of the same attribute: '
        || 'a new name, city, job, or a changed preference). Give the merged, current text as fact.',
        '- DELETE with memory_name: the fact shows that memory is no longer true and nothing replaces it.',
        '- NONE: the fact is already known (a duplicate) or adds nothing.',
        'Only name memories listed under that fact. Dates in facts are absolute; keep them. Write the fact in the '
        || 'language of the new fact; do not translate it.',
        'What was said last is current: the new facts are in the order they were said, and each is decided against '
        || 'the memories as the facts above it left them. "fact:N" names new fact N above: UPDATE or DELETE it to '
        || 'change what that fact created or updated. A memory said after the new fact is newer than it: never '
        || 'UPDATE or DELETE it with the older fact (answer NONE).',
        'Give exactly one action per new fact and name each memory in at most one action; CREATE one fact once.',
        '',
        'New facts:',
        (select string_agg(membank_private.consolidation_fact_block(o, p), E'\n' order by (p ->> 'index')::integer)
         from jsonb_array_elements(plan) as p),
        '',
        'Reply with JSON only, of the form {"actions": [{"fact_index": 0, "action": "UPDATE", '
        || '"memory_name": "...", "fact": "..."}]}, one action per new fact.'
    );
$$;

-- name: record_generated: append {memory, action} to the operation's generated_memories.
create or replace function membank_private.record_generated(
    operation_name uuid, m membank_private.memories, action text
) returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    update membank_private.operations as o
    set generated_memories = o.generated_memories || jsonb_build_array(jsonb_build_object(
            'memory', to_jsonb(membank_private.to_memory(m)), 'action', action)),
        update_time = statement_timestamp()
    where o.scope_id = m.scope_id and o.name = operation_name;  -- the memory's scope is the operation's
$$;

-- name: set_fact_context: the revision context of a change made for one extracted fact.
create or replace function membank_private.set_fact_context(
    o membank_private.operations, fact jsonb, action text
) returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select membank_private.set_revision_context(
        jsonb_build_object('operation', o.name, 'action', action),
        array(select jsonb_array_elements_text(fact -> 'source_event_ids')),
        jsonb_build_array(fact || jsonb_build_object('context', (
            select coalesce(jsonb_agg(e order by n), '[]')
            from jsonb_array_elements(o.source_events) with ordinality as x (e, n)
            where fact -> 'source_event_ids' ? (e ->> 'event_id'))))
    );
$$;

-- name: apply_create: create one memory for an extracted fact, with its revision context.
create or replace function membank_private.apply_create(
    o membank_private.operations, fact jsonb, fact_text text
) returns membank_private.memories
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.memories;
    -- The values first: Citus runs no subquery inside an INSERT's VALUES.
    _topics text [] := array(select jsonb_array_elements_text(fact -> 'topics'));
begin
    perform membank_private.set_fact_context(o, fact, 'CREATE');
    insert into membank_private.memories as m (scope_id, scope, fact, topics, expire_time)
    values (o.scope_id, o.scope, fact_text, _topics,
            membank_private.resolve_expire_time((o.options ->> 'ttl')::interval, null))
    returning * into _row;
    perform membank_private.clear_revision_context();
    perform membank_private.record_generated(o.name, _row, 'CREATED');
    return _row;
end
$$;

-- name: apply_creates: create every fact of an operation (consolidation disabled).
create or replace function membank_private.apply_creates(operation_name uuid)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope_id uuid;
    _op membank_private.operations;
    _fact jsonb;
begin
    _scope_id := membank_private.operation_scope(operation_name);  -- its shard, on Citus
    select * into _op from membank_private.operations as o where o.scope_id = _scope_id and o.name = operation_name;
    perform membank_private.lock_scope(_op.scope_id);
    for _fact in select f from jsonb_array_elements(_op.facts) as f loop
        perform membank_private.apply_create(_op, _fact, _fact ->> 'fact');
    end loop;
end
$$;
