-- Back to 0016: no plan stamps (every plan's candidates are searched again when it applies).
alter table membank_private.generation_jobs drop column plan_stamp;
alter table membank_private.scope_stats drop column last_write;
