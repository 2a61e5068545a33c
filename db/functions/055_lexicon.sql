-- Per-scope document frequencies for IDF-weighted full-text ranking.
-- A row trigger counts each new memory (a scope's later inserts in one
-- transaction append their counts, folded at commit; see below); statement
-- triggers with transition tables fold a whole UPDATE or DELETE (a
-- 10,000-row purge) into one upsert. Writers of one scope take its write
-- lock first (015_scope_locks.sql).

-- A memory's full-text vector (memories.fts, migrations 0008 and 0012) is
-- computed on every write, so its functions are redefined here in PL/pgSQL
-- with the same results as the SQL definitions of migration 0008: a SQL
-- function with a SET clause is never inlined and is planned on every call
-- (text_language's join cost ~40 us per call), and every memory without a
-- context paid that for fact_tsvector('') too. tests/test_multilingual.py
-- compares them with 0008's definitions on LoCoMo and the multilingual set.

-- name: text_language: the text search configuration of a text's language (detected).
-- Russian for Cyrillic; otherwise the Latin-script language whose function
-- words the (unaccented, lower-cased) text uses most, english when none or
-- on a tie with english, else the first by name.
create or replace function membank_private.text_language(input text)
returns regconfig
language plpgsql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _text text;
    _words text [];
    _config regconfig;
begin
    if input ~ '[\u0400-\u04ff]' then
        return 'russian'::regconfig;
    end if;
    _text := lower(membank_private.unaccent_text(input));
    -- No German, French or Spanish function word (as a whole word: a run of
    -- a-z): english, as the vote below would say. One regular expression
    -- (a DFA over the text) rather than comparing every word with every
    -- listed one.
    if _text !~ ('(^|[^a-z])('
                 || 'der|die|das|und|ist|ich|nicht|mit|ein|eine|zu|den|auf|sie|es|wir|mein|meine|hat|im|dem|'
                 || 'sind|war|auch|fur|von|wie|was|bei|einen|'
                 || 'le|la|les|et|est|je|un|une|des|du|pas|que|qui|dans|avec|mon|ma|mes|pour|il|elle|nous|sont|'
                 || 'au|aux|ce|sur|ou|vous|ai|suis|'
                 || 'el|los|las|y|yo|una|en|con|por|para|mi|muy|pero|esta|su|del|al|se|lo|como|mis|son|tiene|'
                 || 'hay|donde'
                 || ')($|[^a-z])') then
        return 'english'::regconfig;
    end if;
    _words := regexp_split_to_array(_text, '[^a-z]+');
    select w.config into _config
    from unnest(_words) as t (word)
    inner join (values
        ('english'::regconfig, array['the', 'and', 'is', 'are', 'was', 'were', 'to', 'of', 'in', 'my', 'you',
                                     'it', 'that', 'with', 'for', 'have', 'has', 'what', 'did', 'this', 'on',
                                     'at', 'i', 'we', 'be', 'not', 'she', 'he', 'they', 'her', 'his', 'do']),
        ('german'::regconfig, array['der', 'die', 'das', 'und', 'ist', 'ich', 'nicht', 'mit', 'ein', 'eine',
                                    'zu', 'den', 'auf', 'sie', 'es', 'wir', 'mein', 'meine', 'hat', 'im', 'dem',
                                    'sind', 'war', 'auch', 'fur', 'von', 'wie', 'was', 'bei', 'einen']),
        ('french'::regconfig, array['le', 'la', 'les', 'et', 'est', 'je', 'un', 'une', 'des', 'du', 'pas', 'que',
                                    'qui', 'dans', 'avec', 'mon', 'ma', 'mes', 'pour', 'il', 'elle', 'nous',
                                    'sont', 'au', 'aux', 'ce', 'sur', 'ou', 'vous', 'ai', 'suis']),
        ('spanish'::regconfig, array['el', 'la', 'los', 'las', 'y', 'es', 'yo', 'un', 'una', 'que', 'en', 'con',
                                     'por', 'para', 'mi', 'muy', 'pero', 'esta', 'su', 'del', 'al', 'se', 'lo',
                                     'como', 'mis', 'son', 'tiene', 'hay', 'donde'])
    ) as w (config, words) on t.word = any(w.words)
    group by w.config
    order by count(*) desc, w.config = 'english'::regconfig desc, w.config::text
    limit 1;
    return coalesce(_config, 'english'::regconfig);
end
$$;

-- name: fact_tsvector: a fact's full-text vector, in its language, with CJK unigrams and bigrams.
create or replace function membank_private.fact_tsvector(input text)
returns tsvector
language plpgsql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if input = '' then
        return ''::tsvector;  -- a memory without a context: nothing to detect
    end if;
    if input !~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]' then
        return to_tsvector(membank_private.text_language(input), membank_private.unaccent_text(input));
    end if;
    return to_tsvector(
        membank_private.text_language(input),
        membank_private.unaccent_text(
            regexp_replace(input, '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+', ' ', 'g'))
    ) || membank_private.cjk_tokens(input);
