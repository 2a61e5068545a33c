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

-- fact_candidates took the facts' vectors as one real[][] before (each
-- slice of it copied the whole array) and no memories.
drop function if exists membank_private.fact_candidates(
    membank_private.operations, integer, real[], text, integer
);
-- consolidation_plan returned the plan alone, and consolidation_prompt(o,
-- plan) made every fact's block a second time: consolidation_batch returns both.
drop function if exists membank_private.consolidation_plan(
    membank_private.operations, real[], text, integer, integer
);
drop function if exists membank_private.consolidation_prompt(membank_private.operations, jsonb);

-- name: matrix_rows: the rows of a two-dimensional real[] (1-based i, value), each sliced once.
-- A SQL function: a plpgsql argument is an expanded array, and each slice
-- of it there copied the whole array first.
create or replace function membank_private.matrix_rows(m real[])
returns table (i integer, value real[])
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select r, array(select unnest(m[r:r][:])) from generate_series(1, array_length(m, 1)) as r order by r;
$$;

-- name: check_vectors: check_vector and check_vector_norm for every row of a real[][], naming the first bad row.
-- Rows are named argument[i]. The matrix is checked whole first (passes of
-- = any and = all, and each row up to its first entry of magnitude 1e-18 or
-- more): a row of such entries within +-1e17 has a finite, nonzero float32
-- norm. Only a matrix that fails that is checked row by row, for the errors
-- check_vector and pgvector's norm give (a row whose squares underflow has
-- zero norm; one whose squares overflow, none). Row by row for every
-- matrix (an unnest of each) cost more than the batch's candidate search.
create or replace function membank_private.check_vectors(m real[], argument text)
returns void
language plpgsql
immutable
security invoker
set search_path from current
as $$
begin
    -- ('NaN' = any(m)) is null when m holds a null and no NaN: "is not false" catches both
    if ('NaN'::real = any(m)) is not false or 'Infinity'::real = any(m) or '-Infinity'::real = any(m)
       or not (1e17::real >= all(m) and -1e17::real <= all(m))
       or exists (select from generate_series(1, array_length(m, 1)) as r
                  where not exists (select from generate_series(1, array_length(m, 2)) as k
                                    where abs(m[r][k]) >= 1e-18::real)) then
        perform membank_private.check_vector(r.value, format('%s[%s]', argument, r.i)),
                membank_private.check_vector_norm(r.value::vector, format('%s[%s]', argument, r.i))
        from membank_private.matrix_rows(m) as r;
    end if;
end
$$;

-- name: fact_vectors: the rows of a real[][] (one vector per fact) as vectors, each sliced once.
-- Slicing embeddings[j:j][:] for every pair of facts (the similarities of
-- a batch's facts) was quadratic in the batch, each slice of a plpgsql
-- argument (an expanded array) a copy of the whole array.
create or replace function membank_private.fact_vectors(embeddings real[])
returns vector[]
language sql
immutable
security invoker
set search_path from current
as $$
    select case when embeddings is not null then array(
               select array(select unnest(embeddings[f:f][:]))::vector
               from generate_series(1, array_length(embeddings, 1)) as f
               order by f) end;
$$;

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

-- name: with_event_times: each candidate of {"i": [candidate, ...]} with its event_time, as fact_candidates gives it.
-- From each candidate's latest revision (memory_event_time), read by
-- scope_id in a statement of its own; null stays null, and so does a
-- fact's JSON null (its lists are not known: batch_memories).
create or replace function membank_private.with_event_times(o membank_private.operations, candidates jsonb)
returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _names uuid [];
    _latest jsonb;
begin
    if candidates is null then
        return null;
    end if;
    _names := array(select distinct (m ->> 'name')::uuid
                    from jsonb_each(candidates) as x
                    cross join jsonb_array_elements(
                        case when jsonb_typeof(x.value) = 'array' then x.value else '[]' end) as m);
    -- each memory's event time where its latest revision is read (the
    -- extracted facts carry their source events: copied whole, they cost more)
    select coalesce(jsonb_object_agg(l.memory_name::text, (
               select max((e ->> 'event_time')::timestamptz)
               from jsonb_array_elements(case when jsonb_typeof(l.extracted_memories) = 'array'
                                              then l.extracted_memories else '[]' end) as e)), '{}')
    into _latest
    from (select distinct on (v.memory_name) v.memory_name, v.extracted_memories
          from membank_private.memory_revisions as v
          where v.scope_id = o.scope_id and v.memory_name = any(_names)
          order by v.memory_name, v.revision desc) as l;
    return (select coalesce(jsonb_object_agg(x.key, case when jsonb_typeof(x.value) = 'array' then (
                       select jsonb_agg(m.item || jsonb_build_object('event_time', _latest -> (m.item ->> 'name'))
                                        order by m.ord)
                       from jsonb_array_elements(x.value) with ordinality as m (item, ord)) else x.value end), '{}')
            from jsonb_each(candidates) as x);
