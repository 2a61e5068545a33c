-- Per-scope document frequencies for IDF-weighted full-text ranking.
-- Statement-level triggers with transition tables fold a whole statement
-- (one memory or a 10,000-row purge) into one upsert (or, for a scope's
-- later INSERTs in one transaction, appended counts; see below). Writers of
-- one scope take its write lock first (015_scope_locks.sql).

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
-- name: memories_count_lexemes: add the lexemes of new rows, subtract those of old rows.
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
    _write xid8 := pg_current_xact_id();
    _pending_lexemes text [];
    _pending_counts integer [];
    _pending_count bigint;
    _count bigint;
    _written boolean;
    _pending boolean;
    _appended integer;
    _scopes uuid [];
    _counts bigint [];
    _i integer;
    _state text;
begin
    -- Only the transition tables of this event exist, so each branch names
    -- its own (PL/pgSQL plans a statement when it first runs).
    if tg_op = 'INSERT' then
        select array_agg(n.scope_id), array_agg(n.fts), array_agg(1)
        into _scope_ids, _fts, _signs from new_rows as n;
    elsif tg_op = 'DELETE' then
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
    if tg_op = 'INSERT' and cardinality(_scope_ids) = 1 then  -- one row, the common case: no query
        _scopes := _scope_ids;
        _counts := array[1];
    else
        select array_agg(c.scope_id order by c.scope_id), array_agg(c.n order by c.scope_id)
        into _scopes, _counts
        from (select d.scope_id, sum(d.sign) as n from unnest(_scope_ids, _signs) as d (scope_id, sign)
              group by d.scope_id) as c;
    end if;
    for _i in 1 .. coalesce(cardinality(_scopes), 0) loop
        _scope_id := _scopes[_i];
        _count := _counts[_i];
        -- One writer per scope at a time, until its transaction ends. Without
        -- it, two transactions that each write twice to one scope lock word
        -- rows in opposite orders and deadlock (tested). Scopes are locked in
        -- sorted order, so a statement writing several scopes cannot deadlock
        -- against another such statement. A scope this transaction wrote
        -- before (last_write, below) is locked already: the lock and that
        -- write commit or roll back together.
        select coalesce(s.last_write = _write, false), coalesce(s.pending, false) into _written, _pending
        from membank_private.scope_stats_base as s where s.scope_id = _scope_id;
        _written := coalesce(_written, false);
        _pending := coalesce(_pending, false);
        if not _written then
            perform membank_private.lock_scope(_scope_id);
        end if;
        -- A scope's second and later INSERT statements in one transaction (a
        -- bulk load, a consolidation creating several memories) append their
        -- counts (scope_lexicon_delta, scope_stats_delta): updating the same
        -- rows again would leave one more row version per statement for
        -- every later update to walk (2,000 creates in one transaction: 0.64
        -- ms each). Any other statement folds the appended counts in first,
        -- so a deletion or purge leaves no count of a forgotten word behind.
        -- Readers read the sums, the views scope_lexicon and scope_stats
        -- (migration 0017).
        -- At most 64 appended statements per scope: then they are folded (and
        -- the rows updated once more), so a reader never adds up more than
        -- a few per word, even after a bulk load that nothing followed.
        -- How many statements this transaction appended for the scope: kept
        -- in a transaction-local setting (rolled back with a savepoint, like
        -- the rows), read back from the appended rows when it names another
        -- scope. max(n) over them walked every row a fold had deleted in
        -- this transaction (a third of the trigger's cost in a bulk load).
        _appended := 0;
        if tg_op = 'INSERT' and _written and _pending then
            _state := current_setting('membank.lexicon_appended', true);
            if _state ~ '^[0-9a-f-]{36}:[0-9]{1,4}$' and split_part(_state, ':', 1) = _scope_id::text then
                _appended := split_part(_state, ':', 2)::integer;
            else
                _appended := coalesce((select max(p.n) from membank_private.scope_stats_delta as p
                                       where p.scope_id = _scope_id), 0);
            end if;
        end if;
        if tg_op = 'INSERT' and _written and _appended < 64 then
            if cardinality(_fts) = 1 then  -- one row: its lexemes are distinct, each counts once
                insert into membank_private.scope_lexicon_delta (scope_id, lexeme, doc_count)
                select _scope_id, l.lexeme, 1 from unnest(tsvector_to_array(_fts[1])) as l (lexeme);
            else
                insert into membank_private.scope_lexicon_delta (scope_id, lexeme, doc_count)
                select _scope_id, l.lexeme, sum(d.sign)
                from unnest(_scope_ids, _fts, _signs) as d (scope_id, fts, sign)
                cross join lateral unnest(tsvector_to_array(d.fts)) as l (lexeme)
                where d.scope_id = _scope_id
                group by l.lexeme;
            end if;
            _appended := _appended + 1;
            insert into membank_private.scope_stats_delta (scope_id, n, doc_count) values (_scope_id, _appended, _count);
            if not _pending then  -- once per transaction: readers and the fold look at the appended rows
                update membank_private.scope_stats_base as s set pending = true where s.scope_id = _scope_id;
            end if;
            perform set_config('membank.lexicon_appended', _scope_id::text || ':' || _appended, true);
            continue;
        end if;
        _pending_lexemes := null;
        _pending_counts := null;
        _pending_count := 0;
        if _pending then
            with pending as (
                delete from membank_private.scope_lexicon_delta as p where p.scope_id = _scope_id
                returning p.lexeme, p.doc_count
            )
            select array_agg(p.lexeme), array_agg(p.doc_count) into _pending_lexemes, _pending_counts
            from pending as p;
            with pending as (
                delete from membank_private.scope_stats_delta as p where p.scope_id = _scope_id
                returning p.doc_count
            )
            select coalesce(sum(p.doc_count), 0) into _pending_count from pending as p;
        end if;
        insert into membank_private.scope_lexicon_base as x (scope_id, lexeme, doc_count)
        select _scope_id, c.lexeme, sum(c.doc_count)
        from (select l.lexeme, d.sign as doc_count
              from unnest(_scope_ids, _fts, _signs) as d (scope_id, fts, sign)
              cross join lateral unnest(tsvector_to_array(d.fts)) as l (lexeme)
              where d.scope_id = _scope_id
              union all
              select p.lexeme, p.doc_count from unnest(_pending_lexemes, _pending_counts) as p (lexeme, doc_count)
             ) as c
        group by c.lexeme
        having sum(c.doc_count) <> 0
        order by c.lexeme
        on conflict (scope_id, lexeme) do update set doc_count = x.doc_count + excluded.doc_count;
        _count := _count + _pending_count;
        -- last_write: this transaction wrote the scope's memories, so a
        -- consolidation plan made before it searches its candidates again
        -- (candidates_stamp, 093_consolidation.sql). Every statement that
        -- gets here sets it, an UPDATE too (a changed fact moves the
        -- candidates without changing the count).
        insert into membank_private.scope_stats_base as s (scope_id, doc_count, last_write, pending)
        values (_scope_id, _count, _write, false)
        on conflict (scope_id) do update set doc_count = s.doc_count + excluded.doc_count,
                                             last_write = excluded.last_write, pending = false;
        perform set_config('membank.lexicon_appended', '', true);
    end loop;

    -- A word no memory of the scope holds any more is forgotten with it: no
    -- zero-count rows stay behind (only counts that went down can be zero).
    -- Per scope, from the arrays rather than old_rows: on Citus these
    -- statements run from the shard's trigger, where only a statement with
    -- scope_id = a constant stays on the shard, and old_rows is not visible.
    if tg_op <> 'INSERT' then
        for _scope_id in select distinct d.scope_id from unnest(_scope_ids, _signs) as d (scope_id, sign)
                         where d.sign < 0 loop
            _lexemes := array(
                select distinct l.lexeme
                from unnest(_scope_ids, _fts, _signs) as d (scope_id, fts, sign)
                cross join lateral unnest(tsvector_to_array(d.fts)) as l (lexeme)
                where d.sign < 0 and d.scope_id = _scope_id);
            delete from membank_private.scope_lexicon_base as x
            where x.scope_id = _scope_id and x.lexeme = any(_lexemes) and x.doc_count <= 0;
            delete from membank_private.scope_stats_base as s where s.scope_id = _scope_id and s.doc_count <= 0;
        end loop;
    end if;
    return null;
end
$$;

create or replace trigger memories_lexicon_insert
after insert on membank_private.memories
referencing new table as new_rows
for each statement execute function membank_private.memories_count_lexemes();

create or replace trigger memories_lexicon_update
after update on membank_private.memories
referencing old table as old_rows new table as new_rows
for each statement execute function membank_private.memories_count_lexemes();

create or replace trigger memories_lexicon_delete
after delete on membank_private.memories
referencing old table as old_rows
for each statement execute function membank_private.memories_count_lexemes();
