-- GenerateMemories: accept a request, resolve its source, and queue it.

-- name: local_time_text: an instant as ISO 8601 in the speaker's offset, e.g. 2023-05-24T23:30:00.000000-05:00.
create or replace function membank_private.local_time_text(t timestamptz, utc_offset interval)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select to_char(t at time zone utc_offset, 'YYYY-MM-DD"T"HH24:MI:SS.US')
           || case when utc_offset = interval '0' then 'Z'
                   when utc_offset < interval '0' then '-' || to_char(-utc_offset, 'HH24:MI')
                   else '+' || to_char(utc_offset, 'HH24:MI') end;
$$;

-- name: resolve_source_events: the events an operation learns from, blank texts removed.
create or replace function membank_private.resolve_source_events(
    scope jsonb, events jsonb, session_id text, start_time timestamptz, end_time timestamptz
) returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _events jsonb;
    _duplicate text;
begin
    if events is not null then
        select v.event_id into _duplicate
        from membank_private.validate_events(events) as v
        group by v.event_id having count(*) > 1
        limit 1;
        if _duplicate is not null then
            perform membank_private._raise_invalid('events', format('lists event_id %s twice', to_jsonb(_duplicate)),
                'each event in one call needs its own event_id');
        end if;
        if session_id is not null then
            -- Inline events of a session are appended to it first (idempotent).
            perform membank_private.store_events(scope, session_id, events);
        end if;
        select coalesce(jsonb_agg(jsonb_build_object(
                   'event_id', v.event_id, 'author', v.author, 'text', v.event_text,
                   'timestamp', membank_private.local_time_text(v.event_time, v.utc_offset))
                   order by v.event_time, v.ordinal), '[]')
        into _events
        from membank_private.validate_events(events) as v;
    else
        if not exists (select from membank_private.sessions as s
                       where s.scope_id = md5(resolve_source_events.scope::text)::uuid
                         and s.scope = resolve_source_events.scope
                         and s.session_id = resolve_source_events.session_id) then
            raise exception 'session_id: no session % in this scope', to_jsonb(session_id)
                using errcode = 'no_data_found', detail = 'argument: session_id',
                      hint = 'append its events first (append_events), or pass them inline with events';
        end if;
        select coalesce(jsonb_agg(jsonb_build_object(
                   'event_id', e.event_id, 'author', e.author, 'text', e.text,
                   'timestamp', membank_private.local_time_text(e.event_time, e.utc_offset))
                   order by e.event_time, e.append_seq), '[]')
        into _events
        from membank_private.events as e
        inner join membank_private.sessions as s on s.scope_id = e.scope_id and s.session_id = e.session_id
        where e.scope_id = md5(resolve_source_events.scope::text)::uuid and s.scope = resolve_source_events.scope
          and e.session_id = resolve_source_events.session_id
          and (resolve_source_events.start_time is null or e.event_time >= resolve_source_events.start_time)
          and (resolve_source_events.end_time is null or e.event_time < resolve_source_events.end_time);
    end if;
    -- Null, empty and blank texts (membank_private.is_blank) carry nothing to remember.
    select coalesce(jsonb_agg(e order by n), '[]') into _events
    from jsonb_array_elements(_events) with ordinality as x (e, n)
    where not membank_private.is_blank(e ->> 'text');
    if jsonb_array_length(_events) > 1000 then
        perform membank_private._raise_invalid('session_id',
            format('the source holds %s events with text; one operation takes at most 1000',
                   jsonb_array_length(_events)),
            'generate in parts with start_time and end_time, e.g. one call per conversation session');
    end if;
    return _events;
end
$$;

-- name: start_generation: generate_memories' body; allow_empty_events for add_messages of roles it does not extract.
-- generate_memories refuses events => [] (a caller's mistake, not a no-op
-- to poll); add_messages of only such roles still answers with a done
-- no-op operation.
create or replace function membank_private.start_generation(
    scope jsonb,
    events jsonb default null,
    session_id text default null,
    start_time timestamptz default null,
    end_time timestamptz default null,
    facts jsonb default null,
    topics jsonb default null,
    examples jsonb default null,
    disable_consolidation boolean default false,
    request_id text default null,
    ttl interval default null,
    profile_schemas jsonb default null,
    disable_natural_language_memories boolean default false,
    allow_empty_events boolean default false
) returns uuid
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _options jsonb;
    _events jsonb := '[]';
    _facts jsonb := '[]';
    _key uuid;
    _name uuid;
    _digest text;
    _existing_digest text;
    _profiles jsonb := membank_private.resolve_profile_schemas(profile_schemas, disable_natural_language_memories);
