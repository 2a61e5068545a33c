-- Sessions and events: the raw conversation a memory bank learns from.
-- Appending is idempotent on event_id within a (scope, session).

-- name: validate_events: check an events array; returns it as rows (22023 naming events[i].field).
create or replace function membank_private.validate_events(events jsonb)
returns table (
    event_id text, author text, event_text text, event_time timestamptz, utc_offset interval, ordinal bigint
)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _event jsonb;
    _i bigint := 0;
    _time timestamptz;
    _zone text [];
    _key text;
begin
    if events is null or jsonb_typeof(events) <> 'array' then
        perform membank_private._raise_invalid('events',
            format('must be a JSON array, got %s', coalesce(jsonb_typeof(events), 'null')),
            'pass [{"event_id": "e1", "author": "user", "text": "...", "timestamp": "2023-05-24T10:00:00Z"}]');
    end if;
    if jsonb_array_length(events) > membank_private.size_limit('events') then
        perform membank_private._raise_invalid('events', format('holds %s events', jsonb_array_length(events)),
            format('append at most %s events per call', membank_private.size_limit('events')));
    end if;
    for _event in select e from jsonb_array_elements(events) as e loop
        if jsonb_typeof(_event) <> 'object' then
            perform membank_private._raise_invalid(format('events[%s]', _i), 'must be a JSON object',
                'each event is {"event_id", "author", "text", "timestamp"}');
        end if;
        -- A misspelt key ("txt", "time") would otherwise be dropped without a word.
        select k into _key from jsonb_object_keys(_event) as k
        where k not in ('event_id', 'author', 'text', 'timestamp') order by k limit 1;
        if _key is not null then
            perform membank_private._raise_invalid(format('events[%s]', _i),
                format('has the unknown key %s', to_jsonb(_key)),
                'an event has only "event_id", "author", "text" and "timestamp"');
        end if;
        if jsonb_typeof(_event -> 'event_id') is distinct from 'string'
           or length(_event ->> 'event_id') not between 1 and 200 then
            perform membank_private._raise_invalid(format('events[%s].event_id', _i),
                'must be a string of 1 to 200 characters', 'event ids make appending idempotent; reuse them on retry');
        end if;
        if jsonb_typeof(_event -> 'author') is distinct from 'string'
           or length(_event ->> 'author') not between 1 and 200 then
            perform membank_private._raise_invalid(format('events[%s].author', _i),
                'must be a string of 1 to 200 characters', 'e.g. "user", "assistant" or the speaker''s name');
        end if;
        if _event ? 'text' and jsonb_typeof(_event -> 'text') not in ('string', 'null')
           or length(_event ->> 'text') > membank_private.size_limit('event_text') then
            perform membank_private._raise_invalid(format('events[%s].text', _i),
                format('must be a string of at most %s characters, or null', membank_private.size_limit('event_text')),
                'an event''s text is what was said; GenerateMemories splits a long one on sentence boundaries');
        end if;
        -- ISO 8601 with an explicit zone only: PostgreSQL would also take
        -- 'now', 'yesterday' or a zoneless time, which would anchor relative
        -- dates to the moment of the call or to the server's zone.
        _zone := regexp_match(_event ->> 'timestamp',
            '^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?\s*(Z|z|([+-])(\d{2}):?(\d{2})?)$');
        _time := null;
        if _zone is not null then
            begin
                _time := (_event ->> 'timestamp')::timestamptz;
            exception
                when others then
                    _time := null;
            end;
        end if;
        if _time < '0001-01-02 00:00:00+00' or _time >= membank_private.max_time() then
            perform membank_private._raise_invalid(format('events[%s].timestamp', _i),
                format('%s is outside years 0001 to 9999 in UTC', _event -> 'timestamp'),
                'times are stored in UTC between 0001-01-02 and 9999-12-31');
        end if;
        if _time is null then
            perform membank_private._raise_invalid(format('events[%s].timestamp', _i),
                format('must be an ISO 8601 time with a zone, got %s', coalesce(_event -> 'timestamp', 'null'::jsonb)),
                'e.g. "2023-05-24T10:00:00Z" or "2023-05-24T12:00:00+02:00": relative dates in the text are '
                || 'resolved against the speaker''s date in that zone');
        end if;
        utc_offset := case when _zone[2] is null then interval '0'
                           else (_zone[2] || _zone[3] || ':' || coalesce(_zone[4], '00'))::interval end;
        event_id := _event ->> 'event_id';
        author := _event ->> 'author';
        event_text := _event ->> 'text';
        event_time := _time;
        ordinal := _i;
        return next;
        _i := _i + 1;
    end loop;
end
$$;

-- name: store_events: append_events without its refusal of []: ingest_events appends [] to re-check a trigger.
create or replace function membank_private.store_events(
    scope jsonb, session_id text, events jsonb
) returns integer
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _scope_id uuid := md5(_scope::text)::uuid;
    _conflict text;
    _count integer;
    _ids text [];
    _authors text [];
    _texts text [];
    _times timestamptz [];
    _offsets interval [];
