-- Sessions for agent frameworks: the storage behind a session service such
-- as Google ADK's BaseSessionService (pyclient/membank/adk/sessions.py is a
-- thin caller: one function per method).
--
-- A session of application app_name for user user_id lives in the exact
-- scope {"app_name": app_name, "user_id": user_id}: the same scope as the
-- memories the memory service generates from it, so that erasing the scope
-- reaches sessions, events, state and memories alike.
--
-- State follows ADK's prefixes (google.adk.sessions.State):
--   "app:k"  shared by every user of the app    -> app_state_entries (key k)
--   "user:k" shared by every session of a scope -> scope_states (key k)
--   "temp:k" lives for one invocation only      -> never stored
--   "k"      this session only                  -> sessions.state
-- A delta replaces top-level keys (Python's dict.update, as ADK's services
-- do). The merge runs here, in the transaction that stores the event, under
-- the session's row lock: two processes appending to one session both land,
-- in commit order, and neither's delta is lost (a read-modify-write in the
-- client would lose one). The obvious alternative, ADK's
-- DatabaseSessionService, rejects the second writer as stale instead.
--
-- The app: state is every user's, so it takes no lock another user's call
-- must wait for: a write appends one entry per key (never an update of a
-- shared row), a read takes each key's latest entry (highest seq). One
-- user holding an app: change open in a transaction therefore delays no
-- other user; of two concurrent writes of one key, the later entry (by seq,
-- the order the writes began) wins, as with any last-writer-wins store.
-- Superseded entries are deleted by the next writer of the key, with SKIP
-- LOCKED, so that clean-up never waits either and the table holds about one
-- entry per key.
--
-- Sizes (membank_private.size_limit): a state key with its value, a
-- session's own state, a user's and an app's shared state each have a
-- bound in bytes (a key's name plus its value as JSON text, summed over the
-- keys: state_bytes) and in keys, refused with 22023 before anything is
-- written. The app's state is every user's, so its bound is also what
-- bounds every get_session of the app: one user can fill it, never past it.
-- Its check takes no lock (see above), so two users writing at once may
-- each pass it against the committed state and together overshoot; the
-- read (app_state) then returns the app's keys in the order they were
-- written up to the bound, so that no read ever carries more.
--
-- Events are stored once: the event id is the idempotency key (a retry with
-- the same payload changes nothing; another payload under the same id is
-- MB020, like append_events). The full payload is kept as JSON so that
-- author, content parts, actions and timestamps round-trip exactly; the
-- event's text parts are also stored as its text, so GenerateMemories and
-- list_events read ADK events like any other.

-- name: validate_session_ids: check app_name, user_id and session_id; returns the session's scope.
create or replace function membank_private.validate_session_ids(
    app_name text, user_id text, session_id text, check_binding boolean default true
) returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if app_name is null or length(app_name) not between 1 and 1024 then
        perform membank_private._raise_invalid('app_name', 'must be 1 to 1024 characters',
            'the application''s name; it becomes the scope key "app_name"');
    end if;
    if user_id is null or length(user_id) not between 1 and 1024 then
        perform membank_private._raise_invalid('user_id', 'must be 1 to 1024 characters',
            'the authenticated user''s id; it becomes the scope key "user_id"');
    end if;
    if session_id is null or length(session_id) not between 1 and 200 then
        perform membank_private._raise_invalid('session_id', 'must be 1 to 200 characters',
            'pass the id create_session returned');
    end if;
    -- A role bound to other scopes (bind_role_to_scope) may not touch this user's sessions.
    if check_binding then
        perform membank_private.check_scope_allowed(jsonb_build_object('app_name', app_name, 'user_id', user_id),
                                                    'user_id');
    end if;
    return jsonb_build_object('app_name', app_name, 'user_id', user_id);
end
$$;

-- name: state_bytes: the size of a state as limited: bytes of each key's name and its value as JSON text, summed.
create or replace function membank_private.state_bytes(state jsonb)
returns bigint
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(sum(octet_length(k.key) + octet_length(k.value::text)), 0)
    from jsonb_each(coalesce(state, '{}')) as k;
$$;

