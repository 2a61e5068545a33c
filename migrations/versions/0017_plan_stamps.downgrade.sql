-- Back to 0016: no plan stamps (every plan's candidates are searched again
-- when it applies) and one lexicon table (the appended counts folded in).
-- The fold at COMMIT (db/functions/055_lexicon.sql) watches the pending
-- column dropped below.
drop trigger if exists scope_stats_fold on membank_private.scope_stats_base;
drop view membank_private.scope_lexicon;
drop view membank_private.scope_stats;
update membank_private.scope_stats_base as b
set doc_count = b.doc_count + d.doc_count
from (
    select
        x.scope_id,
        sum(x.doc_count) as doc_count
    from membank_private.scope_stats_delta as x
    group by x.scope_id
) as d
where b.scope_id = d.scope_id;
drop table membank_private.scope_stats_delta;
alter table membank_private.scope_stats_base rename to scope_stats;
insert into membank_private.scope_lexicon_base as x (scope_id, lexeme, doc_count)
select
    d.scope_id,
    d.lexeme,
    sum(d.doc_count) as doc_count
from membank_private.scope_lexicon_delta as d
group by d.scope_id, d.lexeme
on conflict (scope_id, lexeme) do update set doc_count = x.doc_count + excluded.doc_count;
drop table membank_private.scope_lexicon_delta;
alter table membank_private.scope_lexicon_base rename to scope_lexicon;
alter table membank_private.generation_jobs drop column plan_stamp;
alter table membank_private.scope_stats drop column last_write;
alter table membank_private.scope_stats drop column pending;
