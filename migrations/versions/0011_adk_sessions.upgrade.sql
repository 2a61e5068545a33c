-- 0011 upgrade: what an agent framework's session service keeps beside the
-- events: a session's state, state shared by every session of one scope
-- (ADK's "user:" keys) or of one app ("app:" keys), and each event's full
-- payload (content parts, actions, metadata) so that it round-trips exactly.

-- Session state ("key": value), merged key by key under the session's row lock.
alter table membank_private.sessions add column state jsonb not null default '{}';

-- list_sessions of every user of an app.
create index sessions_app_name_idx on membank_private.sessions ((scope ->> 'app_name'));

-- The framework's own event object (ADK: Event.model_dump(mode="json")), or
-- null for events appended through append_events.
alter table membank_private.events add column payload jsonb;

-- State shared by every session of one exact scope; keyed by the scope id
-- like memories and sessions, so erasing the scope reaches it.
create table membank_private.scope_states (
    scope_id uuid not null primary key,
    scope jsonb not null,
    state jsonb not null default '{}',
    update_time timestamptz not null default statement_timestamp()
);

-- State shared by every user of one application (ADK's "app:" keys). Not
-- user data by contract: an application writes here what all of its users
-- may read; erasing one scope does not touch it.
create table membank_private.app_states (
    app_name text not null primary key,
    state jsonb not null default '{}',
    update_time timestamptz not null default statement_timestamp()
);
