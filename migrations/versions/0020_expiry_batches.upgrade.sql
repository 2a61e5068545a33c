-- 0019: the deletions whose memory's expire_time may pass while they still
-- hold its text (a memory deleted before its TTL); purge_expired_memories
-- forgets each once its expire_time has passed (forget_expired_deletions).
create index memory_revisions_deleted_expiry_idx
on membank_private.memory_revisions (expire_time)
where action = 'DELETED' and expire_time is not null and (fact is not null or structured_content is not null);
