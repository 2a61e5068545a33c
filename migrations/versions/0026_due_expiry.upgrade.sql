-- The coordinator's index of due work also holds each scope's earliest
-- expiry ('expiry': due_time never later than the scope's earliest expire_time).
alter table membank_private.due_scopes drop constraint due_scopes_kind_check;
alter table membank_private.due_scopes
add constraint due_scopes_kind_check check (kind in ('embedding', 'generation', 'expiry'));