-- name: check_state_size: 22023 naming the argument when a state (after a merge) passes its limit of keys or bytes.
-- what: session_state, user_state or app_state (size_limit's names).
-- keys and bytes: the state's, counted by the caller (state_bytes, or the
-- app's entries) so that a large state is measured once.
create or replace function membank_private.check_state_size(
    what text, keys bigint, bytes bigint, argument text
) returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _label text := case what when 'session_state' then 'the session''s own state'
                             when 'user_state' then 'the user''s "user:" state'
                             else 'the app''s "app:" state' end;
begin
    if keys > membank_private.size_limit('state_keys') then
        perform membank_private._raise_invalid(argument, format('would give %s %s keys', _label, keys),
            format('%s holds at most %s keys; nothing was written', _label, membank_private.size_limit('state_keys')));
    end if;
    if bytes > membank_private.size_limit(what) then
        perform membank_private._raise_invalid(argument, format('would make %s %s bytes', _label, bytes),
            format('%s is at most %s bytes (key names and values as JSON text)%s; nothing was written', _label,
                   membank_private.size_limit(what),
                   case when what = 'app_state' then ', as every user of the app reads it' else '' end));
    end if;
end
$$;

-- name: refuse_far_over: 22023 at once for a JSON argument whose stored size is far (16x) over its limit.
-- The exact checks measure JSON text, which means writing the value out:
-- seconds for 200 MB. pg_column_size reads the size the value has in
-- memory without that; jsonb can be larger than its text (a number is
-- stored in 8 or more bytes), but not 16 times, so only values that are
-- over their limit in any measure are refused here.
create or replace function membank_private.refuse_far_over(value jsonb, what text, argument text)
returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if pg_column_size(value) > 16::bigint * membank_private.size_limit(what) then
        perform membank_private._raise_invalid(argument, format('is %s bytes as stored', pg_column_size(value)),
            case when what = 'session_event'
                 then format('an event is at most %s bytes as JSON text', membank_private.size_limit(what))
                 else format('a session''s own, a user''s and an app''s state are at most %s, %s and %s bytes as JSON '
                             || 'text', membank_private.size_limit('session_state'),
                             membank_private.size_limit('user_state'), membank_private.size_limit('app_state')) end);
    end if;
end
$$;

-- name: validate_state_values: 22023 naming the argument when a key of a state is over size_limit('state_value').
create or replace function membank_private.validate_state_values(state jsonb, argument text)
returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _key text;
    _bytes bigint;
begin
    select k.key, k.bytes into _key, _bytes
    from (select e.key, octet_length(e.key) + octet_length(e.value::text) as bytes
          from jsonb_each(coalesce(state, '{}')) as e) as k
    where k.bytes > membank_private.size_limit('state_value')
    order by k.key limit 1;
    if _key is not null then
        perform membank_private._raise_invalid(argument,
            format('key %s holds %s bytes', to_jsonb(left(_key, 80)), _bytes),
            format('a state key with its value is at most %s bytes as JSON text; keep large data elsewhere '
                   || '(e.g. ADK artifacts) and a reference in state', membank_private.size_limit('state_value')));
    end if;
end
$$;

-- name: app_state: the app: state of an application (keys without the prefix): each key's latest entry.
-- At most size_limit('app_state') bytes and size_limit('state_keys') keys:
-- the keys in the order they were last written, up to the bound (only
-- writes racing each other can leave more; the sizes are the entries' own,
-- so that no value is read to count it).
create or replace function membank_private.app_state(app_name text)
returns jsonb
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_object_agg(e.key, e.value), '{}')
    from (
        select l.key, l.value,
               sum(l.size) over (order by l.seq) as running,
               row_number() over (order by l.seq) as n
        from (
            select distinct on (x.key) x.key, x.value, x.seq, x.size
            from membank_private.app_state_entries as x
            where x.app_name = app_state.app_name
            order by x.key, x.seq desc
        ) as l
    ) as e
    where e.running <= membank_private.size_limit('app_state') and e.n <= membank_private.size_limit('state_keys');
$$;

-- name: session_json: a session as JSON: ids, merged state (app:, user: prefixed), events, last update time.
create or replace function membank_private.session_json(
    s membank_private.sessions, with_events boolean, num_recent_events integer, after_timestamp double precision
) returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    -- Read first: on Citus the statement below runs on the session's shard,
    -- where app_state (a read of a reference table) cannot run nested.
    _app jsonb := membank_private.app_state(s.scope ->> 'app_name');
