-- Full-text candidates for retrieval: per-scope BM25 IDF of the query's
-- lexemes, GIN (scope_id, fts) search, and a score per match.
--
-- Languages: each fact is indexed in its own language (detected per fact by
-- membank_private.fact_tsvector, migration 0008: russian for Cyrillic, else
-- the Latin-script language whose function words it uses most, english by
-- default; unaccented; CJK runs as character unigrams and bigrams). A query
-- is not detected (too short to tell): its words are stemmed by every
-- configuration a fact may have and the lexemes are OR-ed, so a German query
-- meets German stems and an English one English stems. Lexemes no fact of
-- the scope holds drop out (document frequency 0), so the extra stems cost
-- nothing in ranking. Document frequencies stay per scope and per lexeme,
-- whatever the language.
--
-- Context: a memory's context (create_memory) is indexed beside its fact,
-- with weight D against the fact's A (migration 0012), so a query item
-- restricted to weight A ('word':A) matches the fact's own words. A query lexeme
-- found only in the context scores half its IDF: it says where the fact was
-- said, not what it says (0.5 chosen on the two tuning LoCoMo conversations
-- among 0.25, 0.5 and 0.7, bench/retrieval_quality.py); ts_rank weighs it
-- 0.1 against the fact's 1. scan_candidates (063) scores the same way.
--
-- Ties: the score (sum of IDF) ties whenever two memories hold the same
-- query lexemes. They are broken by a finer text score, ts_rank with length
-- normalisation (term frequency over 1 + log(length): more occurrences, a
-- shorter fact), then by the fact text (C collation), then by the name, so
-- the same memories give the same list whatever order they were stored in.

-- name: query_lexemes: a query's lexemes in every language a fact may be indexed in, with CJK unigrams and bigrams.
create or replace function membank_private.query_lexemes(query_text text)
returns text[]
language plpgsql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    -- Unaccented once, CJK runs blanked (cjk_tokens below covers them).
    _plain text := membank_private.unaccent_text(regexp_replace(
        coalesce(query_text, ''), '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+', ' ', 'g'));
begin
    -- PL/pgSQL: a SQL function with a SET clause is never inlined and was
    -- planned on every call. tsvector || merges each lexeme once.
    return array(
        select q.lexeme
        from unnest(tsvector_to_array(
            to_tsvector('english', _plain) || to_tsvector('german', _plain) || to_tsvector('french', _plain)
            || to_tsvector('spanish', _plain) || to_tsvector('russian', _plain) || to_tsvector('simple', _plain)
            || membank_private.cjk_tokens(coalesce(query_text, ''))
        )) as q (lexeme)
        order by 1
    );
end
$$;

-- name: bm25_idf: BM25's inverse document frequency of a lexeme in df of n documents.
create or replace function membank_private.bm25_idf(df bigint, n bigint)
returns double precision
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and
    -- Beyond", 2009: ln(1 + (N - df + 0.5) / (df + 0.5)).
    select ln(1 + (n - df + 0.5) / (df + 0.5));
$$;

