-- Consolidation: each extracted fact against the nearest memories of its
-- scope (the hybrid retrieval). The model decides CREATE / UPDATE / DELETE /
-- NONE per fact, naming candidates; SQL applies the decisions.
--
-- Concurrency (DESIGN.md): the plan is made outside locks against a
-- snapshot (candidate names and revisions, kept on the job). To apply, the
-- scope's write lock is taken (015_scope_locks.sql), the candidates are
-- searched again, and if they differ from what the model saw, the job is
-- re-planned (at most 3 times) while the lock is held, so the next plan
-- applies. Candidate rows are then locked FOR UPDATE in name order and
-- their revisions checked. Two workers consolidating "I love cats" and
-- "I hate cats" for one scope thus end in one memory: the second sees the
-- first's memory as a candidate.

-- name: consolidation_candidates: per fact, the nearest memories of the scope (names, revisions, facts).
create or replace function membank_private.consolidation_candidates(
    o membank_private.operations, embeddings real[], embedding_model text
) returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _result jsonb := '[]';
    _fact jsonb;
    _i integer := 0;
    _vector real [];
begin
    for _fact in select f from jsonb_array_elements(o.facts) as f loop
        _vector := case when embeddings is not null then array(select unnest(embeddings[_i + 1:_i + 1])) end;
        _result := _result || jsonb_build_array(jsonb_build_object('index', _i, 'candidates', (
            select coalesce(jsonb_agg(jsonb_build_object(
                       'name', r.name, 'revision', r.revision, 'fact', r.fact,
                       'similarity', round(r.similarity::numeric, 4),
                       'update_time', r.update_time) order by r.score desc, r.name), '[]')
            from membank.retrieve_memories(
                scope => o.scope, query_text => _fact ->> 'fact', query_embedding => _vector, top_k => 5,
                embedding_model => embedding_model) as r
            where r.memory_type = 'NATURAL_LANGUAGE')));
        _i := _i + 1;
    end loop;
    return _result;
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

-- name: consolidation_prompt: the consolidation prompt for an operation's facts and their candidates.
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
        'Only name memories listed under that fact. Dates in facts are absolute; keep them.',
        '',
        'New facts:',
        (select string_agg(format(E'%s. %s (topics: %s; said %s)\n%s', p ->> 'index',
                                  to_jsonb(o.facts -> (p ->> 'index')::integer ->> 'fact'),
                                  coalesce(nullif((select string_agg(t, ', ')
                                                   from jsonb_array_elements_text(
                                                       o.facts -> (p ->> 'index')::integer -> 'topics') as t),
                                                  ''), 'none'),
                                  coalesce(to_char((o.facts -> (p ->> 'index')::integer ->> 'event_time')::timestamptz
                                                   at time zone 'UTC', 'YYYY-MM-DD'), 'directly'),
                                  coalesce((select string_agg(format('   - memory_name %s (revision %s, updated %s): %s',
                                                                     c ->> 'name', c ->> 'revision',
                                                                     to_char((c ->> 'update_time')::timestamptz
                                                                             at time zone 'UTC', 'YYYY-MM-DD'),
                                                                     to_jsonb(c ->> 'fact')), E'\n' order by m)
                                            from jsonb_array_elements(p -> 'candidates') with ordinality as y (c, m)),
                                           '   (no existing memories)')),
                           E'\n' order by (p ->> 'index')::integer)
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
    where o.name = operation_name;
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
begin
    perform membank_private.set_fact_context(o, fact, 'CREATE');
    insert into membank_private.memories as m (scope, fact, topics, expire_time)
    values (o.scope, fact_text, array(select jsonb_array_elements_text(fact -> 'topics')),
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
    _op membank_private.operations;
    _fact jsonb;
begin
    select * into _op from membank_private.operations as o where o.name = operation_name;
    perform membank_private.lock_scope(_op.scope_id);
    for _fact in select f from jsonb_array_elements(_op.facts) as f loop
        perform membank_private.apply_create(_op, _fact, _fact ->> 'fact');
    end loop;
end
$$;
