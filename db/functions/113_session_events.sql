-- Appending framework events to a session (see 112_sessions.sql for the
-- design): the state-delta merge under the session's row lock, and the
-- user-state read. Split from 110 because sqlfluff skips files over 20 kB.

-- name: append_session_event: store one framework event in a session and merge its state delta, once per event id.
create or replace function membank.append_session_event(
    app_name text, user_id text, session_id text, event jsonb
) returns jsonb
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_session_ids(app_name, user_id, btrim(session_id));
    _scope_id uuid := md5(_scope::text)::uuid;
    _session membank_private.sessions;
    _payload jsonb;
    _stored jsonb;
    _delta jsonb;
    _time timestamptz;
    _seconds double precision;
    _text text;
    _own jsonb;
begin
    -- Bounded waits (membank.lock_timeout, as for a scope's write lock): MB040 past it.
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    if event is null or jsonb_typeof(event) <> 'object' then
        perform membank_private._raise_invalid('event', 'must be a JSON object',
            'pass the framework''s event as JSON, e.g. ADK''s Event.model_dump(mode="json")');
    end if;
    perform membank_private.refuse_far_over(event, 'session_event', 'event');
    if jsonb_typeof(event -> 'id') is distinct from 'string' or length(event ->> 'id') not between 1 and 200 then
        perform membank_private._raise_invalid('event.id', 'must be a string of 1 to 200 characters',
            'the event id makes appending idempotent; reuse it on retry');
    end if;
    if jsonb_typeof(event -> 'author') is distinct from 'string' or length(event ->> 'author') not between 1 and 200 then
        perform membank_private._raise_invalid('event.author', 'must be a string of 1 to 200 characters',
            'e.g. "user" or the agent''s name');
    end if;
    if jsonb_typeof(event -> 'timestamp') is distinct from 'number'
       or (event ->> 'timestamp')::double precision not between 0 and 32503680000 then
        perform membank_private._raise_invalid('event.timestamp', 'must be seconds since the epoch (a number)',
            'e.g. 1700000000.123');
    end if;
    if jsonb_typeof(event -> 'actions') not in ('object', 'null') then
        -- A string or array here would hide a state_delta the caller meant to apply.
        perform membank_private._raise_invalid('event.actions', 'must be a JSON object',
            'pass {"state_delta": {...}} or leave actions out');
    end if;
    _delta := event #> '{actions,state_delta}';
    if _delta is not null and jsonb_typeof(_delta) not in ('object', 'null') then
        perform membank_private._raise_invalid('event.actions.state_delta', 'must be a JSON object',
            'pass {"key": value}');
    end if;
    if jsonb_typeof(_delta) = 'object' then
        perform membank_private.validate_state_keys(_delta, 'event.actions.state_delta');
        perform membank_private.validate_state_values(_delta, 'event.actions.state_delta');
        -- temp: keys live for one invocation: never stored, not even in the event.
        _payload := jsonb_set(event, '{actions,state_delta}', (
            select coalesce(jsonb_object_agg(k.key, k.value), '{}') from jsonb_each(_delta) as k
            where k.key not like 'temp:%'));
        _delta := _payload #> '{actions,state_delta}';
    else
        _payload := event;
        _delta := '{}';
    end if;
    if octet_length(_payload::text) > membank_private.size_limit('session_event') then
        perform membank_private._raise_invalid('event', format('is %s bytes', octet_length(_payload::text)),
            format('an event is at most %s bytes as JSON text; keep files out of events (e.g. ADK artifacts)',
                   membank_private.size_limit('session_event')));
    end if;
    -- The session's row lock orders appends: the next append waits for this
    -- commit, so append order is commit order and every delta merges.
    select * into _session from membank_private.sessions as s
    where s.scope_id = _scope_id and s.session_id = btrim(append_session_event.session_id) and s.scope = _scope
    for update;
    if _session is null then
        raise exception 'session_id: no session % for this app and user', to_jsonb(btrim(session_id))
            using errcode = 'no_data_found', detail = 'argument: session_id',
                  hint = 'create_session first; a deleted or erased session takes no events';
    end if;
    select e.payload into _stored from membank_private.events as e
    where e.scope_id = _scope_id and e.session_id = _session.session_id and e.event_id = event ->> 'id';
    if found then
        if _stored is distinct from _payload then
            raise exception 'event: event id % is already stored with other content', to_jsonb(event ->> 'id')
                using errcode = 'MB020', detail = 'argument: event',
                      hint = 'a retry must send the same event; a new event needs a new id';
        end if;
        return jsonb_build_object('appended', false, 'last_update_time', extract(epoch from _session.update_time));
    end if;
    -- Whole seconds plus the fraction rounded half-even to microseconds: what Python's
    -- datetime.fromtimestamp gives, so the memory service's copy of this event is the same event.
    _seconds := (event ->> 'timestamp')::double precision;
    _time := to_timestamp(floor(_seconds))
             + make_interval(secs => round((_seconds - floor(_seconds)) * 1e6::double precision) / 1e6);
    -- The text the memory service would send for this event: text parts that are not thoughts, one per line.
    select nullif(string_agg(p ->> 'text', E'\n' order by n), '') into _text
    from jsonb_array_elements(case when jsonb_typeof(event #> '{content,parts}') = 'array'
                                   then event #> '{content,parts}' else '[]' end) with ordinality as x (p, n)
    where coalesce(p ->> 'text', '') <> '' and (p -> 'thought') is distinct from 'true'::jsonb;
    if btrim(_text, E' \t\n\r') = '' then
        _text := null;
    end if;
    _own := _session.state || membank_private.split_state(_delta, '');
    if _delta <> '{}' then
        perform membank_private.check_state_size('session_state', (select count(*) from jsonb_object_keys(_own)),
            membank_private.state_bytes(_own), 'event.actions.state_delta');
    end if;
    perform membank_private.merge_shared_state(app_name, _scope_id, _scope, _delta, 'event.actions.state_delta');
    insert into membank_private.events (scope_id, session_id, event_id, author, text, event_time, payload)
    values (_scope_id, _session.session_id, event ->> 'id', event ->> 'author', _text, _time, _payload);
    update membank_private.sessions as s
    set state = _own, update_time = _time
    where s.scope_id = _scope_id and s.session_id = _session.session_id;
    return jsonb_build_object('appended', true, 'last_update_time', extract(epoch from _time));
exception
    when lock_not_available then
        raise exception 'session_id: another write to this session held its lock for longer than %',
            membank_private.scope_lock_timeout()
            using errcode = 'MB040', detail = 'argument: session_id',
                  hint = 'nothing was written; retry the call (the wait limit is the setting membank.lock_timeout)';
end
$$;

comment on function membank.append_session_event(text, text, text, jsonb) is
$$Append one event to session session_id of app_name and user_id, and merge its state delta.
event: a JSON object with "id" (string 1..200: the idempotency key), "author" (string 1..200), "timestamp"
(seconds since the epoch, a number) and any other fields, kept as given (ADK: Event.model_dump(mode="json"));
its "actions"."state_delta" merges as ADK defines: "app:" keys into the app's state, "user:" keys into the scope's,
"temp:" keys are dropped (also from the stored event), the rest into the session's state; top-level keys replace.
The event's non-thought text parts are stored as its text (list_events, GenerateMemories).
The session's row lock serialises appends: concurrent appends all land, in commit order, with every delta merged.
Limits: the event <= 1048576 bytes as JSON text; its state delta as create_session's state (a key with its value
<= 65536 bytes; the session's, user's and app's state <= 1000 keys and 1048576, 1048576, 65536 bytes after the merge).
Returns {"appended": false when this id was already stored with the same payload (nothing changes), "last_update_time":
the session's, seconds since the epoch}. Raises 22023 naming the argument, P0002 when the session does not exist,
MB020 when the id is stored with another payload, MB040 after waiting membank.lock_timeout for the session's lock
(retryable);
nothing is written on error.$$;

-- name: get_user_state: the state shared by every session of app_name and user_id (keys without "user:").
create or replace function membank.get_user_state(app_name text, user_id text)
returns jsonb
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_session_ids(app_name, user_id, 'all');
begin
    return coalesce((select u.state from membank_private.scope_states as u
                     where u.scope_id = md5(_scope::text)::uuid and u.scope = _scope), '{}');
end
$$;

comment on function membank.get_user_state(text, text) is
$$The state shared by every session of application app_name for user user_id (the "user:" keys, without the
prefix), {} when none was stored. Readable before any session exists. Raises 22023 naming the argument.$$;
