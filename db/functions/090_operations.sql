-- GenerateMemories operations: the request, its validation, and how an
-- operation is shown and finished. The stages that need a model are queued
-- as generation jobs (094_generation_jobs.sql) that a worker carries.

-- name: managed_topics: the four managed topics of Vertex AI Memory Bank with their descriptions.
create or replace function membank_private.managed_topics()
returns jsonb
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select jsonb_build_array(
        jsonb_build_object('label', 'USER_PERSONAL_INFO', 'managed', true, 'description',
            'Significant personal information about the user: names, relationships, family, pets, hobbies, '
            || 'important dates, where they live, work or study.'),
        jsonb_build_object('label', 'USER_PREFERENCES', 'managed', true, 'description',
            'Stated or implied likes, dislikes, favourites, preferred styles or patterns.'),
        jsonb_build_object('label', 'KEY_CONVERSATION_DETAILS', 'managed', true, 'description',
            'Important milestones, decisions, plans and events the user took part in, with their dates.'),
        jsonb_build_object('label', 'EXPLICIT_INSTRUCTIONS', 'managed', true, 'description',
            'What the user explicitly asks the agent to remember, to forget, or to always or never do.')
    );
$$;

-- name: validate_generation_topics: topics as [{label, description, managed}] (22023 naming topics[i]).
create or replace function membank_private.validate_generation_topics(topics jsonb)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _managed jsonb := membank_private.managed_topics();
    _topic jsonb;
    _found jsonb;
    _result jsonb := '[]';
    _i integer := 0;
begin
    if topics is null then
        return _managed;
    end if;
    if jsonb_typeof(topics) <> 'array' or jsonb_array_length(topics) not between 1 and 32 then
        perform membank_private._raise_invalid('topics', 'must be a JSON array of 1 to 32 topics',
            'e.g. ["USER_PREFERENCES", {"label": "diet", "description": "what the user eats"}]; null means the '
            || 'four managed topics');
    end if;
    for _topic in select t from jsonb_array_elements(topics) as t loop
        if jsonb_typeof(_topic) = 'string' then
            select m into _found from jsonb_array_elements(_managed) as m where m ->> 'label' = _topic #>> '{}';
            if _found is null then
                perform membank_private._raise_invalid(format('topics[%s]', _i),
                    format('unknown managed topic %s', _topic),
                    'managed topics are USER_PERSONAL_INFO, USER_PREFERENCES, KEY_CONVERSATION_DETAILS and '
                    || 'EXPLICIT_INSTRUCTIONS; a custom topic is {"label": ..., "description": ...}');
            end if;
        elsif jsonb_typeof(_topic) = 'object'
              and jsonb_typeof(_topic -> 'label') = 'string' and length(_topic ->> 'label') between 1 and 128
              and jsonb_typeof(_topic -> 'description') = 'string'
              and length(_topic ->> 'description') between 1 and 2000 then
            _found := jsonb_build_object('label', _topic ->> 'label', 'description', _topic ->> 'description',
                                         'managed', false);
        else
            perform membank_private._raise_invalid(format('topics[%s]', _i),
                'must be a managed topic name or {"label": 1..128 characters, "description": 1..2000 characters}',
                'e.g. {"label": "travel", "description": "trips the user took or plans"}');
        end if;
        if _result @> jsonb_build_array(jsonb_build_object('label', _found ->> 'label')) then
            perform membank_private._raise_invalid(format('topics[%s]', _i),
                format('repeats the label %s', to_jsonb(_found ->> 'label')), 'each topic label once');
        end if;
        _result := _result || jsonb_build_array(_found);
        _i := _i + 1;
    end loop;
    return _result;
end
$$;

-- name: validate_examples: few-shot examples [{events: [{author, text}], facts: [text]}] (22023).
create or replace function membank_private.validate_examples(examples jsonb)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _example jsonb;
    _i integer := 0;
begin
    if examples is null then
        return '[]';
    end if;
    if jsonb_typeof(examples) <> 'array' or jsonb_array_length(examples) > 10 then
        perform membank_private._raise_invalid('examples', 'must be a JSON array of at most 10 examples',
            'each example is {"events": [{"author": "user", "text": "..."}], "facts": ["..."]}');
    end if;
    for _example in select e from jsonb_array_elements(examples) as e loop
        if jsonb_typeof(_example) <> 'object'
           or jsonb_typeof(_example -> 'events') is distinct from 'array'
           or jsonb_typeof(_example -> 'facts') is distinct from 'array'
           or exists (select from jsonb_array_elements(_example -> 'events') as v
                      where jsonb_typeof(v -> 'author') is distinct from 'string'
                         or jsonb_typeof(v -> 'text') is distinct from 'string')
           or exists (select from jsonb_array_elements(_example -> 'facts') as f
                      where jsonb_typeof(f) <> 'string') then
            perform membank_private._raise_invalid(format('examples[%s]', _i),
                'must be {"events": [{"author": text, "text": text}, ...], "facts": [text, ...]}',
                'an example with "facts": [] shows what not to remember');
        end if;
        _i := _i + 1;
    end loop;
    return examples;
