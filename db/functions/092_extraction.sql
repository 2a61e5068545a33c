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

-- name: extraction_reply_schema: the JSON schema of an extraction reply (memories; profiles when asked).
create or replace function membank_private.extraction_reply_schema(o membank_private.operations)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case when o.options ? 'profile_schemas'
                then jsonb_set(membank_private.extraction_schema(), '{properties,profiles}',
                               membank_private.profile_reply_schema(o.options -> 'profile_schemas'))
                else membank_private.extraction_schema() end;
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

-- name: token_budget: the most tokens one model call's prompt may hold (setting membank.max_prompt_tokens).
create or replace function membank_private.token_budget()
returns integer
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _setting text := nullif(btrim(current_setting('membank.max_prompt_tokens', true)), '');
begin
    if _setting is null then
        return 8000;
    end if;
    if _setting !~ '^\d{1,9}$' or _setting::integer not between 1000 and 1000000 then
        perform membank_private._raise_invalid('membank.max_prompt_tokens',
            format('must be an integer between 1000 and 1000000, got %s', to_jsonb(_setting)),
            'e.g. alter database mydb set membank.max_prompt_tokens = 8000 (the default)');
    end if;
    return _setting::integer;
end
$$;

-- name: estimate_tokens: an upper estimate of a text's tokens: UTF-8 bytes / 3, rounded up.
-- cl100k_base and Gemini's tokenizers give about 4 bytes per English token
-- and 3 per CJK character; bytes / 3 errs on the long side, so a prompt cut
-- to the estimate stays within the real budget.
create or replace function membank_private.estimate_tokens(t text)
returns integer
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select ceil(coalesce(octet_length(t), 0) / 3.0)::integer;
$$;

-- name: split_text: a text cut on sentence boundaries into pieces of at most max_tokens (estimate_tokens).
-- A sentence longer than max_tokens on its own is cut between characters.
create or replace function membank_private.split_text(t text, max_tokens integer)
returns text[]
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _pieces text [] := '{}';
    _current text := '';
    _sentence text;
    _chars integer;
begin
    if membank_private.estimate_tokens(t) <= max_tokens then
        return array[t];
    end if;
    -- Sentence ends: . ! ? followed by space, a line break, or CJK 。！？ (no space after them).
    for _sentence in
        select s from regexp_split_to_table(t, '(?<=[.!?])\s+|(?<=[。！？])|\n+') as s where s <> ''
    loop
        while membank_private.estimate_tokens(_sentence) > max_tokens loop
            if _current <> '' then
                _pieces := _pieces || _current;
                _current := '';
            end if;
            _chars := greatest(1, (max_tokens * 3 * length(_sentence)) / octet_length(_sentence));
            while _chars > 1 and membank_private.estimate_tokens(left(_sentence, _chars)) > max_tokens loop
                _chars := _chars - greatest(1, _chars / 20);
            end loop;
            _pieces := _pieces || left(_sentence, _chars);
            _sentence := substr(_sentence, _chars + 1);
        end loop;
        if _current = '' then
            _current := _sentence;
        elsif membank_private.estimate_tokens(_current || ' ' || _sentence) <= max_tokens then
            _current := _current || ' ' || _sentence;
        else
            _pieces := _pieces || _current;
            _current := _sentence;
        end if;
    end loop;
    if _current <> '' then
        _pieces := _pieces || _current;
    end if;
    return _pieces;
end
$$;

-- name: event_line: one event as the extraction prompt shows it: [event_id] time author: text.
create or replace function membank_private.event_line(e jsonb)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select format('[%s] %s %s%s: %s', e ->> 'event_id', membank_private.describe_time(e ->> 'timestamp'),
                  e ->> 'author',
                  case when e ? 'part' then format(' (part %s of %s)', e ->> 'part', e ->> 'parts') else '' end,
                  e ->> 'text');
$$;

-- name: extraction_prompt: the extraction prompt for one batch of an operation's events, with its topics and examples.
create or replace function membank_private.extraction_prompt(o membank_private.operations, events jsonb)
returns text
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select concat_ws(E'\n',
        case when (o.options ->> 'disable_natural_language_memories')::boolean then
            'You fill structured profiles about the participants from a conversation. Write no free-text memories: '
            || 'reply "memories": [].' || membank_private.profile_prompt(o.options -> 'profile_schemas')
        else concat_ws(E'\n',
        'You extract long-term memories about the participants from a conversation.',
        'Keep only information that matches one of these topics:',
        (select string_agg(format('- %s: %s', t ->> 'label', t ->> 'description'), E'\n' order by n)
         from jsonb_array_elements(o.options -> 'topics') with ordinality as x (t, n)),
        '',
        'Rules:',
        '- Write each memory as one self-contained sentence in the third person that names the speaker '
        || '(e.g. "Alice adopted a dog named Max"). For the author "user" write "The user".',
        '- Write each memory in the language the speaker used; do not translate it.',
        '- Resolve relative time against the speaker''s local date of the event in which it was said (its '
        || 'timestamp and UTC offset below), never against today: said on 2023-05-24, "yesterday" is 2023-05-23, "last week" is the week of 2023-05-17, '
        || '"last year" is 2022, "currently" or "now" means as of 2023-05-24, and "last session" means the '
        || 'conversation before that date. Write absolute dates (YYYY-MM-DD).',
        '- When a speaker corrects or changes something said earlier, keep what was said last.',
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
        membank_private.profile_prompt(o.options -> 'profile_schemas'))
        end,
        '',
        'Conversation (one event per line: [event_id] timestamp author: text):',
        (select string_agg(membank_private.event_line(e), E'\n' order by n)
         from jsonb_array_elements(events) with ordinality as x (e, n)),
        '',
        'Reply with JSON only, of the form {"memories": [{"fact": "...", "topics": ["..."], '
        || '"source_event_ids": ["..."]}]'
        || case when o.options ? 'profile_schemas'
                then ', "profiles": {"<schema id>": {"<field>": {"value": ..., "context": "...", '
                     || '"source_event_ids": ["..."]}}}' else '' end
        || '}; {"memories": []} when nothing should be remembered.'
    );
