-- Chat messages in: OpenAI-style messages (as mem0's add takes them) become
-- events of a session and a GenerateMemories operation, in SQL, so callers
-- in any language get the same mapping:
-- * role -> author (user, assistant, system, developer, tool);
-- * content: a string, or parts of which the text parts ({"type": "text",
--   "text"}) are joined by newlines; other parts (images, audio, files,
--   refusals) are skipped and counted;
-- * a missing id is filled with a digest of (position in the request, role,
--   content, timestamp when given), so the same call sent again carries the
--   same ids and stores nothing twice (two identical messages at the same
--   position of two different calls are the same message: give ids to keep
--   them apart); a missing timestamp is now at the database (the
--   statement's time), or the stored event's time on a retry;
-- * system, developer and tool messages are stored but kept out of
--   extraction unless extract_roles names them.

-- name: message_events: OpenAI-style messages as events (22023 naming messages[i].field).
create or replace function membank_private.message_events(scope jsonb, session_id text, messages jsonb)
returns table (event jsonb, role text, skipped_parts integer)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _m jsonb;
    _i integer := 0;
    _arg text;
    _role text;
    _text text;
    _id text;
    _time text;
    _stored timestamptz;
begin
    if messages is null or jsonb_typeof(messages) <> 'array' or jsonb_array_length(messages) not between 1 and 1000 then
        perform membank_private._raise_invalid('messages', 'must be a JSON array of 1 to 1000 messages',
            'e.g. [{"role": "user", "content": "I am vegetarian"}, {"role": "assistant", "content": "Noted."}]');
    end if;
    for _m in select m from jsonb_array_elements(messages) as m loop
        _arg := format('messages[%s]', _i);
        if jsonb_typeof(_m) <> 'object' then
            perform membank_private._raise_invalid(_arg, 'must be a JSON object',
                'each message is {"role": ..., "content": ...}');
        end if;
        _role := _m ->> 'role';
        if jsonb_typeof(_m -> 'role') is distinct from 'string'
           or _role not in ('user', 'assistant', 'system', 'developer', 'tool') then
            perform membank_private._raise_invalid(_arg || '.role',
                format('must be user, assistant, system, developer or tool, got %s',
                       coalesce((_m -> 'role')::text, 'nothing')),
                'OpenAI chat roles; the role becomes the event''s author');
        end if;
        if not _m ? 'content' or (jsonb_typeof(_m -> 'content') = 'null' and not _m ? 'tool_calls') then
            perform membank_private._raise_invalid(_arg || '.content', 'is required',
                'a string, or an array of parts such as {"type": "text", "text": "..."}; null only beside tool_calls');
        end if;
        skipped_parts := 0;
        if jsonb_typeof(_m -> 'content') = 'string' then
            _text := _m ->> 'content';
        elsif jsonb_typeof(_m -> 'content') = 'array' then
            if exists (select from jsonb_array_elements(_m -> 'content') with ordinality as p (part, n)
                       where jsonb_typeof(p.part) <> 'object' or jsonb_typeof(p.part -> 'type') is distinct from 'string'
                          or (p.part ->> 'type' = 'text' and jsonb_typeof(p.part -> 'text') is distinct from 'string'))
            then
                perform membank_private._raise_invalid(_arg || '.content',
                    'parts must be objects with a "type"; a text part has a "text" string',
                    'e.g. [{"type": "text", "text": "..."}, {"type": "image_url", "image_url": {...}}]');
            end if;
            select string_agg(p.part ->> 'text', E'\n' order by p.n) filter (where p.part ->> 'type' = 'text'),
                   count(*) filter (where p.part ->> 'type' <> 'text')
            into _text, skipped_parts
            from jsonb_array_elements(_m -> 'content') with ordinality as p (part, n);
        elsif jsonb_typeof(_m -> 'content') = 'null' then
            _text := null;
        else
            perform membank_private._raise_invalid(_arg || '.content',
                format('must be a string or an array of parts, got %s', jsonb_typeof(_m -> 'content')),
                'e.g. "I am vegetarian" or [{"type": "text", "text": "I am vegetarian"}]');
        end if;
        if _m ? 'id' and (jsonb_typeof(_m -> 'id') <> 'string' or length(_m ->> 'id') not between 1 and 200) then
            perform membank_private._raise_invalid(_arg || '.id', 'must be a string of 1 to 200 characters',
                'leave it out to have it filled from the message (stable across retries)');
        end if;
        if _m ? 'timestamp' and jsonb_typeof(_m -> 'timestamp') <> 'string' then
            perform membank_private._raise_invalid(_arg || '.timestamp', 'must be ISO 8601 text with a zone',
                'e.g. "2024-05-24T10:00:00Z"; leave it out for the database''s now');
        end if;
        _id := coalesce(_m ->> 'id', 'msg-' || md5(jsonb_build_array(_i, _role, _m -> 'content',
                                                                     _m -> 'timestamp')::text));
        _time := _m ->> 'timestamp';
        if _time is null then
            -- A retry keeps the time the first call stored; a new message gets the statement's time.
            select e.event_time into _stored from membank_private.events as e
            where e.scope_id = md5(message_events.scope::text)::uuid and e.session_id = message_events.session_id
              and e.event_id = _id;
            _time := membank_private.local_time_text(coalesce(_stored, statement_timestamp()), interval '0');
        end if;
        event := jsonb_build_object('event_id', _id, 'author', _role, 'text', _text, 'timestamp', _time);
        role := _role;
        return next;
        _i := _i + 1;
    end loop;
end
$$;

-- name: add_messages: mem0-style add: OpenAI-style chat messages in, a GenerateMemories operation out.
create or replace function membank.add_messages(
    scope jsonb,
    messages jsonb,
    session_id text default 'default',
    extract_roles text[] default array['user', 'assistant'],
    topics jsonb default null
) returns membank.added_messages
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _all jsonb;
    _source jsonb;
    _skipped integer;
    _excluded integer;
    _appended integer;
    _name uuid;
    _message text;
    _hint text;
begin
    if extract_roles is null or cardinality(extract_roles) = 0
       or not extract_roles <@ array['user', 'assistant', 'system', 'developer', 'tool'] then
        perform membank_private._raise_invalid('extract_roles',
            'must list some of user, assistant, system, developer, tool',
            'the default is {user,assistant}: system and tool messages are stored but not extracted from');
    end if;
    if session_id is null or length(session_id) not between 1 and 200 then
        perform membank_private._raise_invalid('session_id', 'must be 1 to 200 characters',
            'the session the messages are appended to; the default is "default"');
    end if;
    select jsonb_agg(m.event order by n), jsonb_agg(m.event order by n) filter (where m.role = any(extract_roles)),
           coalesce(sum(m.skipped_parts), 0), count(*) filter (where not m.role = any(extract_roles))
    into _all, _source, _skipped, _excluded
    from membank_private.message_events(_scope, add_messages.session_id, messages) with ordinality as m (event, role,
        skipped_parts, n);
    begin
        perform membank_private.validate_events(_all);
    exception
        when invalid_parameter_value then
            -- The events are the messages in order: name the caller's argument, messages[i].
            get stacked diagnostics _message = message_text, _hint = pg_exception_hint;
            raise exception '%', regexp_replace(_message, '^events', 'messages')
                using errcode = 'invalid_parameter_value', hint = _hint,
                      detail = 'argument: ' || split_part(regexp_replace(_message, '^events', 'messages'), ':', 1);
    end;
    if _skipped > 0 and not exists (select from jsonb_array_elements(_all) as e
                                    where not membank_private.is_blank(e ->> 'text')) then
        -- Only parts membank cannot read (images, audio, files): nothing of the call could ever be remembered.
        perform membank_private._raise_invalid(
            case when jsonb_array_length(_all) = 1 then 'messages[0].content' else 'messages' end,
            format('holds no text, only %s part(s) of other types', _skipped),
            'memories are made from text parts ({"type": "text", "text": "..."}); describe the image in text, '
            || 'or leave such messages out');
    end if;
    _appended := membank.append_events(_scope, add_messages.session_id, _all);
    -- With no message of extract_roles, a done no-op operation (generate_memories itself refuses events => []).
    _name := membank_private.start_generation(scope => _scope, events => coalesce(_source, '[]'),
                                              session_id => add_messages.session_id, topics => topics,
                                              allow_empty_events => true);
    return row(_name, _appended, jsonb_array_length(_all), _excluded, _skipped,
               array(select e ->> 'event_id' from jsonb_array_elements(_all) as e))::membank.added_messages;
end
$$;

comment on function membank.add_messages(jsonb, jsonb, text, text[], jsonb) is
$$Add OpenAI-style chat messages to session session_id (default "default") of an exact scope and start
GenerateMemories over them (mem0's add). messages: a JSON array of 1..1000 {"role": user | assistant | system |
developer | tool (the event's author), "content": a string or an array of parts (text parts {"type": "text", "text"}
joined by newlines; other parts skipped and counted, and a call with no text but such parts is refused; null only beside
"tool_calls"), "id" (optional, 1..200
characters), "timestamp" (optional, ISO 8601 with a zone)}. A missing id is 'msg-' || md5 of (position in this call,
role, content, timestamp), so the same call sent again stores nothing twice and returns the same operation; a missing
timestamp is the statement's time (on a retry, the stored one). Messages of roles not in extract_roles (default
{user,assistant}) are stored but kept out of extraction. topics: as generate_memories. Returns membank.added_messages:
operation_name, appended (new events), messages, excluded_messages (stored, not extracted), skipped_parts, event_ids
(in message order). Raises 22023 naming messages[i].field (role, content, id, timestamp), messages (no text, only other
parts), extract_roles or session_id,
MB020 (an id already stored with other content), 42501 (a role bound to other scopes); nothing is written on error.$$;