begin
    return jsonb_build_object(
        'id', s.session_id,
        'app_name', s.scope ->> 'app_name',
        'user_id', s.scope ->> 'user_id',
        'state', s.state
        || coalesce((
            select jsonb_object_agg('app:' || k.key, k.value)
            from jsonb_each(_app) as k
        ), '{}')
        || coalesce((
            select jsonb_object_agg('user:' || k.key, k.value)
            from membank_private.scope_states as u, jsonb_each(u.state) as k
            where u.scope_id = s.scope_id
        ), '{}'),
        'last_update_time', extract(epoch from s.update_time),
        'events', case when not with_events then '[]'::jsonb else coalesce((
            select jsonb_agg(r.event order by r.append_seq)
            from (
                select e.append_seq, coalesce(e.payload, jsonb_build_object(
                    'id', e.event_id, 'author', e.author, 'invocation_id', '',
                    'timestamp', extract(epoch from e.event_time),
                    'content', case when e.text is null then null else jsonb_build_object(
                        'role', case when e.author = 'user' then 'user' else 'model' end,
                        'parts', jsonb_build_array(jsonb_build_object('text', e.text))) end)) as event
                from membank_private.events as e
                where e.scope_id = s.scope_id and e.session_id = s.session_id
                  and (after_timestamp is null or e.event_time >= to_timestamp(after_timestamp))
                order by e.append_seq desc
                limit num_recent_events
            ) as r
        ), '[]') end
    );
end
$$;

-- name: create_session: create a session with its initial state; returns it with the merged state.
create or replace function membank.create_session(
    app_name text, user_id text, session_id text default null, state jsonb default null
) returns jsonb
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _id text := coalesce(nullif(btrim(session_id), ''), gen_random_uuid()::text);
    _scope jsonb := membank_private.validate_session_ids(app_name, user_id, _id);
    _scope_id uuid := md5(_scope::text)::uuid;
    _session membank_private.sessions;