begin
    if num_nonnulls(events, facts) + (session_id is not null and events is null)::integer <> 1 then
        perform membank_private._raise_invalid(case when events is null and facts is null then 'events' else 'facts' end,
            'give exactly one source: events (inline), session_id (a stored session) or facts (given directly)',
            'events may be combined with session_id to append them to that session first');
    end if;
    if (start_time is not null or end_time is not null) and (session_id is null or events is not null) then
        perform membank_private._raise_invalid('start_time', 'a time range applies to a session source only',
            'pass session_id without events to generate from the session''s events in [start_time, end_time)');
    end if;
    if start_time > end_time then
        perform membank_private._raise_invalid('start_time', 'is after end_time',
            'the range is [start_time, end_time): events at or after start_time and before end_time');
    end if;
    if disable_consolidation is null then
        perform membank_private._raise_invalid('disable_consolidation', 'must be true or false',
            'false (default) consolidates against the scope''s memories; true only creates');
    end if;
    if request_id is not null and length(request_id) not between 1 and 200 then
        perform membank_private._raise_invalid('request_id', 'must be 1 to 200 characters',
            'a client token that makes retries of this request return the same operation');
    end if;
    perform membank_private.resolve_expire_time(ttl, null);
    _options := jsonb_build_object(
        'topics', membank_private.validate_generation_topics(topics),
        'examples', membank_private.validate_examples(examples),
        'disable_consolidation', disable_consolidation, 'ttl', ttl::text,
        'start_time', start_time, 'end_time', end_time);
    if _profiles <> '{}' then
        _options := _options || jsonb_build_object('profile_schemas', _profiles,
            'disable_natural_language_memories', disable_natural_language_memories);
    end if;
    if facts is not null then
        _facts := membank_private.validate_direct_facts(facts);
        if _profiles <> '{}' then
            -- Facts given directly feed the profiles through a profile-only extraction that reads them as events.
            _options := _options || '{"facts_given": true}';
            _events := (select jsonb_agg(jsonb_build_object(
                            'event_id', format('fact-%s', x.n), 'author', 'fact', 'text', x.f ->> 'fact',
                            'timestamp', membank_private.local_time_text(statement_timestamp(), interval '0'))
                            order by x.n)
                        from jsonb_array_elements(_facts) with ordinality as x (f, n));
        end if;
    else
        if jsonb_typeof(events) = 'array' and jsonb_array_length(events) = 0 and not allow_empty_events then
            perform membank_private._raise_invalid('events', 'is empty',
                'pass 1 to 1000 events, or session_id without events to generate from a stored session');
        end if;
        _events := membank_private.resolve_source_events(_scope, events, session_id, start_time, end_time);
    end if;

    -- The idempotency key: the client's request_id, or the whole request.
    _digest := md5(jsonb_build_object('session_id', session_id, 'events', _events, 'facts', _facts,
                                      'options', _options)::text);
    _key := md5(coalesce('request_id:' || request_id, _digest))::uuid;
    _options := _options || jsonb_build_object('request_digest', _digest);
    insert into membank_private.operations as o (
        scope_id, scope, session_id, request_key, options, source_events, facts, stage
    ) values (
        md5(_scope::text)::uuid, _scope, session_id, _key, _options, _events, _facts,
        case when facts is not null and _profiles = '{}' then 'CONSOLIDATE' else 'EXTRACT' end
    )
    on conflict (scope_id, request_key) where error is null do nothing
    returning o.name into _name;
    if _name is null then
        -- A retry of a request that has not failed: the same operation, as
        -- long as it is the same request (a reused request_id with other
        -- content would otherwise silently drop the new facts).
        select o.name, o.options ->> 'request_digest' into _name, _existing_digest
        from membank_private.operations as o
        where o.scope_id = md5(_scope::text)::uuid and o.error is null
          and o.request_key = _key;
        if _existing_digest <> (_options ->> 'request_digest') then  -- null: an operation from before 0007
            raise exception 'request_id: % was already used for another request in this scope', to_jsonb(request_id)
                using errcode = 'MB021', detail = 'argument: request_id',
                      hint = format('operation %s holds that request_id; a new request needs a new request_id',
                                    _name);
        end if;
        return _name;
    end if;

    if jsonb_array_length(_events) = 0 and jsonb_array_length(_facts) = 0 then
        perform membank_private.finish_operation(_name);  -- nothing to learn from: a done no-op
    elsif jsonb_array_length(_facts) > 0 and disable_consolidation and _profiles = '{}' then
        perform membank_private.apply_creates(_name);
        perform membank_private.finish_operation(_name);
    else
        perform membank_private.mark_due(md5(_scope::text)::uuid, 'generation');  -- Citus: 121_due_work.sql
        insert into membank_private.generation_jobs (operation_name, scope_id)
        values (_name, md5(_scope::text)::uuid);
        -- The payload stays empty: any role may LISTEN, so a notification
        -- carries no name or scope, only "there is work".
        perform pg_notify('membank_generation_jobs', '');
    end if;
    return _name;
