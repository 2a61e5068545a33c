-- Back to 0017: deletions past their memory's expire_time are found by a scan.
drop index membank_private.memory_revisions_deleted_expiry_idx;