begin
    -- Bounded waits (membank.lock_timeout, as for a scope's write lock): MB040 past it.
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    if state is not null and jsonb_typeof(state) <> 'object' then
        perform membank_private._raise_invalid('state', format('must be a JSON object, got %s', jsonb_typeof(state)),
            'pass {"key": value}; "app:" and "user:" keys are shared, "temp:" keys are not stored');
    end if;
    perform membank_private.refuse_far_over(state, 'session_state', 'state');
    perform membank_private.validate_state_keys(state, 'state');
    perform membank_private.validate_state_values(state, 'state');
    perform membank_private.check_state_size('session_state',
        (select count(*) from jsonb_object_keys(membank_private.split_state(state, ''))),
        membank_private.state_bytes(membank_private.split_state(state, '')), 'state');
    insert into membank_private.sessions as s (scope_id, session_id, scope, state)
    values (_scope_id, _id, _scope, membank_private.split_state(state, ''))
    on conflict on constraint sessions_pkey do nothing
    returning * into _session;
    if _session is null then
        raise exception 'session_id: session % already exists for this app and user', to_jsonb(_id)
            using errcode = 'unique_violation', detail = 'argument: session_id',
                  hint = 'get_session reads it; pick another session_id to start a new one';
    end if;
    perform membank_private.merge_shared_state(app_name, _scope_id, _scope, state, 'state');
    return membank_private.session_json(_session, false, null, null);
exception
    when lock_not_available then
        raise exception 'session_id: another write to this session held its lock for longer than %',
            membank_private.scope_lock_timeout()
            using errcode = 'MB040', detail = 'argument: session_id',
                  hint = 'nothing was written; retry the call (the wait limit is the setting membank.lock_timeout)';
end
$$;

comment on function membank.create_session(text, text, text, jsonb) is
$$Create session session_id (1..200 characters after trimming; a random uuid when null or blank) of application
app_name for user user_id (each 1..1024 characters), in the scope {"app_name": app_name, "user_id": user_id}.
state: a JSON object or null; keys prefixed "app:" merge into the app's shared state, "user:" into the user's
(the scope's) shared state, "temp:" keys are dropped, the rest is the session's own state (ADK's State prefixes).
Returns the session as JSON {"id", "app_name", "user_id", "state" (session state merged with the app: and user:
state, prefixed), "events": [], "last_update_time" (seconds since the epoch)}.
Limits (membank_private.size_limit, docs/memories.md "Limits"): a key with its value <= 65536 bytes as JSON text; the
session's own state, the user's and the app's state each <= 1000 keys, and <= 1048576, 1048576 and 65536 bytes (key
names and values as JSON text) after the merge.
Raises 22023 naming the argument (a key with an empty name, a value or state over its limit), 23505 when the session
already exists, MB040 after waiting membank.lock_timeout (retryable); nothing is written on error.$$;

-- name: validate_state_keys: 22023 naming the argument when a state key has an empty name ("", "app:", "user:").
-- An empty name would be stored as the key "" of the session's, app's or
-- user's state, which ADK cannot address again (State["app:"] is not a key of it).
create or replace function membank_private.validate_state_keys(state jsonb, argument text)
returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _key text;
begin
    select k into _key from jsonb_object_keys(coalesce(state, '{}')) as k
    where k in ('', 'app:', 'user:', 'temp:') limit 1;
    if _key is not null then
        perform membank_private._raise_invalid(argument, format('holds the key %s with an empty name', to_jsonb(_key)),
            format('name the key after its prefix, e.g. %s', to_jsonb(_key || 'theme')));
    end if;
end
$$;

-- name: split_state: the keys of a state (delta) with one ADK prefix, prefix removed ('' = unprefixed, temp: dropped).
create or replace function membank_private.split_state(state jsonb, prefix text)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select coalesce(jsonb_object_agg(substr(k.key, length(prefix) + 1), k.value), '{}')
    from jsonb_each(coalesce(state, '{}')) as k
    where case when prefix = '' then not (k.key like 'app:%' or k.key like 'user:%' or k.key like 'temp:%')
               else k.key like prefix || '%' end;
$$;

-- name: merge_app_state: append the app: keys of a delta as entries, drop the ones they supersede (SKIP LOCKED).
create or replace function membank_private.merge_app_state(
    app_name text, scope_id uuid, delta jsonb, argument text default 'state'
) returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _before bigint;
    _keys bigint;
    _bytes bigint;
begin
    -- The delta alone past the bound: refused before anything is inserted.
    perform membank_private.check_state_size('app_state', (select count(*) from jsonb_object_keys(delta)),
        membank_private.state_bytes(delta), argument);
    select coalesce(sum(l.size), 0) into _before
    from (select distinct on (x.key) x.size from membank_private.app_state_entries as x
          where x.app_name = merge_app_state.app_name order by x.key, x.seq desc) as l;
    insert into membank_private.app_state_entries (app_name, key, value, scope_id, size)
    select merge_app_state.app_name, k.key, k.value, merge_app_state.scope_id,
           octet_length(k.key) + octet_length(k.value::text)
    from jsonb_each(delta) as k
    order by k.key;
    -- The app's state as this write leaves it (committed entries and this
    -- write's): refused past its bound unless the write shrinks it (a state
    -- that racing writes left over the bound can still be cut down).
    select count(*), coalesce(sum(l.size), 0) into _keys, _bytes
    from (select distinct on (x.key) x.size from membank_private.app_state_entries as x
          where x.app_name = merge_app_state.app_name order by x.key, x.seq desc) as l;
    if _bytes > _before or _keys > membank_private.size_limit('state_keys') then
        perform membank_private.check_state_size('app_state', _keys, _bytes, argument);
    end if;
    -- Entries with a later entry of the same key are read by no one. One
    -- that another transaction holds (it is deleting it) is skipped: this
    -- write never waits, and the next writer of the key removes what is left.
    delete from membank_private.app_state_entries as e
    where (e.app_name, e.key, e.seq) in (
        select x.app_name, x.key, x.seq
        from membank_private.app_state_entries as x
        where x.app_name = merge_app_state.app_name
          and x.key in (select jsonb_object_keys(delta))
          and exists (select from membank_private.app_state_entries as y
                      where y.app_name = x.app_name and y.key = x.key and y.seq > x.seq)
        for update skip locked
    );
end
$$;

-- name: merge_shared_state: merge the app: keys (appended entries) and user: keys (row-locked upsert) of a state delta.
create or replace function membank_private.merge_shared_state(
    app_name text, scope_id uuid, scope jsonb, delta jsonb, argument text default 'state'
) returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _app jsonb := membank_private.split_state(delta, 'app:');
    _user jsonb := membank_private.split_state(delta, 'user:');
    _merged jsonb;
begin
    if _app <> '{}' then
        perform membank_private.merge_app_state(app_name, scope_id, _app, argument);
    end if;
    if _user <> '{}' then
        perform membank_private.check_state_size('user_state', (select count(*) from jsonb_object_keys(_user)),
            membank_private.state_bytes(_user), argument);
        insert into membank_private.scope_states as u (scope_id, scope, state, update_time)
        values (merge_shared_state.scope_id, merge_shared_state.scope, _user, statement_timestamp())
        on conflict on constraint scope_states_pkey
        do update set state = u.state || excluded.state, update_time = excluded.update_time
        returning u.state into _merged;
        -- Under the row's lock: the error rolls the whole call back.
        perform membank_private.check_state_size('user_state', (select count(*) from jsonb_object_keys(_merged)),
            membank_private.state_bytes(_merged), argument);
    end if;
end
$$;

-- name: get_session: a session with its merged state and (the most recent / later) events, or null.
create or replace function membank.get_session(
    app_name text, user_id text, session_id text, num_recent_events integer default null,
    after_timestamp double precision default null
) returns jsonb
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_session_ids(app_name, user_id, btrim(session_id));
    _session membank_private.sessions;
begin
    if num_recent_events < 0 then
        perform membank_private._raise_invalid('num_recent_events', format('must be >= 0, got %s', num_recent_events),
            'null returns every event, 0 none, n the n most recent');
    end if;
    if after_timestamp = 'NaN'::double precision or after_timestamp in ('Infinity', '-Infinity') then
        perform membank_private._raise_invalid('after_timestamp', format('must be finite, got %s', after_timestamp),
            'seconds since the epoch, e.g. 1700000000.5');
    end if;
    select * into _session from membank_private.sessions as s
    where s.scope_id = md5(_scope::text)::uuid and s.session_id = btrim(get_session.session_id) and s.scope = _scope;
    if _session is null then
        return null;
    end if;
    return membank_private.session_json(_session, true, num_recent_events, after_timestamp);
end
$$;

comment on function membank.get_session(text, text, text, integer, double precision) is
$$The session session_id of app_name and user_id as JSON (see create_session) with its events in append
order (each the payload given to append_session_event; an event appended through append_events reads as
{"id", "author", "invocation_id": "", "timestamp", "content": {"role", "parts": [{"text"}]}}), or null when there
is no such session. num_recent_events: null for all, 0 for none, n for the n most recent (>= 0);
after_timestamp: only events at or after this time (seconds since the epoch); both apply together.
Raises 22023 naming the argument.$$;

-- name: list_sessions: the sessions of an app (of one user, or of all users) without events, oldest update first.
create or replace function membank.list_sessions(app_name text, user_id text default null)
returns setof jsonb
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb;
    _session membank_private.sessions;
begin
    perform membank_private.check_node_privileges();  -- an app with no session checks no scope
    -- The rows are read first and turned into JSON one by one: on Citus a
    -- whole row passed to a function inside a query on several shards
    -- arrives as the shard's row type, and scope_allowed (a read of the
    -- bindings) cannot run nested inside a shard's query.
    if user_id is null then
        perform membank_private.validate_session_ids(app_name, 'all', 'all', check_binding => false);
        for _session in
            select s.*
            from membank_private.sessions as s
            where s.scope ->> 'app_name' = list_sessions.app_name
              and s.scope = jsonb_build_object('app_name', s.scope ->> 'app_name', 'user_id', s.scope ->> 'user_id')
            order by s.update_time, s.scope ->> 'user_id', s.session_id
        loop
            if membank_private.scope_allowed(_session.scope) then  -- a bound role lists only its own users' sessions
                return next membank_private.session_json(_session, false, null, null);
            end if;
        end loop;
    else
        _scope := membank_private.validate_session_ids(app_name, user_id, 'all');
        for _session in
            select s.*
            from membank_private.sessions as s
            where s.scope_id = md5(_scope::text)::uuid and s.scope = _scope
            order by s.update_time, s.session_id
        loop
            return next membank_private.session_json(_session, false, null, null);
        end loop;
    end if;