end
$$;

-- name: validate_direct_facts: facts given directly, as [{fact, topics, source_event_ids, event_time}] (22023).
create or replace function membank_private.validate_direct_facts(facts jsonb)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _item jsonb;
    _fact text;
    _topics text [];
    _result jsonb := '[]';
    _i integer := 0;
    _key text;
begin
    if jsonb_typeof(facts) <> 'array' or jsonb_array_length(facts) > 100 then
        perform membank_private._raise_invalid('facts', 'must be a JSON array of at most 100 facts',
            'e.g. ["The user is vegetarian"] or [{"fact": "...", "topics": ["USER_PREFERENCES"]}]');
    end if;
    if jsonb_array_length(facts) = 0 then
        -- Refused rather than a done no-op: facts are given on purpose, so an
        -- empty list is a caller's mistake (and with profile schemas it used
        -- to reach a not-null constraint, 23502).
        perform membank_private._raise_invalid('facts', 'must hold at least one fact, got []',
            'pass the facts to remember, e.g. ["The user is vegetarian"]');
    end if;
    for _item in select f from jsonb_array_elements(facts) as f loop
        if jsonb_typeof(_item) = 'string' then
            _fact := _item #>> '{}';
            _topics := '{}';
        elsif jsonb_typeof(_item) = 'object' and jsonb_typeof(_item -> 'fact') = 'string'
              and coalesce(jsonb_typeof(_item -> 'topics'), 'array') = 'array' then
            if exists (select from jsonb_array_elements(coalesce(_item -> 'topics', '[]')) as t
                       where jsonb_typeof(t) <> 'string') then
                -- jsonb_array_elements_text would turn 1 into the topic "1".
                perform membank_private._raise_invalid(format('facts[%s].topics', _i),
                    'must be an array of strings', 'e.g. {"fact": "...", "topics": ["USER_PREFERENCES"]}');
            end if;
            select k into _key from jsonb_object_keys(_item) as k where k not in ('fact', 'topics') order by k limit 1;
            if _key is not null then
                -- A misspelt "topic" would otherwise be dropped without a word.
                perform membank_private._raise_invalid(format('facts[%s]', _i),
                    format('has the unknown key %s', to_jsonb(_key)),
                    'a fact given directly is a string or {"fact": text, "topics": [text]}');
            end if;
            _fact := _item ->> 'fact';
            _topics := array(select jsonb_array_elements_text(coalesce(_item -> 'topics', '[]')));
        else
            perform membank_private._raise_invalid(format('facts[%s]', _i),
                'must be a string or {"fact": text, "topics": [text]}', 'e.g. "The user lives in Lisbon"');
        end if;
        _result := _result || jsonb_build_array(jsonb_build_object(
            'fact', membank_private.trim_blank(membank_private.validate_fact(_fact, format('facts[%s]', _i))),
            'topics', to_jsonb(membank_private.validate_topics(_topics, format('facts[%s].topics', _i))),
            'source_event_ids', '[]'::jsonb, 'event_time', null));
        _i := _i + 1;
    end loop;
    return _result;
end
$$;

-- name: to_operation: the public shape of an operation row.
create or replace function membank_private.to_operation(o membank_private.operations)
returns membank.operation
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    -- A memory that is no longer live (deleted, expired, purged) is listed
    -- by name, action and times only: its text is never shown, nor a
    -- rejected item that names it (085_erasure.sql).
    select row(o.name, o.scope, o.session_id, o.done, o.error,
               membank_private.redact_generated(o.generated_memories),
               membank_private.redact_rejected(o.rejected_items),
               o.stage, o.model_calls, o.create_time, o.update_time)::membank.operation;
$$;

