-- Back to 0016: no plan stamps (every plan's candidates are searched again
-- when it applies) and one lexicon table (the appended counts folded in).
drop view membank_private.scope_lexicon;
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
