-- Argument validation shared by the API. Every check raises a SQLSTATE, a
-- message that names the argument, and a hint, before anything is written.
-- Limits (also in README.md, "Limits"):
--   scope: a JSON object of 1..16 keys; keys 1..128 characters; values
--          strings of 1..1024 characters. NUL cannot occur: PostgreSQL
--          text and jsonb reject it on input (SQLSTATE 22P05 / 54000).
--   fact: 1..32768 characters, not only whitespace.
--   topics: at most 32, each 1..128 characters.
--   metadata: a JSON object of at most 65536 bytes as text.

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
    if fact is null or btrim(fact, E' \t\r\n') = '' then
        perform membank_private._raise_invalid(argument, 'must be non-empty text',
            'a fact is a natural-language statement such as "User is allergic to peanuts"');
    end if;
    if length(fact) > 32768 then
        perform membank_private._raise_invalid(argument,
            format('has %s characters', length(fact)),
            'a fact is at most 32768 characters; split long text into several memories');
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
    if octet_length(value::text) > 65536 then
        perform membank_private._raise_invalid(argument,
            format('is %s bytes', octet_length(value::text)),
            'JSON object arguments are at most 65536 bytes as text');
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

-- name: resolve_expire_time: combine ttl and expire_time into one instant.
create or replace function membank_private.resolve_expire_time(
    ttl interval, expire_time timestamptz
) returns timestamptz
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
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
        return statement_timestamp() + ttl;
    end if;
    if expire_time is not null and expire_time <> 'infinity' and expire_time <= statement_timestamp() then
        perform membank_private._raise_invalid('expire_time',
            format('%s is not in the future', expire_time),
            'give a future instant, or ''infinity'' for no expiry');
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
