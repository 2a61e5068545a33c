-- Model replies as real models write them: the JSON value a reply holds.
--
-- A reply is not cut at its first brace. Reasoning models write
-- "<think>...{...}...</think>{json}", chat models "Output for the user:
-- {json}" or an example in one fenced block and the answer in the last.
-- So reasoning blocks are dropped, then every balanced JSON value at depth 0
-- is a candidate, tried last first, and the first that parses (trailing
-- commas and \u0000 escapes repaired) and holds the asked array wins.
-- Used by complete_generation_job (095_generation_jobs.sql) and apply_compaction (096_compaction.sql).

-- name: strip_think: a reply without its reasoning blocks (<think>...</think>, <thinking>...</thinking>).
create or replace function membank_private.strip_think(reply text)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- An unclosed block at the start (a reply cut off in its reasoning) keeps nothing of it.
    select regexp_replace(regexp_replace(reply, '<(think|thinking|reasoning)>.*?</\1>', '', 'gi'),
                          '^\s*<(think|thinking|reasoning)>.*$', '', 'i');
$$;

-- name: json_segments: the balanced {...} and [...] spans of a text at nesting depth 0, in order.
-- Braces inside JSON strings ("...") do not count; quotes outside a span
-- (prose) are ignored. Linear in the text's length.
create or replace function membank_private.json_segments(t text)
returns text[]
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _chars text [] := regexp_split_to_array(t, '');
    _depth integer := 0;
    _in_string boolean := false;
    _escaped boolean := false;
    _start integer;
    _segments text [] := '{}';
    _c text;
    _i integer;
begin
    for _i in 1 .. coalesce(cardinality(_chars), 0) loop
        _c := _chars[_i];
        if _in_string then
            if _escaped then
                _escaped := false;
            elsif _c = '\' then
                _escaped := true;
            elsif _c = '"' then
                _in_string := false;
            end if;
        elsif _c in ('{', '[') then
            if _depth = 0 then
                _start := _i;
            end if;
            _depth := _depth + 1;
        elsif _c in ('}', ']') and _depth > 0 then
            _depth := _depth - 1;
            if _depth = 0 then
                _segments := _segments || array_to_string(_chars[_start:_i], '');
            end if;
        elsif _c = '"' and _depth > 0 then
            _in_string := true;
        end if;
    end loop;
    return _segments;
end
$$;

-- name: try_json: a text as jsonb, trailing commas and \u0000 escapes repaired; null when it is not JSON.
create or replace function membank_private.try_json(t text)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _text text := t;
    _previous text;
begin
    -- jsonb cannot hold U+0000: drop the escape (an even run of backslashes before it is kept).
    loop
        _previous := _text;
        _text := regexp_replace(_text, '(^|[^\\])((\\\\)*)\\u0000', '\1\2', 'gi');
        exit when _text = _previous;
    end loop;
    -- PostgreSQL 16 and later test the text without a subtransaction (an
    -- exception block is one, and on Citus each sends SAVEPOINT and RELEASE
    -- to every worker the transaction has reached). PostgreSQL 15 never runs
    -- this branch, so pg_input_is_valid is never looked up there. A text
    -- that could nest deeper than 1,000 levels (more opening brackets than
    -- that) goes to the block: its parse can exceed the stack depth, a hard
    -- error that pg_input_is_valid raises and the block turns into null.
    if current_setting('server_version_num')::integer >= 160000
       and length(_text) - length(translate(_text, '[{', '')) <= 1000 then
        if pg_input_is_valid(_text, 'jsonb') then
            return _text::jsonb;
        end if;
        _text := regexp_replace(_text, ',(\s*[}\]])', '\1', 'g');
        return case when pg_input_is_valid(_text, 'jsonb') then _text::jsonb end;
    end if;
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

-- name: reply_items: what a parsed reply holds for its kind (memories, actions: the array; summary: the text).
create or replace function membank_private.reply_items(parsed jsonb, kind text)
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case
        when jsonb_typeof(parsed) = 'array' then parsed
        when kind = 'memories' and jsonb_typeof(parsed -> 'memories') = 'array' then parsed -> 'memories'
        when kind = 'memories' and jsonb_typeof(parsed -> 'facts') = 'array' then parsed -> 'facts'
        when kind = 'actions' and jsonb_typeof(parsed -> 'actions') = 'array' then parsed -> 'actions'
        when kind = 'summary' and jsonb_typeof(parsed -> 'summary') = 'string' then parsed -> 'summary'
    end;
$$;

-- name: parse_model_json: the JSON value of a model reply that has the asked shape; null if the reply has no JSON.
-- Real replies wrap the answer: reasoning (<think>{...}</think>), prose
-- ("Output for the user: {...}"), several fenced blocks of which the last
-- is the answer, trailing commas. So the reply is not cut at its first
-- brace: its reasoning blocks are dropped, then each balanced {...} / [...]
-- span at depth 0 is a candidate, tried last first, and the first that
-- parses and holds the items of kind ('memories', 'actions' or 'summary', see
-- reply_items) wins; when none does, the last one that parses (the caller
-- reports the missing array).
create or replace function membank_private.parse_model_json(reply text, kind text)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _text text := btrim(membank_private.strip_think(coalesce(reply, '')), E' \t\r\n\ufeff');
    _parsed jsonb := membank_private.try_json(_text);
    _segments text [];
    _fallback jsonb;
    _i integer;
begin
    if membank_private.reply_items(_parsed, kind) is not null then
        return _parsed;
    end if;
    _segments := membank_private.json_segments(_text);
    for _i in reverse coalesce(cardinality(_segments), 0) .. 1 loop
        _parsed := membank_private.try_json(_segments[_i]);
        if membank_private.reply_items(_parsed, kind) is not null then
            return _parsed;
        end if;
        _fallback := coalesce(_fallback, _parsed);
    end loop;
    return _fallback;
end
$$;
