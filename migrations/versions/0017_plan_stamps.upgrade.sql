-- 0017: the last writing transaction per scope, the stamp a consolidation
-- plan was made against, and the lexicon's appended counts.
alter table membank_private.scope_stats add column last_write xid8;
-- true while the scope has appended counts (below) not folded in yet: nothing
-- reads or folds the appended tables of a scope without.
alter table membank_private.scope_stats add column pending boolean not null default false;
alter table membank_private.generation_jobs add column plan_stamp jsonb;

-- Document-frequency changes of a scope's second and later INSERT
-- statements in one transaction are appended to scope_lexicon_delta instead
-- of updating the same rows again (a row updated n times in one transaction
-- is a chain of n versions that every later update walks); the scope's next
-- statement that is not such an INSERT folds them into scope_lexicon_base
-- (db/functions/055_lexicon.sql). scope_lexicon, what readers read, is their
-- sum. The scope's document count likewise (scope_stats: scope_stats_base
-- plus scope_stats_delta; last_write stays on the base row, which the
-- transaction's first statement set).
alter table membank_private.scope_lexicon rename to scope_lexicon_base;
alter table membank_private.scope_stats rename to scope_stats_base;
create table membank_private.scope_lexicon_delta (
    scope_id uuid not null,
    lexeme text not null,
    doc_count integer not null
);
create index scope_lexicon_delta_idx on membank_private.scope_lexicon_delta (scope_id, lexeme);
create view membank_private.scope_lexicon as
select
    c.scope_id,
    c.lexeme,
    sum(c.doc_count)::integer as doc_count
from (
    select
        b.scope_id,
        b.lexeme,
        b.doc_count
    from membank_private.scope_lexicon_base as b
    union all
    select
        d.scope_id,
        d.lexeme,
        d.doc_count
    from membank_private.scope_stats_base as s
    inner join membank_private.scope_lexicon_delta as d on s.scope_id = d.scope_id
    where s.pending
) as c
group by c.scope_id, c.lexeme;

create table membank_private.scope_stats_delta (
    scope_id uuid not null,
    n integer not null,  -- 1, 2, ...: the scope's appended statements since the last fold
    doc_count integer not null
);
create index scope_stats_delta_idx on membank_private.scope_stats_delta (scope_id, n);
create view membank_private.scope_stats as
select
    b.scope_id,
    b.last_write,
    (b.doc_count + case when b.pending then coalesce((
        select sum(d.doc_count) from membank_private.scope_stats_delta as d
        where d.scope_id = b.scope_id
    ), 0) else 0 end)::integer as doc_count
from membank_private.scope_stats_base as b;
