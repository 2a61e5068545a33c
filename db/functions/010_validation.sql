-- Argument validation shared by the API. Every check raises a SQLSTATE, a
-- message that names the argument, and a hint, before anything is written.
-- Limits (also in docs/memories.md, "Limits"):
--   scope: a JSON object of 1..16 keys; keys 1..128 characters; values
--          strings of 1..1024 characters. NUL cannot occur: PostgreSQL
--          text and jsonb reject it on input (SQLSTATE 22P05 / 54000).
--   fact: 1..32768 characters, not only whitespace.
--   topics: at most 32, each 1..128 characters.
--   metadata: a JSON object of at most 65536 bytes as text.
-- Each size limit is defined once, in size_limit below; checks and their
-- hints read it from there.

-- name: size_limit: the one definition of each size limit on what a tenant stores (docs/memories.md, "Limits").
-- Characters for text, bytes of the JSON text (jsonb::text) for JSON. A
-- name not listed here is a bug in the caller: null, which a test catches
-- (tests/test_size_limits.py reads every size_limit('...') in db/).
create or replace function membank_private.size_limit(what text)
returns integer
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case what
        when 'fact' then 32768              -- characters of a fact (and of a memory's context)
        when 'json_object' then 65536       -- bytes: metadata, labels, structured_content, filters
        when 'query_text' then 4000         -- characters of a retrieval query
        when 'event_text' then 200000       -- characters of an event's text (append_events, GenerateMemories)
        when 'events' then 1000             -- events per append_events call and per GenerateMemories operation
        when 'session_event' then 1048576   -- bytes of one framework event (append_session_event's payload)
        when 'state_value' then 65536       -- bytes of one state key and its value (session, user: or app:)
        when 'session_state' then 1048576   -- bytes of a session's own state
        when 'user_state' then 1048576      -- bytes of a user's "user:" state (every session of the scope)
        when 'app_state' then 65536         -- bytes of an app's "app:" state (every user of the app reads it)
        when 'state_keys' then 1000         -- keys of a session's own, a user's or an app's state
    end;
$$;

-- name: _raise_invalid: raise 22023 naming the argument, with a hint.
create or replace function membank_private._raise_invalid(
    argument text, message text, hint text
) returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    raise exception '%: %', argument, message
        using errcode = 'invalid_parameter_value', hint = hint,
              detail = format('argument: %s', argument);
end
$$;

-- name: validate_scope: check a scope (and that the caller's role may use it) and return it unchanged.
-- Every API function resolves its scope argument here, so this is where a
-- role bound with bind_role_to_scope is held to its scopes (42501).
create or replace function membank_private.validate_scope(
    scope jsonb, argument text default 'scope'
) returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _key text;
    _value jsonb;
    _count integer := 0;
begin
    if scope is null or jsonb_typeof(scope) <> 'object' then
        perform membank_private._raise_invalid(argument,
            format('must be a JSON object, got %s', coalesce(jsonb_typeof(scope), 'null')),
            'pass an object of string keys to string values, e.g. {"user_id": "u1"}');
    end if;
    for _key, _value in select key, value from jsonb_each(scope) loop
        _count := _count + 1;
        if length(_key) = 0 or length(_key) > 128 then
            perform membank_private._raise_invalid(argument,
                format('key of %s characters is out of range', length(_key)),
                'scope keys are 1 to 128 characters');
        end if;
        if jsonb_typeof(_value) <> 'string' then
            perform membank_private._raise_invalid(argument,
                format('value of key %s must be a string, got %s', to_jsonb(_key), jsonb_typeof(_value)),
                'scope values are strings; nested objects, arrays, numbers and null are not allowed');
        end if;
        if length(_value #>> '{}') = 0 or length(_value #>> '{}') > 1024 then
            perform membank_private._raise_invalid(argument,
                format('value of key %s has %s characters', to_jsonb(_key), length(_value #>> '{}')),
                'scope values are 1 to 1024 characters');
        end if;
    end loop;
    if _count = 0 then
        perform membank_private._raise_invalid(argument, 'must not be empty',
            'a scope names whose memory this is, e.g. {"user_id": "u1"}');
    end if;
    if _count > 16 then
        perform membank_private._raise_invalid(argument, format('has %s keys', _count),
            'a scope has at most 16 keys');
    end if;
    perform membank_private.check_scope_allowed(scope, argument);
    return scope;
end
$$;

-- name: validate_scopes: check a JSON array of scopes (or one scope object).
create or replace function membank_private.validate_scopes(
    scopes jsonb, argument text default 'scope'
) returns jsonb[]
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _result jsonb [];
begin
    if jsonb_typeof(scopes) = 'array' then
        if jsonb_array_length(scopes) = 0 or jsonb_array_length(scopes) > 16 then
            perform membank_private._raise_invalid(argument,
                format('lists %s scopes', jsonb_array_length(scopes)),
                'pass one scope object, or an array of 1 to 16 scope objects');
        end if;
        select array_agg(membank_private.validate_scope(s, argument)) into _result
        from jsonb_array_elements(scopes) as s;
        return _result;
    end if;
    return array[membank_private.validate_scope(scopes, argument)];
end
$$;

-- name: is_blank: true for null or text of only white space, control characters and zero-width format characters.
-- The one definition of blank used by every check, and by the embedding
-- claim (a client never decides it: Python's str.strip() also strips
-- U+001C..U+001F, which White_Space does not hold, so a fact SQL took as
-- text would be empty to the embedder and fail the batch it was claimed
-- with): U+0009..U+000D, U+0020, U+0085,
-- U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000
-- (White_Space, Unicode PropList.txt), the other control characters
-- U+0001..U+001F and U+007F..U+009F (general category Cc: they render as
-- nothing), plus U+180E, U+200B..U+200D, U+2060 and U+FEFF (zero-width
-- format characters that render as nothing). pyclient/membank/client.py's
-- BLANK is this set, and tests/test_embedding_batches.py checks both agree.
create or replace function membank_private.is_blank(value text)
returns boolean
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select value is null
           or value ~ '^[\u0001-\u0020\u007f-\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]*$';
$$;

-- name: trim_blank: text without the blank characters of is_blank at either end.
create or replace function membank_private.trim_blank(value text)
returns text
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select regexp_replace(value, '^[\u0001-\u0020\u007f-\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]+|[\u0001-\u0020\u007f-\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]+$', '', 'g');
$$;

-- name: validate_fact: check a natural-language fact.
create or replace function membank_private.validate_fact(
    fact text, argument text default 'fact'
) returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if membank_private.is_blank(fact) then
        perform membank_private._raise_invalid(argument, 'must be non-empty text',
            'a fact is a natural-language statement such as "User is allergic to peanuts"');
    end if;
    if length(fact) > membank_private.size_limit('fact') then
        perform membank_private._raise_invalid(argument,
            format('has %s characters', length(fact)),
            format('a fact is at most %s characters; split long text into several memories',
                   membank_private.size_limit('fact')));
    end if;
    return fact;
end
$$;

-- name: validate_object: check a JSON object argument such as metadata.
create or replace function membank_private.validate_object(
    value jsonb, argument text
) returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if value is null or jsonb_typeof(value) <> 'object' then
        perform membank_private._raise_invalid(argument,
            format('must be a JSON object, got %s', coalesce(jsonb_typeof(value), 'null')),
            'pass an object, e.g. {"source": "chat"}');
    end if;
    if octet_length(value::text) > membank_private.size_limit('json_object') then
        perform membank_private._raise_invalid(argument,
            format('is %s bytes', octet_length(value::text)),
            format('JSON object arguments are at most %s bytes as text', membank_private.size_limit('json_object')));
    end if;
    -- Deeper JSON is stored by PostgreSQL but cannot be read back by common
    -- clients (Python's json module stops at ~1000 levels).
    if jsonb_path_exists(value, 'strict $.**{64 to last}') then
        perform membank_private._raise_invalid(argument, 'is nested more than 64 levels deep',
            'flatten the object; JSON object arguments nest at most 64 levels');
    end if;
    return value;
end
$$;

-- name: validate_topics: check topic labels; returns them sorted and distinct.
create or replace function membank_private.validate_topics(
    topics text[], argument text default 'topics'
) returns text[]
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _topic text;
begin
    if topics is null then
        return '{}';
    end if;
    if array_ndims(topics) > 1 then
        -- unnest and foreach would flatten it silently.
        perform membank_private._raise_invalid(argument,
            format('must be a one-dimensional array, got %s dimensions', array_ndims(topics)),
            'e.g. topics => ''{USER_PREFERENCES,diet}''');
    end if;
    if cardinality(topics) > 32 then
        perform membank_private._raise_invalid(argument,
            format('lists %s topics', cardinality(topics)), 'a memory has at most 32 topics');
    end if;
    foreach _topic in array topics loop
        if _topic is null or length(_topic) = 0 or length(_topic) > 128 then
            perform membank_private._raise_invalid(argument,
                format('holds a topic of %s characters', coalesce(length(_topic)::text, 'null')),
                'topics are labels of 1 to 128 characters, e.g. USER_PREFERENCES');
        end if;
    end loop;
    return array(select distinct t from unnest(topics) as t order by t);
end
$$;

-- name: parse_name: turn a memory name (text) into a uuid or raise 22P02.
create or replace function membank_private.parse_name(
    name text, argument text default 'name', kind text default 'memory'
) returns uuid
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if name is null then
        perform membank_private._raise_invalid(argument, 'must not be null',
            format('pass the name (a uuid) that %s returned',
                   case kind when 'operation' then 'generate_memories' else 'create_memory' end));
    end if;
    return name::uuid;
exception
    when invalid_text_representation then
        raise exception '%: % is not a% % name', argument, to_jsonb(left(name, 80)),
            case when kind ~ '^[aeiou]' then 'n' else '' end, kind
            using errcode = 'invalid_text_representation',
                  hint = format('%s names are uuids such as 0b6c9a4e-3f1d-4a57-9a0e-6f2c1d7b8e90', kind),
                  detail = format('argument: %s', argument);
end
$$;

-- name: max_time: the first instant no stored time may reach (10000-01-01 UTC).
-- PostgreSQL stores times up to 294276 AD and 'infinity', but common
-- clients cannot read them back (Python's datetime ends at year 9999, and
-- psycopg refuses infinity), and one unreadable row would break every read
-- of its scope. So every stored time lies in [0001-01-02, 10000-01-01);
-- "never" is null, never 'infinity'.
create or replace function membank_private.max_time()
returns timestamptz
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select '10000-01-01 00:00:00+00'::timestamptz;
$$;

-- name: resolve_expire_time: combine ttl and expire_time into one instant (null = never; 'infinity' = never).
create or replace function membank_private.resolve_expire_time(
    ttl interval, expire_time timestamptz
) returns timestamptz
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _result timestamptz;
begin
    if ttl is not null and expire_time is not null then
        perform membank_private._raise_invalid('ttl',
            'ttl and expire_time are mutually exclusive', 'give at most one of ttl and expire_time');
    end if;
    if ttl is not null then
        if ttl <= interval '0' then
            perform membank_private._raise_invalid('ttl', format('must be positive, got %s', ttl),
                'e.g. ttl => interval ''30 days''');
        end if;
        if not isfinite(ttl) then
            return null;  -- 'infinity' means never expires, as for expire_time
        end if;
        begin
            _result := statement_timestamp() + ttl;
        exception
            when datetime_field_overflow or interval_field_overflow or numeric_value_out_of_range then
                _result := 'infinity';
        end;
        if _result >= membank_private.max_time() then
            perform membank_private._raise_invalid('ttl', format('%s reaches past year 9999', ttl),
                'expiry times end before 10000-01-01; pass ttl => ''infinity'' (or null) for no expiry');
        end if;
        return _result;
    end if;
    if expire_time is not null and isfinite(expire_time) and expire_time <= statement_timestamp() then
        perform membank_private._raise_invalid('expire_time',
            format('%s is not in the future', expire_time),
            'give a future instant, or ''infinity'' for no expiry');
    end if;
    if expire_time = '-infinity' then
        perform membank_private._raise_invalid('expire_time', '-infinity is not in the future',
            'give a future instant, or ''infinity'' for no expiry');
    end if;
    if isfinite(expire_time) and expire_time >= membank_private.max_time() then
        perform membank_private._raise_invalid('expire_time', format('%s is past year 9999', expire_time),
            'expiry times end before 10000-01-01; pass ''infinity'' (or null) for no expiry');
    end if;
    return nullif(expire_time, 'infinity');
end
$$;

-- name: validate_page_size: check a page size (1..1000).
create or replace function membank_private.validate_page_size(
    page_size integer
) returns integer
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if page_size is null or page_size < 1 or page_size > 1000 then
        perform membank_private._raise_invalid('page_size',
            format('must be between 1 and 1000, got %s', coalesce(page_size::text, 'null')),
            'the default page_size is 100');
    end if;
    return page_size;
end
$$;

-- name: validate_text_array: check an array of short strings (ids): at most max_items, each 1..max_length characters.
create or replace function membank_private.validate_text_array(
    value text[], argument text, max_items integer default 1000, max_length integer default 200
) returns text[]
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if cardinality(value) > max_items then
        perform membank_private._raise_invalid(argument, format('holds %s items', cardinality(value)),
            format('at most %s items', max_items));
    end if;
    if exists (select from unnest(value) as v where v is null or length(v) not between 1 and max_length) then
        perform membank_private._raise_invalid(argument, 'holds a null, empty or over-long item',
            format('each item is 1 to %s characters', max_length));
    end if;
    return value;
end
$$;

-- name: validate_memory_type: check a memory type (null allowed when nullable, e.g. as a filter).
create or replace function membank_private.validate_memory_type(
    memory_type text, nullable boolean default true
) returns text
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if (memory_type is null and not nullable)
       or memory_type not in ('NATURAL_LANGUAGE', 'STRUCTURED_PROFILE') then
        perform membank_private._raise_invalid('memory_type',
            format('unknown memory type %s', coalesce(to_jsonb(memory_type)::text, 'null')),
            'use NATURAL_LANGUAGE (a fact) or STRUCTURED_PROFILE (structured_content)');
    end if;
    return memory_type;
end
$$;

-- name: check_vector: refuse a vector with a null, NaN or infinite entry, or of zero norm (22023 naming it).
-- Cosine distance to a zero vector is NaN, and NaN compares greater than
-- every number in PostgreSQL, so one such vector would pass any threshold.
create or replace function membank_private.check_vector(value real[], argument text)
returns real[]
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if value is null then
        return null;
    end if;
    if exists (select from unnest(value) as x
               where x is null or x = 'NaN'::real or x in ('Infinity'::real, '-Infinity'::real)) then
        perform membank_private._raise_invalid(argument, 'holds null, NaN or infinite entries',
            'pass the finite floats the embedding model returned');
    end if;
    if not exists (select from unnest(value) as x where x <> 0) then
        perform membank_private._raise_invalid(argument, 'has zero norm',
            'a zero vector has no direction, so cosine similarity to it is undefined');
    end if;
    return value;
end
$$;
