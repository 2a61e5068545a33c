-- The coordinator's index of due work: a hint that a scope may have jobs of
-- a kind due from due_time on (never later than its earliest due job).
create table membank_private.due_scopes (
    kind text not null,
    scope_id uuid not null,
    due_time timestamptz not null,
    constraint due_scopes_pkey primary key (kind, scope_id),
    constraint due_scopes_kind_check check (kind in ('embedding', 'generation'))
);
create index due_scopes_due_time on membank_private.due_scopes (kind, due_time);
revoke all on membank_private.due_scopes from public;
