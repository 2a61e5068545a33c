-- Extraction: the prompt SQL assembles for the model, and the validation of
-- what the model returns. Every item the model returns is checked here;
-- an item that fails is rejected with a reason kept on the operation.

-- name: extraction_schema: the JSON schema of an extraction reply.
create or replace function membank_private.extraction_schema()
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select '{"type": "object", "required": ["memories"], "properties": {"memories": {"type": "array",
      "items": {"type": "object", "required": ["fact", "topics", "source_event_ids"], "properties": {
        "fact": {"type": "string"},
        "topics": {"type": "array", "items": {"type": "string"}},
        "source_event_ids": {"type": "array", "items": {"type": "string"}}}}}}}'::jsonb;
$$;

-- name: describe_time: how an event time (local_time_text) is shown to the model: local, its offset, its weekday.
create or replace function membank_private.describe_time(local_time text)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select format('%s %s (%s)', replace(left(local_time, 16), 'T', ' '),
                  case when right(local_time, 1) = 'Z' then 'UTC' else 'UTC' || right(local_time, 6) end,
                  to_char(left(local_time, 10)::date, 'FMDay'));
$$;

-- name: extraction_prompt: the extraction prompt for an operation's events, topics and examples.
create or replace function membank_private.extraction_prompt(o membank_private.operations)
returns text
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select concat_ws(E'\n',
        'You extract long-term memories about the participants from a conversation.',
        'Keep only information that matches one of these topics:',
        (select string_agg(format('- %s: %s', t ->> 'label', t ->> 'description'), E'\n' order by n)
         from jsonb_array_elements(o.options -> 'topics') with ordinality as x (t, n)),
        '',
        'Rules:',
        '- Write each memory as one self-contained sentence in the third person that names the speaker '
        || '(e.g. "Alice adopted a dog named Max"). For the author "user" write "The user".',
        '- Resolve relative time against the speaker''s local date of the event in which it was said (its '
        || 'timestamp and UTC offset below), never against today: said on 2023-05-24, "yesterday" is 2023-05-23, "last week" is the week of 2023-05-17, '
        || '"last year" is 2022, "currently" or "now" means as of 2023-05-24, and "last session" means the '
        || 'conversation before that date. Write absolute dates (YYYY-MM-DD).',
        '- Leave out greetings, small talk, questions and anything the speaker does not state as true.',
        '- Do not repeat one fact twice; do not invent anything.',
        '- topics: the labels above that the memory matches; source_event_ids: the ids of the events it '
        || 'comes from.',
        (select E'\nExamples:\n' || string_agg(
                    'Conversation:' || E'\n' || (select string_agg(format('%s: %s', v ->> 'author', v ->> 'text'),
                                                                   E'\n' order by m)
                                                 from jsonb_array_elements(x.e -> 'events') with ordinality
                                                     as y (v, m))
                    || E'\nMemories: ' || (x.e -> 'facts')::text, E'\n\n' order by x.n)
         from jsonb_array_elements(o.options -> 'examples') with ordinality as x (e, n)
         having count(*) > 0),
        '',
        'Conversation (one event per line: [event_id] timestamp author: text):',
        (select string_agg(format('[%s] %s %s: %s', e ->> 'event_id',
                                  membank_private.describe_time(e ->> 'timestamp'),
                                  e ->> 'author', e ->> 'text'), E'\n' order by n)
         from jsonb_array_elements(o.source_events) with ordinality as x (e, n)),
        '',
        'Reply with JSON only, of the form {"memories": [{"fact": "...", "topics": ["..."], '
        || '"source_event_ids": ["..."]}]}; {"memories": []} when nothing should be remembered.'
    );
$$;

-- name: parse_model_json: a model reply as jsonb (fences, prose, trailing commas repaired); null if invalid.
create or replace function membank_private.parse_model_json(reply text)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _text text := btrim(coalesce(reply, ''), E' \t\r\n\ufeff');
    _start integer;
    _end integer;