-- name: finish_operation: mark an operation done (with an error when it failed) and drop its job.
drop function if exists membank_private.finish_operation(uuid, jsonb);
create or replace function membank_private.finish_operation(
    operation_name uuid, error jsonb default null, operation_scope_id uuid default null
)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    -- The operation's scope first, so that each statement below names its shard on Citus: the caller's, who
    -- read the operation (on Citus, finding it again checks the claim's hint with a statement on the worker).
    _scope_id uuid := coalesce(operation_scope_id, membank_private.operation_scope(operation_name));
    _stripped record;
begin
    delete from membank_private.generation_jobs as j
    where j.scope_id = _scope_id and j.operation_name = finish_operation.operation_name;
    if found and membank_private.distributed() then
        perform membank_private.refresh_due(_scope_id, 'generation');  -- the coordinator's index (121_due_work.sql)
    end if;
    -- Done: its inputs lose their text (source events keep a digest), 085_erasure.sql.
    -- Computed, then written: Citus refuses a function over columns in an UPDATE.
    select s.* into _stripped
    from membank_private.operations as x
    cross join lateral membank_private.strip_operation_text(x.source_events, x.facts, x.profile_values) as s
    where x.scope_id = _scope_id and x.name = finish_operation.operation_name;
    update membank_private.operations as o
    set done = true, stage = 'DONE', error = finish_operation.error, update_time = statement_timestamp(),
        source_events = _stripped.source_events, facts = _stripped.facts, profile_values = _stripped.profile_values
    where o.scope_id = _scope_id and o.name = finish_operation.operation_name;
end
$$;

-- name: operation_scope: the scope_id of an operation, by name (on Citus a read of every shard, no lock).
-- An operation whose job this transaction claimed: its scope from the
-- claim's hint (121_due_work.sql), checked on that scope's shard alone.
create or replace function membank_private.operation_scope(operation_name uuid)
returns uuid
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _hint uuid := membank_private.claimed_scope(operation_name::text);
begin
    if _hint is not null
       and exists (select 1 from membank_private.operations as o where o.scope_id = _hint and o.name = operation_name) then
        return _hint;
    end if;
    return (select o.scope_id from membank_private.operations as o where o.name = operation_name);
end
$$;

-- name: reject_item: keep the reason a model's item was not applied on the operation.
create or replace function membank_private.reject_item(
    operation_name uuid, stage text, item jsonb, reason text
) returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope_id uuid := membank_private.operation_scope(operation_name);  -- its shard, on Citus
begin
    update membank_private.operations as o
    set rejected_items = o.rejected_items || jsonb_build_array(jsonb_build_object(
            'stage', reject_item.stage, 'item', reject_item.item, 'reason', reject_item.reason)),
        update_time = statement_timestamp()
    where o.scope_id = _scope_id and o.name = reject_item.operation_name;
end
$$;

-- name: get_operation: one GenerateMemories operation by name.
-- Volatile, so that it sees an operation generate_memories started earlier
-- in the same statement (a stable function reads the statement's snapshot).
create or replace function membank.get_operation(name text, scope jsonb default null)
returns membank.operation
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _name uuid := membank_private.parse_name(name, 'name', 'operation');
    _scope jsonb := case when scope is not null then membank_private.validate_scope(scope) end;
    _row membank_private.operations;
begin
    if _scope is null then
        select * into _row from membank_private.operations as o where o.name = _name;  -- every shard on Citus
    else
        select * into _row from membank_private.operations as o
        where o.scope_id = md5(_scope::text)::uuid and o.name = _name;
    end if;
    -- Another scope's operation is reported exactly like a missing one.
    if _row.name is null or (_scope is not null and _row.scope <> _scope)
       or not membank_private.scope_allowed(_row.scope) then
        raise exception 'name: operation % not found', _name
            using errcode = 'no_data_found', detail = 'argument: name',
                  hint = 'use the name generate_memories returned';
    end if;
    return membank_private.to_operation(_row);
end
$$;

comment on function membank.get_operation(text, jsonb) is
$$The GenerateMemories operation called name (uuid as text); with scope, it must belong to exactly that scope.
done (false while queued or running), error (null, or
{"code", "message"} when it failed and applied nothing further), generated_memories (a JSON array of {"memory": the
memory as stored, "action": CREATED | UPDATED | DELETED}, in the order applied; zero actions with done is a valid
no-op), rejected_items ({"stage", "item", "reason"} for each model item that was not applied), stage (EXTRACT,
CONSOLIDATE, COMPACT or DONE) and model_calls. Raises 22P02 (malformed name), P0002 (no such operation in that scope),
22023 (bad scope).$$;

-- name: list_operations: the operations of a scope, newest first.
create or replace function membank.list_operations(
    scope jsonb, session_id text default null, done boolean default null, max_operations integer default 100
) returns setof membank.operation
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _row membank_private.operations;
begin
    if max_operations is null or max_operations not between 1 and 10000 then
        perform membank_private._raise_invalid('max_operations',
            format('must be between 1 and 10000, got %s', coalesce(max_operations::text, 'null')),
            'the default is 100');
    end if;
    -- Row by row: on Citus a whole row passed to a function inside the query
    -- would arrive on the shard as the shard's row type.
    for _row in
        select o.*
        from membank_private.operations as o
        where o.scope_id = md5(_scope::text)::uuid and o.scope = _scope
          and (list_operations.session_id is null or o.session_id = list_operations.session_id)
          and (list_operations.done is null or o.done = list_operations.done)
        order by o.create_time desc, o.name
        limit max_operations
    loop
        return next membank_private.to_operation(_row);
    end loop;
end
$$;

comment on function membank.list_operations(jsonb, text, boolean, integer) is
$$The GenerateMemories operations of an exact scope, newest first, at most max_operations (1..10000, default 100);
only those of session_id when given, only finished (done => true) or pending (done => false) ones when given.
Raises 22023 naming the argument.$$;