begin
    if session_id is null or length(session_id) not between 1 and 200 then
        perform membank_private._raise_invalid('session_id', 'must be 1 to 200 characters',
            'a session groups the events of one conversation, e.g. its id in your application');
    end if;
    select array_agg(v.event_id order by v.ordinal), array_agg(v.author order by v.ordinal),
           array_agg(v.event_text order by v.ordinal), array_agg(v.event_time order by v.ordinal),
           array_agg(v.utc_offset order by v.ordinal)
    into _ids, _authors, _texts, _times, _offsets
    from membank_private.validate_events(events) as v;
    select g.event_id into _conflict
    from unnest(_ids) as g (event_id)
    group by g.event_id having count(*) > 1
    limit 1;
    if _conflict is not null then
        perform membank_private._raise_invalid('events', format('lists event_id %s twice', to_jsonb(_conflict)),
            'each event in one call needs its own event_id');
    end if;
    select g.event_id into _conflict
    from unnest(_ids, _authors, _texts, _times, _offsets) as g (event_id, author, event_text, event_time, utc_offset)
    inner join membank_private.events as e
        on e.scope_id = _scope_id and e.session_id = store_events.session_id and e.event_id = g.event_id
    where (e.author, e.text, e.event_time, e.utc_offset)
          is distinct from (g.author, g.event_text, g.event_time, g.utc_offset)
    limit 1;
    if _conflict is not null then
        raise exception 'events: event_id % is already stored with other content', to_jsonb(_conflict)
            using errcode = 'MB020', detail = 'argument: events',
                  hint = 'a retry must send the same event; a new event needs a new event_id';
    end if;
    -- The time goes in as a value (excluded.update_time): Citus refuses a
    -- non-immutable function in DO UPDATE SET on a distributed table.
    insert into membank_private.sessions as s (scope_id, session_id, scope, update_time)
    values (_scope_id, store_events.session_id, _scope, statement_timestamp())
    on conflict on constraint sessions_pkey do update set update_time = excluded.update_time;
    -- Counted from RETURNING: on Citus an INSERT ... SELECT goes through
    -- the coordinator, whose row count is the rows offered, not the stored.
    with stored as (
        insert into membank_private.events (scope_id, session_id, event_id, author, text, event_time, utc_offset)
        select _scope_id, store_events.session_id, g.event_id, g.author, g.event_text, g.event_time, g.utc_offset
        from unnest(_ids, _authors, _texts, _times, _offsets) with ordinality
            as g (event_id, author, event_text, event_time, utc_offset, n)
        order by g.n
        on conflict do nothing
        returning 1
    )
    select count(*) into _count from stored;
    return _count;
end
$$;

-- name: append_events: store events of a session; retries with the same event ids store nothing twice.
create or replace function membank.append_events(
    scope jsonb, session_id text, events jsonb
) returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
begin
    perform membank_private.validate_scope(scope);
    if jsonb_typeof(events) = 'array' and jsonb_array_length(events) = 0 then
        -- An empty call stores nothing and creates no session: a caller's mistake, said so.
        perform membank_private._raise_invalid('events', 'is empty',
            format('pass 1 to %s events, e.g. [{"event_id": "e1", "author": "user", "text": "...", '
                   || '"timestamp": "2023-05-24T10:00:00Z"}]', membank_private.size_limit('events')));
    end if;
    return membank_private.store_events(scope, session_id, events);
end
$$;

comment on function membank.append_events(jsonb, text, jsonb) is
$$Append events to the session session_id (1..200 characters) of an exact scope, creating the session on first use.
events: a JSON array of 1 to 1000 objects {"event_id": string 1..200, "author": string 1..200 (role or speaker),
"text": string <= 200000 characters or null, "timestamp": ISO 8601 with a zone, Z or +hh:mm; the offset is kept as the
speaker's zone} and no other key ([] and unknown keys are refused). Idempotent on event_id: an event already
stored with the same content is skipped, so a retried request stores nothing twice. Returns how many events were new.
Raises 22023 naming the argument (events[i].field), MB020 when an event_id is already stored with other content;
nothing is written on error.$$;

-- name: list_events: the events of a session in time order.
create or replace function membank.list_events(
    scope jsonb, session_id text, start_time timestamptz default null, end_time timestamptz default null,
    max_events integer default 1000
) returns setof membank.event
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
begin
    if max_events is null or max_events not between 1 and 100000 then
        perform membank_private._raise_invalid('max_events',
            format('must be between 1 and 100000, got %s', coalesce(max_events::text, 'null')),
            'the default is 1000');
    end if;
    return query
    select e.session_id, e.event_id, e.author, e.text, e.event_time, e.append_time
    from membank_private.events as e
    inner join membank_private.sessions as s on s.scope_id = e.scope_id and s.session_id = e.session_id
    where e.scope_id = md5(_scope::text)::uuid
      and s.scope = _scope
      and e.session_id = list_events.session_id
      and (start_time is null or e.event_time >= start_time)
      and (end_time is null or e.event_time < end_time)
    order by e.event_time, e.append_seq
    limit max_events;
end
$$;

comment on function membank.list_events(jsonb, text, timestamptz, timestamptz, integer) is
$$The events of session session_id in an exact scope, ordered by event time then arrival, optionally within
[start_time, end_time), at most max_events (1..100000, default 1000). A session of another scope is never listed:
an unknown (scope, session) gives no rows. Raises 22023 naming the argument.$$;