$$;

-- name: extraction_batches: an operation's events cut into batches whose prompts stay within token_budget.
-- Events keep their order; an event too long for one prompt is split on
-- sentence boundaries into parts that keep its event_id (split_text). The
-- budget is for the whole prompt: instructions, topics and examples first.
create or replace function membank_private.extraction_batches(o membank_private.operations, token_budget integer)
returns jsonb
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _room integer := greatest(token_budget - membank_private.estimate_tokens(
                                  membank_private.extraction_prompt(o, '[]')), 200);
    _batches jsonb := '[]';
    _batch jsonb := '[]';
    _used integer := 0;
    _event jsonb;
    _piece jsonb;
    _pieces text [];
    _cost integer;
    _k integer;
begin
    for _event in select e from jsonb_array_elements(o.source_events) as e loop
        -- The line around the text ([id] time author (part k of n): ) counts too.
        _pieces := membank_private.split_text(_event ->> 'text', _room - membank_private.estimate_tokens(
            membank_private.event_line(_event || '{"text": "", "part": 999, "parts": 999}')) - 1);
        for _k in 1 .. cardinality(_pieces) loop
            _piece := _event || jsonb_build_object('text', _pieces[_k]);
            if cardinality(_pieces) > 1 then
                _piece := _piece || jsonb_build_object('part', _k, 'parts', cardinality(_pieces));
            end if;
            _cost := membank_private.estimate_tokens(membank_private.event_line(_piece)) + 1;
            if _used + _cost > _room and jsonb_array_length(_batch) > 0 then
                _batches := _batches || jsonb_build_array(_batch);
                _batch := '[]';
                _used := 0;
            end if;
            _batch := _batch || jsonb_build_array(_piece);
            _used := _used + _cost;
        end loop;
    end loop;
    if jsonb_array_length(_batch) > 0 then
        _batches := _batches || jsonb_build_array(_batch);
    end if;
    return _batches;
end
$$;

-- name: accept_extracted_facts: validate one batch's extraction reply item by item; returns the accepted facts.
-- known: the facts accepted from earlier batches of the operation; a fact
-- among them (same text, case-insensitive) is not repeated. Items under
-- "not_extracted" ([{"source_event_ids", "reason"}]: what a provider read but
-- could not extract, e.g. a language it does not handle) are kept as
-- rejected items with their reason.
create or replace function membank_private.accept_extracted_facts(
    o membank_private.operations, reply jsonb, events jsonb, known jsonb default '[]'
) returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _items jsonb := membank_private.reply_items(reply, 'memories');
    _labels text [] := array(select t ->> 'label' from jsonb_array_elements(o.options -> 'topics') as t);
    _event_ids text [] := array(select distinct e ->> 'event_id' from jsonb_array_elements(events) as e);
    _item jsonb;
    _fact text;
    _topics text [];
    _sources text [];
    _unknown text [];
    _accepted jsonb := '[]';
    _retired uuid;
    _keys text [] := array(select lower(f ->> 'fact') from jsonb_array_elements(coalesce(known, '[]')) as f);
    -- A scope with no retired sources retires nothing: retired_by (a digest
    -- per source event, a look-up each) is asked only where it can answer.
    _any_retired boolean := exists (select from membank_private.retired_sources as r where r.scope_id = o.scope_id);
begin
    if _items is null then
        return null;  -- not the shape asked for: the caller fails the operation
    end if;
    if jsonb_typeof(reply) = 'object' and jsonb_typeof(reply -> 'not_extracted') = 'array' then
        for _item in select i from jsonb_array_elements(reply -> 'not_extracted') as i loop
            perform membank_private.reject_item(o.name, 'EXTRACT', _item - 'reason',
                coalesce(left(_item ->> 'reason', 500), 'not extracted (no reason given)'));
        end loop;
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
            _sources := _event_ids;  -- unattributed: all events of the batch are its source
        end if;
        if lower(_fact) = any(_keys) then
            continue;  -- the same fact twice in one operation
        end if;
        _retired := case when _any_retired then membank_private.retired_by(o.scope_id, events, _sources) end;
        if _retired is not null then
            -- A deleted memory does not come back from the events it came
            -- from (085_erasure.sql); the item keeps no text of it.
            perform membank_private.reject_item(o.name, 'EXTRACT',
                jsonb_build_object('source_event_ids', to_jsonb(_sources), 'memory_name', _retired),
                format('source_event_ids: %s were the source of memory %s, which was deleted; a deleted memory is '
                       'created again only from a new event', array_to_string(_sources, ', '), _retired));
            continue;
        end if;
        _keys := _keys || lower(_fact);
        _accepted := _accepted || jsonb_build_array(jsonb_build_object(
            'fact', _fact, 'topics', to_jsonb(_topics), 'source_event_ids', to_jsonb(_sources),
            'event_time', (select max((e ->> 'timestamp')::timestamptz)
                           from jsonb_array_elements(events) as e
                           where e ->> 'event_id' = any(_sources))));
        if jsonb_array_length(_accepted) >= 100 then
            exit;
        end if;
    end loop;
    return _accepted;
end
$$;
