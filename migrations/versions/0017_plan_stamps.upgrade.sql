-- 0017: the last writing transaction per scope, and the stamp a consolidation plan was made against.
alter table membank_private.scope_stats add column last_write xid8;
alter table membank_private.generation_jobs add column plan_stamp jsonb;