begin
    -- A fenced block (```json ... ```): its content.
    if _text ~ '```' then
        _text := coalesce(substring(_text from '```[A-Za-z]*\s*\n?(.*?)```'), _text);
    end if;
    -- Prose around the JSON: from the first { or [ to the last } or ].
    _start := least(nullif(strpos(_text, '{'), 0), nullif(strpos(_text, '['), 0));
    _end := length(_text) - least(nullif(strpos(reverse(_text), '}'), 0), nullif(strpos(reverse(_text), ']'), 0)) + 1;
    if _start is null or _end is null or _end < _start then
        return null;
    end if;
    _text := substr(_text, _start, _end - _start + 1);
    begin
        return _text::jsonb;
    exception
        when others then
            null;
    end;
    -- Trailing commas before } or ] (outside strings in every reply we have seen).
    begin
        return regexp_replace(_text, ',(\s*[}\]])', '\1', 'g')::jsonb;
    exception
        when others then
            return null;
    end;
end
$$;

-- name: accept_extracted_facts: validate an extraction reply item by item; returns the accepted facts.
create or replace function membank_private.accept_extracted_facts(
    o membank_private.operations, reply jsonb
) returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _items jsonb := case jsonb_typeof(reply) when 'array' then reply
                         else coalesce(reply -> 'memories', reply -> 'facts') end;
    _labels text [] := array(select t ->> 'label' from jsonb_array_elements(o.options -> 'topics') as t);
    _event_ids text [] := array(select e ->> 'event_id' from jsonb_array_elements(o.source_events) as e);
    _item jsonb;
    _fact text;
    _topics text [];
    _sources text [];
    _unknown text [];
    _accepted jsonb := '[]';
begin
    if jsonb_typeof(_items) is distinct from 'array' then
        return null;  -- not the shape asked for: the caller fails the operation
    end if;
    for _item in select i from jsonb_array_elements(_items) as i loop
        if jsonb_typeof(_item) = 'string' then
            _item := jsonb_build_object('fact', _item);
        end if;
        _fact := membank_private.trim_blank(_item ->> 'fact');
        if jsonb_typeof(_item) <> 'object' or jsonb_typeof(_item -> 'fact') <> 'string' or _fact = '' then
            perform membank_private.reject_item(o.name, 'EXTRACT', _item, 'fact: must be a non-empty string');
            continue;
        end if;
        if length(_fact) > 32768 then
            perform membank_private.reject_item(o.name, 'EXTRACT', _item, 'fact: longer than 32768 characters');
            continue;
        end if;
        if coalesce(jsonb_typeof(_item -> 'topics'), 'array') <> 'array'
           or coalesce(jsonb_typeof(_item -> 'source_event_ids'), 'array') <> 'array' then
            perform membank_private.reject_item(o.name, 'EXTRACT', _item,
                'topics and source_event_ids: must be arrays of strings');
            continue;
        end if;
        _topics := array(select jsonb_array_elements_text(coalesce(_item -> 'topics', '[]')));
        if cardinality(_topics) > 0 and not _topics && _labels then
            perform membank_private.reject_item(o.name, 'EXTRACT', _item,
                format('topics: none of %s was requested', array_to_string(_topics, ', ')));
            continue;
        end if;
        _topics := array(select t from unnest(_topics) as t where t = any(_labels) order by t);
        _sources := array(select jsonb_array_elements_text(coalesce(_item -> 'source_event_ids', '[]')));
        _unknown := array(select s from unnest(_sources) as s where s <> all(_event_ids));
        if cardinality(_unknown) > 0 then
            perform membank_private.reject_item(o.name, 'EXTRACT', _item,
                format('source_event_ids: %s not among the events of this operation',
                       array_to_string(_unknown, ', ')));
            continue;
        end if;
        if cardinality(_sources) = 0 then
            _sources := _event_ids;  -- unattributed: all events of the operation are its source
        end if;
        if _accepted @> jsonb_build_array(jsonb_build_object('key', lower(_fact))) then
            continue;  -- the same fact twice in one reply
        end if;
        _accepted := _accepted || jsonb_build_array(jsonb_build_object(
            'key', lower(_fact), 'fact', _fact, 'topics', to_jsonb(_topics), 'source_event_ids', to_jsonb(_sources),
            'event_time', (select max((e ->> 'timestamp')::timestamptz)
                           from jsonb_array_elements(o.source_events) as e
                           where e ->> 'event_id' = any(_sources))));
        if jsonb_array_length(_accepted) >= 100 then
            exit;
        end if;
    end loop;
    return (select coalesce(jsonb_agg(a - 'key' order by n), '[]')
            from jsonb_array_elements(_accepted) with ordinality as x (a, n));
end
$$;