-- name: scope_counts: the scopes' memories (scope_stats' doc_count, summed) and whether appended counts are pending.
-- The tables under the view scope_stats, each read by scope_id in a statement
-- of its own: on Citus each is a router query, where the view's correlated
-- sub-query over the appended counts was sent to every worker.
-- On Citus each read is also a round trip to the scopes' worker, and one
-- retrieval asks up to six times (the path, the IDFs, the relevance
-- signals): the calls of one statement in a transaction that has written
-- nothing share the first answer, kept in a transaction-local setting keyed
-- by the statement's start and the scopes. A transaction that wrote reads
-- again every time. One server reads every time (a read costs microseconds).
-- On Citus the read of one scope also asks whether the scope has embedding
-- jobs queued (hybrid_candidates' rare_only, scope_has_jobs), in the same
-- statement: one round trip where there were two.
create or replace function membank_private.scope_counts(scope_ids uuid[], out documents bigint, out pending boolean)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _key text;
    _memo text;
    _jobs boolean;  -- Citus, one scope: whether it has embedding jobs queued (kept in the memo)
begin
    if membank_private.distributed() and pg_current_xact_id_if_assigned() is null then
        _key := md5(statement_timestamp()::text || array_to_string(scope_ids, ','));
        _memo := current_setting('membank.scope_counts', true);
        -- Any role can set the setting itself: only a well-formed count is
        -- taken (a forged one could only change the caller's own results);
        -- at most 18 digits, always a bigint (a longer one failed the cast,
        -- 22003, and with it the caller's retrieval).
        if _memo ~ ('^' || _key || '\|[0-9]{1,18}\|(true|false)\|(true|false)?$') then
            documents := split_part(_memo, '|', 2)::bigint;
            pending := split_part(_memo, '|', 3)::boolean;
            return;
        end if;
    end if;
    if _key is not null and cardinality(scope_ids) = 1 then
        -- one router statement on the scope's shard (the jobs are colocated)
        select coalesce(sum(s.doc_count), 0), coalesce(bool_or(s.pending), false),
               exists (select from membank_private.embedding_jobs as j where j.scope_id = any(scope_ids))
        into documents, pending, _jobs
        from membank_private.scope_stats_base as s where s.scope_id = any(scope_ids);
    else
        select coalesce(sum(s.doc_count), 0), coalesce(bool_or(s.pending), false) into documents, pending
        from membank_private.scope_stats_base as s where s.scope_id = any(scope_ids);
    end if;
    if pending then
        documents := documents + (select coalesce(sum(d.doc_count), 0) from membank_private.scope_stats_delta as d
                                  where d.scope_id = any(scope_ids));
    end if;
    if _key is not null then
        perform membank_private.remember_scope_counts(scope_ids, documents, pending, _jobs);
    end if;
end
$$;

-- name: remember_scope_counts: keep the scopes' counts as scope_counts' memo for the calls of this statement.
-- For scope_counts, and for fused_memories on Citus, whose routed statement
-- (retrieve_on_shard, 070) reads a scope's counts on its worker: when the
-- scope is too big for that statement to rank it, the ranking's own
-- statements take the counts from the memo instead of reading them again.
create or replace function membank_private.remember_scope_counts(
    scope_ids uuid[], documents bigint, pending boolean, jobs boolean
) returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    perform set_config('membank.scope_counts',
                       md5(statement_timestamp()::text || array_to_string(scope_ids, ',')) || '|' || documents || '|'
                       || pending || '|' || coalesce(jobs::text, ''), true);
end
$$;

-- name: scope_has_jobs: whether the scopes have embedding jobs queued (memories waiting for their vector).
-- On Citus, in a transaction that has written nothing, the answer scope_counts
-- read with the count of one scope in the same statement (its memo); else a
-- read of the jobs of its own, through the scope_id index (enable_seqscan
-- off: its generic plan, estimating from the biggest scopes once analyzed,
-- scanned the whole queue for a scope with no job; see scan_candidates, 063).
create or replace function membank_private.scope_has_jobs(scope_ids uuid[])
returns boolean
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
set enable_seqscan to off
as $$
declare
    _memo text;
begin
    if membank_private.distributed() and pg_current_xact_id_if_assigned() is null
       and cardinality(scope_ids) = 1 then
        perform membank_private.scope_counts(scope_ids);
        _memo := current_setting('membank.scope_counts', true);
        if _memo ~ ('^' || md5(statement_timestamp()::text || array_to_string(scope_ids, ','))
                    || '\|[0-9]{1,18}\|(true|false)\|(true|false)$') then
            return split_part(_memo, '|', 4)::boolean;
        end if;
    end if;
    -- A plain read of the scopes' jobs (on Citus a router query; as a
    -- sub-query of an expression it became a sub-plan sent to every worker).
    perform from membank_private.embedding_jobs as j where j.scope_id = any(scope_ids) limit 1;
    return found;
end
$$;

-- name: scope_documents: how many memories the scopes hold (scope_counts' documents).
create or replace function membank_private.scope_documents(scope_ids uuid[])
returns bigint
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    return (membank_private.scope_counts(scope_ids)).documents;
end
$$;

-- name: text_query_statement: text_query's statement; %1$s scope_lexicon_base, %2$s scope_lexicon_delta; $1..$5 inputs.
-- Written once, as text: one server runs it as the static body of
-- text_query_of (made from it below, its plan cached), a Citus node on the
-- scope's shards by name inside retrieve_on_shard (070).
create or replace function membank_private.text_query_statement()
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- $1 query_text, $2 scope_ids uuid[], $3 rare_only, $4 the scopes'
    -- documents (bigint), $5 whether appended word counts are pending. Rows:
    -- lexeme, idf, seeks.
    select $statement$
    with frequency as (
        -- tsvector_to_array gives each lexeme once; one index probe each.
        -- The tables under the view scope_lexicon, read directly: the counts
        -- a transaction's later inserts appended only while a scope has some
        -- (055_lexicon.sql).
        select q.lexeme,
               (select coalesce(sum(x.doc_count), 0) from %1$s as x
                where x.scope_id = any($2) and x.lexeme = q.lexeme)
               + case when $5
                      then (select coalesce(sum(x.doc_count), 0) from %2$s as x
                            where x.scope_id = any($2) and x.lexeme = q.lexeme)
                      else 0 end as df
        from unnest(membank_private.query_lexemes($1)) as q (lexeme)
    ), weighed as (
        select f.lexeme, f.df, t.n, bool_or(f.df > 0 and f.df * 2 <= t.n) over () as any_rare
        from frequency as f
        cross join (select $4::bigint as n) as t
    )
    -- A lexeme in more than half the scope (a speaker's name in a chat)
    -- only seeks candidates when nothing rarer does, and never with
    -- rare_only (beside a vector list: the list of every memory naming the
    -- user, ordered by length, would only add noise to the fusion); it still
    -- scores. A lexeme no memory of the scopes holds can match nothing: it is
    -- left out.
    select w.lexeme, membank_private.bm25_idf(w.df, w.n), w.df * 2 <= w.n or not (w.any_rare or $3)
    from weighed as w
    where w.df > 0
    $statement$;
$$;

-- name: text_query_of: text_query_statement on the distributed tables (a static statement, its plan cached).
do $do$
begin
    execute format($create$
create or replace function membank_private.text_query_of(
    query_text text, scope_ids uuid[], rare_only boolean, documents bigint, pending boolean
) returns table (lexeme text, idf double precision, seeks boolean)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $body$
begin
    -- the text of membank_private.text_query_statement()
    return query
    %s;
end
$body$
$create$, format(membank_private.text_query_statement(), 'membank_private.scope_lexicon_base',
                 'membank_private.scope_lexicon_delta'));
end
$do$;

-- name: text_query: the query's lexemes the scopes hold, with their IDF, and which ones seek candidates.
create or replace function membank_private.text_query(query_text text, scope_ids uuid[], rare_only boolean)
returns table (lexeme text, idf double precision, seeks boolean)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _counts record := membank_private.scope_counts(scope_ids);
begin
    -- PL/pgSQL rather than SQL: its plan is cached for the session, while a
    -- SQL function with a SET clause is planned on every call.
    -- text_query_statement says which lexemes seek
    return query
    select q.lexeme, q.idf, q.seeks
    from membank_private.text_query_of(query_text, scope_ids, rare_only, _counts.documents, _counts.pending) as q;
end
$$;

-- name: text_statement: text_candidates' scoring statement; %1$s memories; $1..$12 inputs.
-- Written once, as text: one server runs it as the static body of
-- text_matches (made from it below), text_candidates_maxscore (065) on
-- each step, a Citus node on the scope's shard by name inside
-- retrieve_on_shard (070).
create or replace function membank_private.text_statement()
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- $1 scope_ids uuid[], $2 the lexemes (one-word tsquery[]), $3 the
    -- same restricted to weight A, $4 their IDFs (double precision[]), $5 the
    -- tsquery that seeks, $6 the OR of every lexeme (ts_rank's), $7 depth,
    -- $8 metadata_filter, $9 topics, $10 memory_type, $11 created_after,
    -- $12 created_before. Rows: name, text_rank, text_tiebreak, in the
    -- list's order (IDF sum, ts_rank, fact in C collation, name).
    select $statement$
    select m.name,
           -- A lexeme only the context holds (weight D; the fact's are A) counts half.
           (select sum(case when m.fts @@ t.fact_lexeme then t.idf else 0.5 * t.idf end)
            from unnest($2::tsquery[], $3::tsquery[], $4::double precision[]) as t (lexeme, fact_lexeme, idf)
            where m.fts @@ t.lexeme)::real as text_rank,
           ts_rank(m.fts, $6::tsquery, 1) as text_tiebreak
    -- A join, not scope_id = any(...): GIN cannot search an array of keys,
    -- so each scope gets its own (scope_id, fts) index search.
    from unnest($1::uuid[]) as s (scope_id)
    inner join %1$s as m on m.scope_id = s.scope_id
    where m.fts @@ $5::tsquery
      -- Citus: the scopes named on memories itself, so the statement goes to
      -- their shard alone (a join to unnest's keys went to all 32). On one
      -- server distributed() is a constant false: the planner drops this
      -- test, and the plan is the join above.
      and (not membank_private.distributed() or m.scope_id = any($1))
      and (m.expire_time is null or m.expire_time > statement_timestamp())
      and ($8::jsonb is null or m.metadata @> $8)
      and ($9::text[] is null or m.topics && $9)
      and ($10::text is null or m.memory_type = $10)
      and ($11::timestamptz is null or m.create_time > $11)
      and ($12::timestamptz is null or m.create_time < $12)
    order by 2 desc, 3 desc, m.fact collate "C", m.name
    limit $7
    $statement$;
$$;

-- name: text_matches: text_statement on the distributed tables (a static statement, planned for its values).
-- Planned for each call's values (force_custom_plan, where retrieve_memories
-- keeps generic plans): a generic plan estimates a tsquery's matches over
-- every scope at once, and once the bank is analyzed it searched the GIN
-- index for the lexemes alone, all scopes' rows, then kept the scope's (a
-- 2,000-memory scope beside a 20,000-memory one: 10,384 rows read for 899).
-- It runs only above 200 memories, where planning is a small part of it.
do $do$
begin
    execute format($create$
create or replace function membank_private.text_matches(
    scope_ids uuid[], lexemes tsquery[], fact_lexemes tsquery[], idfs double precision[], seeking tsquery,
    all_lexemes tsquery, depth integer, metadata_filter jsonb, topics text[], memory_type text,
    created_after timestamptz, created_before timestamptz
) returns table (name uuid, text_rank real, text_tiebreak real)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
set plan_cache_mode to force_custom_plan
as $body$
begin
    -- the text of membank_private.text_statement()
    return query
    %s;
end
$body$
$create$, format(membank_private.text_statement(), 'membank_private.memories'));
end
$do$;

-- name: text_list: a query's text candidates from text_query's rows (lexemes, IDFs, which seek); MaxScore above 2,000.
-- text_candidates' second half, and retrieve_on_shard's (070) on a Citus
-- node with memories, the name of the scope's shard there (null: the
-- distributed table, through text_matches' static statement).
create or replace function membank_private.text_list(
    scope_ids uuid[], lexeme text[], idf double precision[], seeks boolean[], documents bigint, depth integer,
    metadata_filter jsonb, topics text[], memory_type text, created_after timestamptz, created_before timestamptz,
    memories text
) returns table (name uuid, text_rank real, text_tiebreak real)
language plpgsql
-- volatile: on a shard it runs a prepared statement (EXECUTE), which a stable function may not
volatile
security invoker
set search_path from current
as $$
declare
    _lexemes tsquery [];
    _fact_lexemes tsquery [];
    _idfs double precision [];
    _tsquery tsquery;
    _all_lexemes tsquery;
begin
    -- Each lexeme as a one-word tsquery, and restricted to weight A (the
    -- fact's own words): testing a row with @@ is a binary search in its
    -- tsvector, where tsvector_to_array per row and lexeme cost twice as much.
    select array_agg(quote_literal(q.lexeme)::tsquery), array_agg((quote_literal(q.lexeme) || ':A')::tsquery),
           array_agg(q.idf),
           nullif(string_agg(quote_literal(q.lexeme), ' | ') filter (where q.seeks), '')::tsquery,
           nullif(string_agg(quote_literal(q.lexeme), ' | '), '')::tsquery
    into _lexemes, _fact_lexemes, _idfs, _tsquery, _all_lexemes
    from unnest(lexeme, idf, seeks) as q (lexeme, idf, seeks);
    if _tsquery is null then
        return;
    end if;
    -- A big scope: the same list from fewer rows, planned for the actual
    -- tsquery (065_text_candidates_maxscore.sql). Up to 2,000 memories the
    -- scope's matches are read whole (text_matches, planned for its values:
    -- a generic plan read every scope's matches once the bank was analyzed).
    if documents > 2000 then
        return query select c.name, c.text_rank, c.text_tiebreak
                     from membank_private.text_candidates_maxscore(
                         scope_ids, _lexemes, _fact_lexemes, _idfs, _tsquery, _all_lexemes, documents, depth,
                         metadata_filter, topics, memory_type, created_after, created_before, memories) as c;
        return;
    end if;
    if memories is null then
        return query select c.name, c.text_rank, c.text_tiebreak
                     from membank_private.text_matches(
                         scope_ids, _lexemes, _fact_lexemes, _idfs, _tsquery, _all_lexemes, depth, metadata_filter,
                         topics, memory_type, created_after, created_before) as c;
        return;
    end if;
    -- on a shard: prepared once per connection (prepared_on_shard, 015), generic as on one server
    return query execute format(
        'execute %I(%L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L)',
        membank_private.prepared_on_shard(
            format(membank_private.text_statement(), memories),
            'uuid[], tsquery[], tsquery[], double precision[], tsquery, tsquery, integer, jsonb, text[], text,'
            ' timestamptz, timestamptz'),
        scope_ids, _lexemes, _fact_lexemes, _idfs, _tsquery, _all_lexemes, depth, metadata_filter, topics,
        memory_type, created_after, created_before);
end
$$;

-- name: text_candidates: the depth best full-text matches, scored by the IDF of their query lexemes.
create or replace function membank_private.text_candidates(
    scope_ids uuid[], query_text text, depth integer,
    metadata_filter jsonb, topics text[], memory_type text, created_after timestamptz, created_before timestamptz,
    rare_only boolean
) returns table (name uuid, text_rank real, text_tiebreak real)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _lexeme text [];
    _idf double precision [];
    _seeks boolean [];
begin
    select array_agg(q.lexeme), array_agg(q.idf), array_agg(q.seeks) into _lexeme, _idf, _seeks
    from membank_private.text_query(query_text, scope_ids, rare_only) as q;
    -- text_list and text_statement say how the list is made
    return query select c.name, c.text_rank, c.text_tiebreak
                 from membank_private.text_list(
                     scope_ids, _lexeme, _idf, _seeks, membank_private.scope_documents(scope_ids), depth,
                     metadata_filter, topics, memory_type, created_after, created_before, null) as c;
end
$$;