end
$$;

-- name: scope_memory_candidates: the nearest memories of facts first .. last, searched for the batch at once.
-- Returns {"i": [{name, revision, fact, similarity, event_time}, ...]} for
-- fact indexes i: the lists fact_candidates gets from retrieve_memories
-- (the fact's text and vector, top 5, natural-language memories), or null
-- where they cannot be reproduced (facts without vectors, a fact it
-- refuses, and in a scope of more than 200 memories the cases
-- quantized_scope_candidates (089) declines), so the caller asks it fact
-- by fact. One fact per call read the scope, its lexemes and their
-- document frequencies again for every fact of a batch: most of a
-- generated event's database time. Above 200 memories the lists are
-- quantized_scope_candidates'; up to 200 the statement below is scan_candidates
-- (063), hybrid_candidates' RRF fusion (070: rrf_k 10, weights 1, depth 50)
-- and retrieve_memories' single-query top k, each per fact, with their
-- tie-breaks and their summation order (a real's last bit can decide a
-- tie); tests/test_generation.py compares it with retrieve_memories.
create or replace function membank_private.scope_memory_candidates(
    o membank_private.operations, vectors vector[], embedding_model text, first integer, last integer
) returns jsonb
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
    _texts text [];
    _queries vector [];
    _rare_only boolean;
    _found jsonb;
    _documents bigint := membank_private.scope_documents(array[o.scope_id]);
begin
    if vectors is null or last < first then
        return null;
    end if;
    _texts := array(select membank_private.candidate_query_text(o.facts -> f ->> 'fact')
                    from generate_series(first, last) as f order by f);
    if exists (select from unnest(_texts) as t where membank_private.is_blank(t)) then
        return null;  -- retrieve_memories lists the scope: as it does, fact by fact
    end if;
    _queries := array(select membank_private.check_query_embedding(vectors[f + 1]::real [], embedding_model)
                      from generate_series(first, last) as f order by f);
    -- as hybrid_candidates: with no embedding pending, common words never seek
    perform from membank_private.embedding_jobs as j where j.scope_id = o.scope_id limit 1;
    _rare_only := not found;
    if _documents > 200 then
        return membank_private.with_event_times(o, membank_private.quantized_scope_candidates(
            o, _texts, _queries, first, _documents, _rare_only));
    end if;
    -- Every read names the scope_id: on Citus one query on the scope's shard.
    with scope_row as materialized (
        select m.name, m.fact, m.fts,
               m.expire_time is null or m.expire_time > statement_timestamp() as eligible
        from membank_private.memories as m
        where m.scope_id = o.scope_id
    ), scope_size as (
        select count(*) as n from scope_row
    ), scope_lexeme as materialized (
        -- a row's lexemes are distinct (tsvector_to_array)
        select r.name, l.lexeme from scope_row as r cross join unnest(tsvector_to_array(r.fts)) as l (lexeme)
    ), document_frequency as (
        -- rows holding a lexeme, as scan_candidates counts them (every row, eligible or not)
        select l.lexeme, count(*) as df from scope_lexeme as l group by l.lexeme
    ), query as (
        select first + q.n::integer - 1 as i, q.query_text, q.query
        from unnest(_texts, _queries) with ordinality as q (query_text, query, n)
    ), weighed as materialized (
        -- n: the lexeme's place in query_lexemes, the order scan_candidates sums them in
        select f.i, f.n, f.lexeme, (quote_literal(f.lexeme) || ':A')::tsquery as fact_lexeme,
               -- bm25_idf inlined (a SQL function with a SET clause is called, not inlined: 6 us a row)
               ln(1 + (t.n - f.df + 0.5) / (f.df + 0.5))::double precision as idf,
               f.df * 2 <= t.n or not (bool_or(f.df * 2 <= t.n) over (partition by f.i) or _rare_only) as seeks
        from (select q.i, l.n, l.lexeme, coalesce(d.df, 0) as df
              from query as q
              cross join lateral unnest(membank_private.query_lexemes(q.query_text)) with ordinality as l (lexeme, n)
              left join document_frequency as d on d.lexeme = l.lexeme) as f
        cross join scope_size as t
        where f.df > 0
    ), all_lexemes as (
        select w.i, nullif(string_agg(quote_literal(w.lexeme), ' | ' order by w.n), '')::tsquery as query
        from weighed as w
        group by w.i
    ), vector_hit as (
        select v.i, v.name, v.distance
        from (select q.i, r.name, e.embedding <=> q.query as distance,
                     row_number() over (partition by q.i order by e.embedding <=> q.query, r.fact collate "C", r.name)
                         as position
              from query as q
              cross join scope_row as r
              inner join membank_private.memory_embeddings as e on e.scope_id = o.scope_id and e.name = r.name
              where r.eligible) as v
        where v.position <= 50
    ), text_match as (
        -- per fact, the eligible rows holding one of its lexemes that seek
        -- (scan_candidates' exists), scored by the sum over all the fact's
        -- lexemes they hold, summed in the same order
        -- (grouped by the row's fact and fts too, which its name determines:
        -- text_hit needs them, and a second join with scope_row was planned
        -- as a nested loop over the CTE, rows x scope)
        select w.i, l.name, r.fact, r.fts,
               sum(case when r.fts @@ w.fact_lexeme then w.idf else 0.5 * w.idf end order by w.n)::real as text_rank
        from weighed as w
        inner join scope_lexeme as l on l.lexeme = w.lexeme
        inner join scope_row as r on r.name = l.name
        where r.eligible
        group by w.i, l.name, r.fact, r.fts
        having bool_or(w.seeks)
    ), text_hit as (
        select h.i, h.name, h.text_rank, h.text_tiebreak
        from (select x.*, row_number() over (partition by x.i order by x.text_rank desc, x.text_tiebreak desc,
                                                                       x.fact collate "C", x.name) as position
              -- ts_rank only orders rows of equal IDF sums (here, in the text list's
              -- ranks and in the top k): a row whose sum no other row of its fact has
              -- is placed by the sum alone
              from (select t.i, t.name, t.fact, t.text_rank,
                           case when count(*) over (partition by t.i, t.text_rank) > 1
                                then ts_rank(t.fts, a.query, 1) end as text_tiebreak
                    from text_match as t
                    inner join all_lexemes as a on a.i = t.i) as x) as h
        where h.position <= 50
    ), fused as (
        select coalesce(v.i, t.i) as i, coalesce(v.name, t.name) as name, v.distance,
               t.text_rank, t.text_tiebreak,
               coalesce(1::double precision / (10 + v.rank), 0) + coalesce(1::double precision / (10 + t.rank), 0)
                   as score
        from (select v.*, (rank() over (partition by v.i order by v.distance))::integer as rank
              from vector_hit as v) as v
        full join (select t.*, (rank() over (partition by t.i order by t.text_rank desc, t.text_tiebreak desc))::integer
                              as rank
                   from text_hit as t) as t on t.i = v.i and t.name = v.name
    ), top as (
        -- a text-only hit's distance, for the rows that can reach the top 5
        select s.i, s.name, coalesce(s.distance, e.embedding <=> q.query) as distance,
               s.text_rank, s.text_tiebreak, s.score
        from (select f.*, rank() over (partition by f.i order by f.score desc) as score_rank from fused as f) as s
        inner join query as q on q.i = s.i
        left join membank_private.memory_embeddings as e on e.scope_id = o.scope_id and e.name = s.name
        where s.score_rank <= 5
    ), ranked as (
        select t.i, m.name, m.revision, m.fact, m.memory_type, t.score, t.distance,
               row_number() over (partition by t.i order by t.score desc, t.distance nulls last,
                                  t.text_rank desc nulls last, t.text_tiebreak desc nulls last,
                                  m.fact collate "C", m.name) as position
        from top as t
        inner join membank_private.memories as m on m.scope_id = o.scope_id and m.name = t.name
        where m.scope = o.scope and (m.expire_time is null or m.expire_time > statement_timestamp())
    )
    select coalesce(jsonb_object_agg(x.i::text, x.memories), '{}')
    into _found
    from (select r.i, jsonb_agg(jsonb_build_object(
                     'name', r.name, 'revision', r.revision, 'fact', r.fact,
                     'similarity', round((1 - r.distance)::numeric, 4)) order by r.score desc, r.name) as memories
          from ranked as r
          where r.position <= 5 and r.memory_type = 'NATURAL_LANGUAGE'
          group by r.i) as x;
    return membank_private.with_event_times(o, _found);
end
$$;

-- name: candidate_query_text: the text a fact's candidates are searched by: its first 4000 characters.
-- retrieve_memories refuses a longer query_text (22023), and a fact may hold
-- up to 32768 characters: searched by its whole text, such a fact would fail
-- its generation job on every attempt and never be consolidated. The search reads a
-- bounded prefix (the embedding model reads its first 512 tokens anyway, and
-- the fact's own vector, of the whole text, is searched as it is); the model
-- still sees the whole fact in the consolidation prompt.
create or replace function membank_private.candidate_query_text(fact text)
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select left(fact, 4000);
$$;

-- name: batch_memories: fact i's nearest memories from scope_memory_candidates' answer for its batch, or null.
-- Null where the batch was not searched at once (found null) or fact i's
-- lists were not known (a JSON null under i): fact_candidates asks
-- retrieve_memories for it. A fact without candidates gets [].
create or replace function membank_private.batch_memories(found jsonb, i integer)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case when found is not null and jsonb_typeof(found -> i::text) is distinct from 'null'
                then coalesce(found -> i::text, '[]') end;
$$;

-- name: fact_candidates: fact i's candidates: its nearest memories (top 5) and up to 3 earlier facts of its batch.
-- The earlier facts (first .. i - 1) are ranked by cosine distance of their
-- vectors to fact i's (the latest first without vectors) and named fact:j.
-- memories: fact i's nearest memories when scope_memory_candidates found
-- them for the whole batch (null: retrieve_memories is asked here).
create or replace function membank_private.fact_candidates(
    o membank_private.operations, i integer, vectors vector[], embedding_model text, first integer,
    memories jsonb default null
) returns jsonb
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _fact jsonb := o.facts -> i;
    _vector real [] := vectors[i + 1]::real [];
    _memories jsonb;
    _names uuid [];
    _latest jsonb;
begin
    if memories is not null then
        return jsonb_build_object('index', i, 'candidates', memories || membank_private.earlier_fact_candidates(
            o, i, vectors, first));
    end if;
    select coalesce(jsonb_agg(jsonb_build_object(
               'name', r.name, 'revision', r.revision, 'fact', r.fact,
               'similarity', round(r.similarity::numeric, 4)) order by r.score desc, r.name), '[]')
    into _memories
    from membank.retrieve_memories(
        scope => o.scope, query_text => membank_private.candidate_query_text(_fact ->> 'fact'),
        query_embedding => _vector, top_k => 5,
        -- the most similar facts, not what was said around them
        embedding_model => embedding_model, neighbour_weight => 0) as r
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
    return jsonb_build_object('index', i, 'candidates',
                              _memories || membank_private.earlier_fact_candidates(o, i, vectors, first));
end
$$;

-- name: earlier_fact_candidates: up to 3 earlier facts of fact i's batch (first .. i - 1), named fact:j.
-- Ranked by cosine distance of their vectors to fact i's (vectors: one per
-- fact of the operation, or null), the latest first without vectors.
create or replace function membank_private.earlier_fact_candidates(
    o membank_private.operations, i integer, vectors vector[], first integer
) returns jsonb
language sql
immutable
security invoker
set search_path from current
as $$
    select coalesce(jsonb_agg(jsonb_build_object(
               'name', 'fact:' || x.j, 'fact', o.facts -> x.j ->> 'fact',
               'similarity', round(x.similarity::numeric, 4),
               'event_time', o.facts -> x.j -> 'event_time') order by x.rank), '[]')
    from (select j, similarity, row_number() over (order by similarity desc nulls last, j desc) as rank
          from (select j, case when vectors is not null then 1 - (vectors[i + 1] <=> vectors[j + 1]) end
                           as similarity
                from generate_series(first, i - 1) as j) as s) as x
    where x.rank <= 3;
$$;

-- name: earlier_facts_of_batch: earlier_fact_candidates for every fact i of first .. last, as {"i": [...]}.
-- One statement for a batch's pairs instead of a call per fact.
create or replace function membank_private.earlier_facts_of_batch(
    o membank_private.operations, vectors vector[], first integer, last integer
) returns jsonb
language sql
immutable
security invoker
set search_path from current
as $$
    select coalesce(jsonb_object_agg(x.i::text, x.candidates), '{}')
    from (select f.i, coalesce((
                     select jsonb_agg(jsonb_build_object(
                                'name', 'fact:' || y.j, 'fact', o.facts -> y.j ->> 'fact',
                                'similarity', round(y.similarity::numeric, 4),
                                'event_time', o.facts -> y.j -> 'event_time') order by y.rank)
                     from (select j, similarity, row_number() over (order by similarity desc nulls last, j desc) as rank
                           from (select j, case when vectors is not null then 1 - (vectors[f.i + 1] <=> vectors[j + 1]) end
                                            as similarity
                                 from generate_series(first, f.i - 1) as j) as s) as y
                     where y.rank <= 3), '[]') as candidates
          from generate_series(first, last) as f (i)) as x;
$$;

-- name: consolidation_candidates: the plan for facts first .. last: each fact's candidates (fact_candidates).
create or replace function membank_private.consolidation_candidates(
    o membank_private.operations, embeddings real[], embedding_model text, first integer, last integer
) returns jsonb
language sql
volatile
security invoker
set search_path from current
as $$
    -- materialized: each computed once, not once per fact
    with v as materialized (
        select membank_private.fact_vectors(embeddings) as vectors
    ), b as materialized (
        select membank_private.scope_memory_candidates(o, v.vectors, embedding_model, first, last) as found from v
    )
    select coalesce(jsonb_agg(membank_private.fact_candidates(
                                  o, i, v.vectors, embedding_model, first,
                                  membank_private.batch_memories(b.found, i))
                              order by i), '[]')
    from v cross join b cross join generate_series(first, last) as i;
$$;

-- name: consolidation_batch: the next consolidation batch from fact first (plan) and its prompt, within token_budget.
-- As many facts as fit, at least one, at most 50; the prompt
-- (consolidation_prompt of the plan's fact blocks, each made once) is
-- estimated within token_budget unless one fact alone exceeds it.
create or replace function membank_private.consolidation_batch(
    o membank_private.operations, embeddings real[], embedding_model text, first integer, token_budget integer
) returns table (plan jsonb, prompt text)
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _plan jsonb := '[]';
    _blocks text [] := '{}';
    _block text;
    _entry jsonb;
    _used integer := membank_private.estimate_tokens(membank_private.consolidation_prompt(null));
    _cost integer;
    _i integer := first;
    _vectors vector [] := membank_private.fact_vectors(embeddings);
    -- Every fact the batch can hold, searched at once (null: fact by fact).
    _found jsonb := membank_private.scope_memory_candidates(
        o, _vectors, embedding_model, first, least(jsonb_array_length(o.facts), first + 50) - 1);
    _earlier jsonb := case when _found is not null then membank_private.earlier_facts_of_batch(
                               o, _vectors, first, least(jsonb_array_length(o.facts), first + 50) - 1) end;
begin
    while _i < jsonb_array_length(o.facts) and _i < first + 50 loop
        -- the batch's searches made above, or fact_candidates' own
        _entry := case when membank_private.batch_memories(_found, _i) is not null
                       then jsonb_build_object('index', _i, 'candidates',
                                               membank_private.batch_memories(_found, _i) || (_earlier -> _i::text))
                       else membank_private.fact_candidates(o, _i, _vectors, embedding_model, first) end;
        _block := membank_private.consolidation_fact_block(o, _entry);
        _cost := membank_private.estimate_tokens(_block) + 1;
        exit when _used + _cost > token_budget and jsonb_array_length(_plan) > 0;
        _plan := _plan || jsonb_build_array(_entry);
        _blocks := _blocks || _block;
        _used := _used + _cost;
        _i := _i + 1;
    end loop;
    return query select _plan, membank_private.consolidation_prompt(array_to_string(_blocks, E'\n'));
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
    -- The scope's rows in one statement, each read naming scope_id: on Citus
    -- one router query on the scope's shards (three, each a round trip,
    -- before). No function that reads a table is called inside it (on a
    -- shard that read would be a nested distributed query): the HNSW check
    -- below is a statement of its own.
    select s.last_write::text,
           (select count(*) from membank_private.memory_embeddings as e
            where e.scope_id = candidates_stamp.scope_id),
           (select count(*) from membank_private.embedding_jobs as j
            where j.scope_id = candidates_stamp.scope_id)
    into _last_write, _vectors, _jobs
    from membank_private.scope_stats_base as s where s.scope_id = candidates_stamp.scope_id;
    if not found then  -- no statistics row (a scope that never held a memory): the counts alone
        select count(*) into _vectors
        from membank_private.memory_embeddings as e where e.scope_id = candidates_stamp.scope_id;
        select count(*) into _jobs
        from membank_private.embedding_jobs as j where j.scope_id = candidates_stamp.scope_id;
    end if;
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

-- name: consolidation_prompt: the consolidation prompt around one batch's fact blocks (newline-joined; null: none).
-- fact_blocks: consolidation_fact_block of each planned fact, in plan order.
create or replace function membank_private.consolidation_prompt(fact_blocks text)
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
        nullif(fact_blocks, ''),
        '',
        'Reply with JSON only, of the form {"actions": [{"fact_index": 0, "action": "UPDATE", '
        || '"memory_name": "...", "fact": "..."}]}, one action per new fact.'
    );
$$;

-- name: generated_entry: a generated_memories item: {memory, action}.
create or replace function membank_private.generated_entry(m membank_private.memories, action text)
returns jsonb
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select jsonb_build_object('memory', to_jsonb(membank_private.to_memory(m)), 'action', action);
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
    set generated_memories = o.generated_memories || jsonb_build_array(membank_private.generated_entry(m, action)),
        update_time = statement_timestamp()
    where o.scope_id = m.scope_id and o.name = operation_name;  -- the memory's scope is the operation's
$$;

-- name: record_generated_entries: append generated_entry items, in order, to the operation's generated_memories.
-- One update for a batch's changes: an update per memory rewrote the
-- operation's row (its facts, events and the growing list) once each.
create or replace function membank_private.record_generated_entries(
    operation_name uuid, scope_id uuid, entries jsonb
) returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    update membank_private.operations as o
    set generated_memories = o.generated_memories || entries, update_time = statement_timestamp()
    where o.scope_id = record_generated_entries.scope_id and o.name = operation_name
      and jsonb_array_length(entries) > 0;
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

-- name: insert_fact: create one memory for an extracted fact, with its revision context (not yet recorded).
-- clear_context false: the context stays set, for a caller writing more
-- memories that clears it once at the end (apply_consolidation): on Citus
-- each setting is a statement on the worker.
drop function if exists membank_private.insert_fact(membank_private.operations, jsonb, text);
create or replace function membank_private.insert_fact(
    o membank_private.operations, fact jsonb, fact_text text, clear_context boolean default true
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
    -- where it was said (session neighbours, 069)
    _source membank_private.events := membank_private.first_source_event(
        o.scope_id, array(select jsonb_array_elements_text(fact -> 'source_event_ids')));
    _expire timestamptz := membank_private.resolve_expire_time((o.options ->> 'ttl')::interval, null);
begin
    perform membank_private.set_fact_context(o, fact, 'CREATE');
    if _expire is not null then
        perform membank_private.mark_due(o.scope_id, 'expiry', _expire);  -- Citus: 121_due_work.sql
    end if;
    insert into membank_private.memories as m (
        scope_id, scope, fact, topics, expire_time, source_session_id, source_event_time, source_append_seq
    )
    values (o.scope_id, o.scope, fact_text, _topics, _expire,
            _source.session_id, _source.event_time, _source.append_seq)
    returning * into _row;
    if clear_context then
        perform membank_private.clear_revision_context();
    end if;
    return _row;
end
$$;

-- name: apply_create: create one memory for an extracted fact, with its revision context, and record it.
create or replace function membank_private.apply_create(
    o membank_private.operations, fact jsonb, fact_text text
) returns membank_private.memories
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.memories := membank_private.insert_fact(o, fact, fact_text);
begin
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
