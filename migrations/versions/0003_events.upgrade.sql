-- 0003 upgrade: sessions and their raw conversation events (the source of
-- memories, not memories themselves).

create type membank.event as (
    session_id text,
    event_id text,
    author text,
    text text,
    event_time timestamptz,
    append_time timestamptz
);

-- A session belongs to one exact scope: the same session_id in two scopes
-- names two sessions.
create table membank_private.sessions (
    scope_id uuid not null,
    session_id text not null,
    scope jsonb not null,
    create_time timestamptz not null default statement_timestamp(),
    update_time timestamptz not null default statement_timestamp(),
    primary key (scope_id, session_id)
);

create table membank_private.events (
    scope_id uuid not null,
    session_id text not null,
    event_id text not null,
    author text not null,
    text text,
    event_time timestamptz not null,
    append_seq bigint generated always as identity,
    append_time timestamptz not null default statement_timestamp(),
    primary key (scope_id, session_id, event_id),
    foreign key (scope_id, session_id) references membank_private.sessions (scope_id, session_id)
    on delete cascade
);

create index events_session_time_idx
on membank_private.events (scope_id, session_id, event_time, append_seq);