end
$$;

-- name: generate_memories: start a GenerateMemories operation; returns its name at once.
create or replace function membank.generate_memories(
    scope jsonb,
    events jsonb default null,
    session_id text default null,
    start_time timestamptz default null,
    end_time timestamptz default null,
    facts jsonb default null,
    topics jsonb default null,
    examples jsonb default null,
    disable_consolidation boolean default false,
    request_id text default null,
    ttl interval default null,
    profile_schemas jsonb default null,
    disable_natural_language_memories boolean default false
) returns uuid
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
begin
    return membank_private.start_generation(
        scope => scope, events => events, session_id => session_id, start_time => start_time, end_time => end_time,
        facts => facts, topics => topics, examples => examples, disable_consolidation => disable_consolidation,
        request_id => request_id, ttl => ttl, profile_schemas => profile_schemas,
        disable_natural_language_memories => disable_natural_language_memories);
end
$$;

comment on function membank.generate_memories(
    jsonb, jsonb, text, timestamptz, timestamptz, jsonb, jsonb, jsonb, boolean, text, interval, jsonb, boolean
) is
$$GenerateMemories: start an operation that extracts facts from a conversation and consolidates them into the
memories of an exact scope; returns the operation's name (uuid) at once. Poll membank.get_operation(name).
Exactly one source: events (inline, a JSON array of 1 or more events as for append_events, [] refused; with session_id
they are appended to that session first), session_id (the stored events of that session, optionally only those in [start_time, end_time)), or
facts (a JSON array of 1 to 100 strings or {"fact", "topics": [strings]}, given directly: no extraction; [] is
refused with 22023, as an empty list of facts is a caller's mistake).
Options: topics (JSON array of managed topic names USER_PERSONAL_INFO, USER_PREFERENCES, KEY_CONVERSATION_DETAILS,
EXPLICIT_INSTRUCTIONS and custom {"label", "description"}; default the four managed ones), examples (few-shot:
[{"events": [{"author", "text"}], "facts": [text]}], at most 10), disable_consolidation (true: every fact is created,
none compared), request_id (idempotency token), ttl (expiry of created memories), profile_schemas (a JSON array of
profile schema ids to fill; null, the default, fills every schema of the bank, [] none), disable_natural_language_memories
(true: fill only the profiles). Profile fields are extracted from every source (facts given directly are read as
events for it), validated against their schema and consolidated field by field (086_profiles.sql).
Idempotent: the same request (same request_id, or else the same scope, source events, facts and options) returns the
same operation unless that one failed; a request_id reused with a different request raises MB021. Events with null or
blank text (only white space or zero-width characters) are skipped; with nothing left the operation is
done at once with zero actions and no model call. Relative dates in events are resolved against each event's own
timestamp. Raises 22023 naming the argument (at most 1000 events with text per operation, an event_id listed twice,
ttl past year 9999, an unknown profile schema, disable_natural_language_memories with no schema in effect), 42501 (a
role bound to other scopes), P0002 (session_id names no session of this scope), MB020 (an inline event_id already
stored with other content), MB021 (request_id already used for another request); nothing is written on error.$$;
