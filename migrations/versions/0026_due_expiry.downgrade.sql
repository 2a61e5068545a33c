delete from membank_private.due_scopes
where kind = 'expiry';
alter table membank_private.due_scopes drop constraint due_scopes_kind_check;
alter table membank_private.due_scopes
add constraint due_scopes_kind_check check (kind in ('embedding', 'generation'));