end
$$;
-- name: add_lexicon_counts: add word counts to a scope's lexicon rows (Citus): upserted, or appended when appended.
-- On Citus an INSERT ... SELECT whose rows come from no distributed table
-- (unnest of a tsvector or of arrays) runs in two steps: the rows are
-- collected into an intermediate result, then inserted from it (3.2 ms of a
-- create_memory's 6.9 on its worker, 2026-12-02). One multi-row INSERT ...
-- VALUES of the same rows is routed to the scope's shard as one statement
-- (5.1 ms against 1.5 for eight words, on the worker, same run). Words in
-- lexeme order, as on one server: writers of a scope lock its word rows in
-- one order. One server keeps its INSERT ... SELECT (plans cached).
create or replace function membank_private.add_lexicon_counts(
    scope_id uuid, lexemes text[], counts bigint[], appended boolean
) returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    perform membank_private.write_lexicon_counts(
        case when appended then 'membank_private.scope_lexicon_delta' else 'membank_private.scope_lexicon_base' end,
        scope_id, lexemes, counts, not appended);
end
$$;

-- name: write_lexicon_counts: one multi-row INSERT ... VALUES of word counts into target (upserted when asked).
-- target: a word count table (scope_lexicon_base or scope_lexicon_delta),
-- or on Citus, from a trigger firing on a shard, that table's colocated
-- shard (shard_table, 015_scope_locks.sql), a name already quoted.
create or replace function membank_private.write_lexicon_counts(
    target text, scope_id uuid, lexemes text[], counts bigint[], upsert boolean
) returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if coalesce(cardinality(lexemes), 0) = 0 then
        return;
    end if;
    execute format('insert into %s as x (scope_id, lexeme, doc_count) values %s%s', target,
                   (select string_agg(format('(%L::uuid, %L, %s)', write_lexicon_counts.scope_id, c.lexeme, c.n),
                                      ', ' order by c.lexeme)
                    from unnest(lexemes, counts) as c (lexeme, n)),
                   case when upsert then ' on conflict (scope_id, lexeme) do update'
                                         ' set doc_count = x.doc_count + excluded.doc_count' else '' end);
end
$$;

-- name: count_shard_write: count_scope_write on the colocated shard of scope_stats_base (Citus, a shard's trigger).
create or replace function membank_private.count_shard_write(scope_id uuid, documents bigint, write xid8)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    execute format('insert into %s as s (scope_id, doc_count, last_write, pending) values ($1, $2, $3, false)'
                   ' on conflict (scope_id) do update set doc_count = s.doc_count + excluded.doc_count,'
                   ' last_write = excluded.last_write, pending = false',
                   membank_private.shard_table('scope_stats_base', scope_id))
    using scope_id, documents, write;
end
$$;

-- name: lock_scope_on_shard: lock_scope from a trigger firing on a shard (Citus): the lock row read on its shard.
-- The call that writes the memories took the scope's write lock first
-- (015_scope_locks.sql), so the row is held by this transaction and
-- FOR UPDATE SKIP LOCKED on the colocated shard of scope_locks takes it at
-- once, with no statement planned by Citus. A row another transaction
-- holds, or none yet: lock_scope, its bounded wait and its error.
create or replace function membank_private.lock_scope_on_shard(scope_id uuid)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _found boolean;
begin
    execute format('select true from %s as l where l.scope_id = $1 for update skip locked',
                   membank_private.shard_table('scope_locks', scope_id))
    into _found using scope_id;
    if _found is null then
        perform membank_private.lock_scope(scope_id);
    else
        perform membank_private.mark_due(scope_id, 'embedding');  -- as lock_scope does (only the coordinator marks)
    end if;
end
$$;

-- name: memories_count_inserted_lexemes: add a new memory's lexemes to its scope's counts (row trigger).
-- A row trigger: a statement trigger's transition table cost more than all
-- the counting a one-row INSERT does (measured with bench/write_path.py
-- --cost). The statement trigger below counts UPDATEs and DELETEs, where one
-- statement may change thousands of rows (a purge) in one upsert.
create or replace function membank_private.memories_count_inserted_lexemes()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    -- On a shard (Citus) the stamp carries the node's group above bit 40: a
    -- transaction id is a node's own, and a shard group moved from another
    -- worker keeps that worker's last_write, which a transaction here would
    -- come to share and take for its own (then skip the scope's lock).
    _write xid8 := case when tg_table_name = 'memories' then pg_current_xact_id()
                        else ((membank_private.node_group()::bigint << 40)
                              | pg_current_xact_id()::text::bigint)::text::xid8 end;
    _written boolean;
    _pending boolean;
    _state text;
    _appended integer := 0;
    _cap constant integer := case when membank_private.distributed() then 64 else 1024 end;
    -- On Citus this fires on a shard (memories_<id>): its statements go to
    -- the colocated shards by name, not through Citus (shard_table, 015).
    _shard boolean := tg_table_name <> 'memories';
begin
    -- Every statement names scope_id = a value: on Citus this runs on the
    -- shard, where only such a statement stays on it.
    if _shard then
        execute format('select s.last_write = $1, s.pending from %s as s where s.scope_id = $2',
                       membank_private.shard_table('scope_stats_base', new.scope_id))
        into _written, _pending using _write, new.scope_id;
    else
        select s.last_write = _write, s.pending into _written, _pending
        from membank_private.scope_stats_base as s where s.scope_id = new.scope_id;
    end if;
    _written := coalesce(_written, false);
    _pending := coalesce(_pending, false);
    -- One writer per scope at a time, until its transaction ends. Without it,
    -- two transactions that each write twice to one scope lock word rows in
    -- opposite orders and deadlock (tested). A scope this transaction wrote
    -- before (last_write) is locked already: the lock and that write commit
    -- or roll back together.
    if not _written and _shard then
        perform membank_private.lock_scope_on_shard(new.scope_id);
    elsif not _written then
        perform membank_private.lock_scope(new.scope_id);
    end if;
    -- A scope's second and later inserts in one transaction (a bulk load, a
    -- consolidation creating several memories) append their counts
    -- (scope_lexicon_delta, scope_stats_delta): updating the same rows again
    -- would leave one more row version per insert for every later update to
    -- walk (2,000 creates in one transaction: 0.64 ms each). Any other
    -- statement folds the appended counts in first, so a deletion or purge
    -- leaves no count of a forgotten word behind. Readers read the sums (the
    -- views scope_lexicon and scope_stats, migration 0017).
    -- On one server the appended counts are folded when the transaction
    -- commits (scope_stats_fold, below), so other transactions never read
    -- them; within the writing transaction every 1,024 inserts, so that its
    -- own reads add up a bounded number of rows per word. On Citus (no fold
    -- at commit) every 64: a bulk load that nothing followed would otherwise
    -- leave its counts appended for every later reader.
    if _written and _pending then
        -- How many inserts this transaction appended for the scope: kept in a
        -- transaction-local setting (rolled back with a savepoint, like the
        -- rows), read back from the appended rows when it names another
        -- scope. max(n) over them walks every row a fold deleted in this
        -- transaction.
        _state := current_setting('membank.lexicon_appended', true);
        if _state ~ '^[0-9a-f-]{36}:[0-9]{1,4}$' and split_part(_state, ':', 1) = new.scope_id::text then
            _appended := split_part(_state, ':', 2)::integer;
        elsif _shard then
            execute format('select max(p.n) from %s as p where p.scope_id = $1',
                           membank_private.shard_table('scope_stats_delta', new.scope_id))
            into _appended using new.scope_id;
            _appended := coalesce(_appended, 0);
        else
            _appended := coalesce((select max(p.n) from membank_private.scope_stats_delta as p
                                   where p.scope_id = new.scope_id), 0);
        end if;
    end if;
    if _written and _appended < _cap then
        -- A tsvector's lexemes are distinct: each counts once.
        if _shard then
            perform membank_private.write_lexicon_counts(
                membank_private.shard_table('scope_lexicon_delta', new.scope_id), new.scope_id,
                tsvector_to_array(new.fts), array_fill(1::bigint, array[length(new.fts)]), false);
            execute format('insert into %s (scope_id, n, doc_count) values ($1, $2, 1)',
                           membank_private.shard_table('scope_stats_delta', new.scope_id))
            using new.scope_id, _appended + 1;
            if not _pending then
                execute format('update %s as s set pending = true where s.scope_id = $1',
                               membank_private.shard_table('scope_stats_base', new.scope_id))
                using new.scope_id;
            end if;
        else
            if membank_private.distributed() then
                perform membank_private.add_lexicon_counts(new.scope_id, tsvector_to_array(new.fts),
                                                           array_fill(1::bigint, array[length(new.fts)]), true);
            else
                insert into membank_private.scope_lexicon_delta (scope_id, lexeme, doc_count)
                select new.scope_id, l.lexeme, 1 from unnest(tsvector_to_array(new.fts)) as l (lexeme);
            end if;
            insert into membank_private.scope_stats_delta (scope_id, n, doc_count)
            values (new.scope_id, _appended + 1, 1);
            if not _pending then  -- once per transaction: readers and the fold look at the appended rows
                update membank_private.scope_stats_base as s set pending = true where s.scope_id = new.scope_id;
            end if;
        end if;
        perform set_config('membank.lexicon_appended', new.scope_id::text || ':' || (_appended + 1), true);
        return null;
    end if;
    if _pending then
        perform membank_private.fold_appended_counts(new.scope_id);
    end if;
    if _shard then
        perform membank_private.write_lexicon_counts(
            membank_private.shard_table('scope_lexicon_base', new.scope_id), new.scope_id,
            tsvector_to_array(new.fts), array_fill(1::bigint, array[length(new.fts)]), true);
        perform membank_private.count_shard_write(new.scope_id, 1, _write);
    elsif membank_private.distributed() then
        perform membank_private.add_lexicon_counts(new.scope_id, tsvector_to_array(new.fts),
                                                   array_fill(1::bigint, array[length(new.fts)]), false);
        perform membank_private.count_scope_write(new.scope_id, 1, _write);
    else
        insert into membank_private.scope_lexicon_base as x (scope_id, lexeme, doc_count)
        select new.scope_id, l.lexeme, 1 from unnest(tsvector_to_array(new.fts)) as l (lexeme)
        order by l.lexeme
        on conflict (scope_id, lexeme) do update set doc_count = x.doc_count + excluded.doc_count;
        perform membank_private.count_scope_write(new.scope_id, 1, _write);
    end if;
    return null;
end
$$;

-- name: count_scope_write: add to a scope's document count and stamp the transaction that wrote it.
-- last_write: this transaction wrote the scope's memories, so a
-- consolidation plan made before it searches its candidates again
-- (candidates_stamp, 093_consolidation.sql). Every counted write sets it, an
-- UPDATE too (a changed fact moves the candidates without changing the count).
-- PL/pgSQL: its plan is kept for the session (a SQL function with a SET
-- clause is planned on every call).
create or replace function membank_private.count_scope_write(scope_id uuid, documents bigint, write xid8)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    insert into membank_private.scope_stats_base as s (scope_id, doc_count, last_write, pending)
    values (count_scope_write.scope_id, count_scope_write.documents, count_scope_write.write, false)
    on conflict (scope_id) do update set doc_count = s.doc_count + excluded.doc_count,
                                         last_write = excluded.last_write, pending = false;
end
$$;

-- name: memories_count_lexemes: apply an UPDATE's or DELETE's changes to the lexemes of its scopes (statement trigger).
create or replace function membank_private.memories_count_lexemes()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope_ids uuid [];
    _fts tsvector [];
    _signs integer [];
    _scope_id uuid;
    _lexemes text [];
    -- On a shard (Citus) the stamp carries the node's group above bit 40: a
    -- transaction id is a node's own, and a shard group moved from another
    -- worker keeps that worker's last_write, which a transaction here would
    -- come to share and take for its own (then skip the scope's lock).
    _write xid8 := case when tg_table_name = 'memories' then pg_current_xact_id()
                        else ((membank_private.node_group()::bigint << 40)
                              | pg_current_xact_id()::text::bigint)::text::xid8 end;
    _count bigint;
    _written boolean;
    _pending boolean;
    _scopes uuid [];
    _counts bigint [];
    _deltas bigint [];
    _i integer;
    -- On Citus this fires on a shard (memories_<id>): its statements go to
    -- the colocated shards by name, not through Citus (shard_table, 015).
    _shard boolean := tg_table_name <> 'memories';
begin
    -- Only the transition tables of this event exist, so each branch names
    -- its own (PL/pgSQL plans a statement when it first runs).
    if tg_op = 'DELETE' then
        select array_agg(o.scope_id), array_agg(o.fts), array_agg(-1)
        into _scope_ids, _fts, _signs from old_rows as o;
    else
        select array_agg(r.scope_id), array_agg(r.fts), array_agg(r.sign)
        into _scope_ids, _fts, _signs
        from (select n.scope_id, n.fts, 1 as sign from new_rows as n
              union all
              select o.scope_id, o.fts, -1 from old_rows as o) as r;
    end if;

    -- Per scope, in scope_id order, with scope_id = a constant in every
    -- statement (on Citus these run from the shard's trigger, where only such
    -- a statement stays on the shard).
    select array_agg(c.scope_id order by c.scope_id), array_agg(c.n order by c.scope_id)
    into _scopes, _counts
    from (select d.scope_id, sum(d.sign) as n from unnest(_scope_ids, _signs) as d (scope_id, sign)
          group by d.scope_id) as c;
    for _i in 1 .. coalesce(cardinality(_scopes), 0) loop
        _scope_id := _scopes[_i];
        _count := _counts[_i];
        -- The scope's write lock, as for an insert (above); scopes in sorted
        -- order, so a statement writing several scopes cannot deadlock
        -- against another such statement.
        if _shard then
            execute format('select s.last_write = $1, s.pending from %s as s where s.scope_id = $2',
                           membank_private.shard_table('scope_stats_base', _scope_id))
            into _written, _pending using _write, _scope_id;
        else
            select s.last_write = _write, s.pending into _written, _pending
            from membank_private.scope_stats_base as s where s.scope_id = _scope_id;
        end if;
        if not coalesce(_written, false) and _shard then
            perform membank_private.lock_scope_on_shard(_scope_id);
        elsif not coalesce(_written, false) then
            perform membank_private.lock_scope(_scope_id);
        end if;
        if coalesce(_pending, false) then
            perform membank_private.fold_appended_counts(_scope_id);
        end if;
        if membank_private.distributed() then
            select array_agg(c.lexeme order by c.lexeme), array_agg(c.n order by c.lexeme) into _lexemes, _deltas
            from (select l.lexeme, sum(d.sign) as n
                  from unnest(_scope_ids, _fts, _signs) as d (scope_id, fts, sign)
                  cross join lateral unnest(tsvector_to_array(d.fts)) as l (lexeme)
                  where d.scope_id = _scope_id
                  group by l.lexeme
                  having sum(d.sign) <> 0) as c;
            if _shard then
                perform membank_private.write_lexicon_counts(
                    membank_private.shard_table('scope_lexicon_base', _scope_id), _scope_id, _lexemes, _deltas, true);
            else
                perform membank_private.add_lexicon_counts(_scope_id, _lexemes, _deltas, false);
            end if;
        else
            insert into membank_private.scope_lexicon_base as x (scope_id, lexeme, doc_count)
            select _scope_id, l.lexeme, sum(d.sign)
            from unnest(_scope_ids, _fts, _signs) as d (scope_id, fts, sign)
            cross join lateral unnest(tsvector_to_array(d.fts)) as l (lexeme)
            where d.scope_id = _scope_id
            group by l.lexeme
            having sum(d.sign) <> 0
            order by l.lexeme
            on conflict (scope_id, lexeme) do update set doc_count = x.doc_count + excluded.doc_count;
        end if;
        if _shard then
            perform membank_private.count_shard_write(_scope_id, _count, _write);
        else
            perform membank_private.count_scope_write(_scope_id, _count, _write);
        end if;
    end loop;

    -- A word no memory of the scope holds any more is forgotten with it: no
    -- zero-count rows stay behind (only counts that went down can be zero).
    -- Per scope, from the arrays rather than old_rows: on Citus these
    -- statements run from the shard's trigger, where only a statement with
    -- scope_id = a constant stays on the shard, and old_rows is not visible.
    for _scope_id in select distinct d.scope_id from unnest(_scope_ids, _signs) as d (scope_id, sign)
                     where d.sign < 0 loop
        _lexemes := array(
            select distinct l.lexeme
            from unnest(_scope_ids, _fts, _signs) as d (scope_id, fts, sign)
            cross join lateral unnest(tsvector_to_array(d.fts)) as l (lexeme)
            where d.sign < 0 and d.scope_id = _scope_id);
        if _shard then
            execute format('delete from %s as x where x.scope_id = $1 and x.lexeme = any($2) and x.doc_count <= 0',
                           membank_private.shard_table('scope_lexicon_base', _scope_id))
            using _scope_id, _lexemes;
            execute format('delete from %s as s where s.scope_id = $1 and s.doc_count <= 0',
                           membank_private.shard_table('scope_stats_base', _scope_id))
            using _scope_id;
        else
            delete from membank_private.scope_lexicon_base as x
            where x.scope_id = _scope_id and x.lexeme = any(_lexemes) and x.doc_count <= 0;
            delete from membank_private.scope_stats_base as s where s.scope_id = _scope_id and s.doc_count <= 0;
        end if;
    end loop;
    return null;
end
$$;

-- name: fold_appended_counts: add a scope's appended word and document counts to its lexicon rows.
-- Called with the scope's write lock held (every writer of the scope takes
-- it before its rows): by the next statement that writes the scope other
-- than an appending INSERT, and when the transaction commits.
create or replace function membank_private.fold_appended_counts(scope_id uuid)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    _lexemes text [];
    _counts bigint [];
    _documents bigint;
begin
    with pending as (
        delete from membank_private.scope_lexicon_delta as p where p.scope_id = fold_appended_counts.scope_id
        returning p.lexeme, p.doc_count
    )
    select array_agg(c.lexeme order by c.lexeme), array_agg(c.n order by c.lexeme) into _lexemes, _counts
    from (select p.lexeme, sum(p.doc_count) as n from pending as p group by p.lexeme) as c;
    with pending as (
        delete from membank_private.scope_stats_delta as p where p.scope_id = fold_appended_counts.scope_id
        returning p.doc_count
    )
    select coalesce(sum(p.doc_count), 0) into _documents from pending as p;
    if membank_private.distributed() then
        select array_agg(c.lexeme order by c.lexeme), array_agg(c.n order by c.lexeme) into _lexemes, _counts
        from unnest(_lexemes, _counts) as c (lexeme, n) where c.n <> 0;
        perform membank_private.add_lexicon_counts(fold_appended_counts.scope_id, _lexemes, _counts, false);
    else
        insert into membank_private.scope_lexicon_base as x (scope_id, lexeme, doc_count)
        select fold_appended_counts.scope_id, c.lexeme, c.n from unnest(_lexemes, _counts) as c (lexeme, n)
        where c.n <> 0
        on conflict (scope_id, lexeme) do update set doc_count = x.doc_count + excluded.doc_count;
    end if;
    update membank_private.scope_stats_base as s set doc_count = s.doc_count + _documents, pending = false
    where s.scope_id = fold_appended_counts.scope_id;
    perform set_config('membank.lexicon_appended', '', true);
end
$$;

-- name: scope_stats_fold: when a transaction that appended counts commits, fold them (deferred trigger).
-- A constraint trigger deferred to COMMIT: a bulk load folds once, at its
-- end, instead of every few statements; no other transaction ever reads
-- appended counts on one server. SECURITY DEFINER: at COMMIT the caller's
-- own role is current again, and it has no access to these tables.
create or replace function membank_private.scope_stats_fold()
returns trigger
language plpgsql
security definer
set search_path to pg_catalog, pg_temp
as $$
begin
    -- Read again: a fold since (a later UPDATE or DELETE, or erase_scope)
    -- may have done it, or the row may be gone.
    if exists (select from membank_private.scope_stats_base as s
               where s.scope_id = new.scope_id and s.pending) then
        perform membank_private.fold_appended_counts(new.scope_id);
    end if;
    return null;
end
$$;

-- CREATE OR REPLACE does not take a constraint trigger. On Citus there is
-- none: a trigger firing at COMMIT on a shard would run inside the
-- workers' two-phase commit, and the folds every 64 statements bound what
-- a reader adds up.
do $$
begin
    drop trigger if exists scope_stats_fold on membank_private.scope_stats_base;
    -- Distributed: the same test as 990_citus.sql's for distributed().
    if exists (select from pg_catalog.pg_extension where extname = 'citus') then
        if exists (select from pg_catalog.pg_class as t
                   inner join pg_catalog.pg_namespace as n on n.oid = t.relnamespace
                   inner join pg_catalog.pg_dist_partition as p on p.logicalrelid = t.oid
                   where n.nspname = 'membank_private' and t.relname = 'memories') then
            return;
        end if;
    end if;
    create constraint trigger scope_stats_fold
    after update on membank_private.scope_stats_base
    deferrable initially deferred
    for each row when (new.pending and not old.pending)
    execute function membank_private.scope_stats_fold();
end
$$;

create or replace trigger memories_lexicon_insert
after insert on membank_private.memories
for each row execute function membank_private.memories_count_inserted_lexemes();

create or replace trigger memories_lexicon_update
after update on membank_private.memories
referencing old table as old_rows new table as new_rows
for each statement execute function membank_private.memories_count_lexemes();

create or replace trigger memories_lexicon_delete
after delete on membank_private.memories
referencing old table as old_rows
for each statement execute function membank_private.memories_count_lexemes();