end
$$;

comment on function membank.list_sessions(text, text) is
$$The sessions of application app_name for user user_id (or, when user_id is null, for every user of the app:
every session whose scope is exactly {"app_name", "user_id"}; a role bound to scopes sees only those) as JSON rows like create_session's, with merged
state and no events, ordered by last update time, oldest first. Raises 22023 naming the argument.$$;

-- name: delete_session: delete a session, its events and its own state; true when it existed.
create or replace function membank.delete_session(app_name text, user_id text, session_id text)
returns boolean
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_session_ids(app_name, user_id, btrim(session_id));
begin
    -- Bounded waits (membank.lock_timeout, as for a scope's write lock): MB040 past it.
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    delete from membank_private.sessions as s
    where s.scope_id = md5(_scope::text)::uuid and s.session_id = btrim(delete_session.session_id)
      and s.scope = _scope;
    return found;
exception
    when lock_not_available then
        raise exception 'session_id: another write to this session held its lock for longer than %',
            membank_private.scope_lock_timeout()
            using errcode = 'MB040', detail = 'argument: session_id',
                  hint = 'nothing was written; retry the call (the wait limit is the setting membank.lock_timeout)';
end
$$;

comment on function membank.delete_session(text, text, text) is
$$Delete session session_id of app_name and user_id with its events and its own state (the user's and app's
shared state stay: other sessions read them; memories generated from it stay: they belong to the scope).
Returns true when the session existed, false otherwise. Waits at most membank.lock_timeout (default 5 s) for an append in progress
(MB040 after that, retryable). Raises 22023 naming the argument.$$;
