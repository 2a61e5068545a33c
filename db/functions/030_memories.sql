-- Memories: create, read, list, update, delete, purge.
-- A memory is visible while expire_time is null or in the future; an
-- expired memory is invisible to every read at once, and
-- membank.purge_expired_memories() removes it later.

-- name: to_memory: the public shape of a stored row.
create or replace function membank_private.to_memory(m membank_private.memories)
returns membank.memory
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select row(m.name, m.scope, m.memory_type, m.fact, m.structured_content, m.topics,
               m.metadata, m.revision, m.create_time, m.update_time, m.expire_time)::membank.memory;
$$;

-- name: is_live: true while a memory has not expired.
-- Queries over many rows spell the same test out inline: a function with a
-- SET clause is never inlined, so it would be called once per row.
create or replace function membank_private.is_live(expire_time timestamptz)
returns boolean
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select expire_time is null or expire_time > statement_timestamp();
$$;

-- name: find_memory: the live memory row, locked FOR UPDATE when asked; else P0002.
create or replace function membank_private.find_memory(
    name text, scope jsonb, lock boolean default false
) returns membank_private.memories
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _name uuid := membank_private.parse_name(name);
    _scope jsonb := case when scope is not null then membank_private.validate_scope(scope) end;
    _scope_id uuid := md5(_scope::text)::uuid;
    _row membank_private.memories;
    _found_scope jsonb;
begin
    -- With scope every statement names its shard (a router query on Citus).
    -- Without, the scope_id is read by name first (index on name; on Citus a
    -- read of every shard) and the lock then taken by scope_id: FOR UPDATE
    -- always comes with scope_id = a constant.
    if lock then
        if _scope_id is null then
            select m.scope_id, m.scope into _scope_id, _found_scope
            from membank_private.memories as m where m.name = _name limit 1;
            -- A memory of a scope the caller may not reach is not found, at
            -- once: its scope's lock is never taken nor waited for (a wait
            -- ending in MB040 told a bound caller that the name exists and
            -- that its scope was busy, where a missing name is P0002 at once).
            if _scope_id is not null and not membank_private.scope_allowed(_found_scope) then
                _scope_id := null;
            end if;
        end if;
        -- The scope's write lock first (015_scope_locks.sql); scope_id never changes.
        if _scope_id is not null and membank_private.distributed() then
            -- Citus: the lock row and the memory row in one router statement
            -- (one round trip to the scope's worker where there were two),
            -- locked in that order (the locking clauses' order): the scope's
            -- lock as lock_scope takes it at once (free, or held by this
            -- transaction), then the memory's row. No row (the lock held by
            -- another transaction, no lock row yet, or no such memory): the
            -- two statements below, lock_scope's bounded wait and MB040 as
            -- on one server.
            perform membank_private.scope_lock_timeout();  -- checked on every call, as lock_scope does
            select m.* into _row
            from membank_private.scope_locks as l
            inner join membank_private.memories as m on m.scope_id = l.scope_id
            where l.scope_id = _scope_id and m.scope_id = _scope_id and m.name = _name
            for update of l skip locked for update of m;
            if _row.name is not null then
                perform membank_private.mark_due(_scope_id, 'embedding');  -- as lock_scope does (121_due_work.sql)
            end if;
        end if;
        if _row.name is null then
            if _scope_id is not null then
                perform membank_private.lock_scope(_scope_id);
            end if;
            select * into _row from membank_private.memories as m
            where m.scope_id = _scope_id and m.name = _name for update;
        end if;
    elsif _scope_id is null then
        select * into _row from membank_private.memories as m where m.name = _name;
    else
        select * into _row from membank_private.memories as m where m.scope_id = _scope_id and m.name = _name;
    end if;
    -- An expired memory, or one of another scope, is reported exactly like a
    -- missing one: the caller learns nothing about names outside its scope.
    -- With scope, validate_scope checked it against the caller's bindings
    -- (42501 when bound elsewhere) and the row must be of that very scope:
    -- the row's scope is asked about only when the caller named none (on
    -- Citus each ask is a read of the reference table bound_roles).
    if _row.name is null
       or not membank_private.is_live(_row.expire_time)
       or (_scope is not null and _row.scope <> _scope)
       or (_scope is null and not membank_private.scope_allowed(_row.scope)) then
        raise exception 'name: memory % not found', _name
            using errcode = 'no_data_found',
                  hint = 'it may never have existed, have been deleted, have expired, or belong to another scope',
                  detail = 'argument: name';
    end if;
    return _row;
end
$$;

-- name: check_revision: compare-and-set: raise MB003 unless the memory is at expected_revision.
create or replace function membank_private.check_revision(
    name uuid, current_revision integer, expected_revision integer
) returns void
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    if expected_revision is not null and expected_revision is distinct from current_revision then
        raise exception 'expected_revision: memory % is at revision %, not %', name, current_revision,
            expected_revision
            using errcode = 'MB003',
                  hint = 'another edit came first and nothing was written: read the memory again, '
                         'then retry with its current revision',
                  detail = 'argument: expected_revision';
    end if;
end
$$;

-- name: first_source_event: the earliest (event time, then arrival) of a memory's source events in its scope.
create or replace function membank_private.first_source_event(scope_id uuid, event_ids text[])
returns membank_private.events
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select e.*
    from membank_private.events as e
    where e.scope_id = first_source_event.scope_id and e.event_id = any(event_ids)
    order by e.event_time, e.append_seq, e.session_id
    limit 1;
$$;

-- name: create_memory: store one memory and its first revision.
create or replace function membank.create_memory(
    scope jsonb,
    fact text default null,
    topics text[] default '{}',
    metadata jsonb default '{}',
    ttl interval default null,
    expire_time timestamptz default null,
    memory_type text default 'NATURAL_LANGUAGE',
    structured_content jsonb default null,
    labels jsonb default '{}',
    source_event_ids text[] default '{}',
    context text default null
) returns membank.memory
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.memories;
    _scope jsonb;
    _scope_id uuid;
    _fact text;
    _content jsonb;
    _topics text[];
    _metadata jsonb;
    _expire timestamptz;
    _context boolean;
    _source membank_private.events;
begin
    perform membank_private.validate_memory_type(memory_type, nullable => false);
    if context is not null and (membank_private.is_blank(context) or length(context) > 32768) then
        perform membank_private._raise_invalid('context',
            format('must be null or 1 to 32768 characters of text, got %s characters', length(context)),
            'the context is the text around the fact, e.g. the conversation turn before it; pass null for none');
    end if;
    if memory_type = 'STRUCTURED_PROFILE' and structured_content = '{}' then
        -- A profile memory with no field is neither readable as a profile nor searchable.
        perform membank_private._raise_invalid('structured_content', 'must hold at least one field, got {}',
            'e.g. structured_content => ''{"diet": "vegetarian"}''');
    end if;
    labels := membank_private.validate_object(labels, 'labels');
    source_event_ids := membank_private.validate_text_array(source_event_ids, 'source_event_ids');
    -- The revision trigger reads labels and sources from the revision
    -- context; with none to pass, and none left set (every writer clears
    -- it), the trigger's defaults are the same: the setting is left alone
    -- (setting and clearing it was a tenth of this call's cost).
    _context := labels <> '{}' or source_event_ids <> '{}'
                or coalesce(current_setting('membank.revision_context', true), '') <> '';
    if _context then
        perform membank_private.set_revision_context(labels, source_event_ids);
    end if;
    -- Validated into variables first: Citus evaluates every function call of
    -- an INSERT ... VALUES on the coordinator, untaken CASE branches included.
    _scope := membank_private.validate_scope(scope);
    _scope_id := md5(_scope::text)::uuid;
    if memory_type = 'NATURAL_LANGUAGE' or fact is not null then
        _fact := membank_private.validate_fact(fact);
    end if;
    if memory_type = 'STRUCTURED_PROFILE' or structured_content is not null then
        _content := membank_private.validate_object(structured_content, 'structured_content');
    end if;
    _topics := membank_private.validate_topics(topics);
    _metadata := membank_private.validate_object(coalesce(metadata, '{}'), 'metadata');
    _expire := membank_private.resolve_expire_time(ttl, expire_time);
    if membank_private.distributed() then
        -- On Citus the INSERT's trigger on the scope's shard takes the
        -- scope's write lock (lock_scope_on_shard, 055_lexicon.sql) before it
        -- locks or writes any row but the new memory's own (which nothing
        -- else can wait for): a statement and a round trip fewer than taking
        -- it here first. The wait limit is checked here, and carried to the
        -- worker's connection when the caller set one.
        perform membank_private.scope_lock_timeout();
        if nullif(btrim(current_setting('membank.lock_timeout', true)), '') is not null then
            perform membank_private.carry_setting('membank.lock_timeout', current_setting('membank.lock_timeout'));
        end if;
    else
        perform membank_private.lock_scope(_scope_id);
    end if;
    if source_event_ids <> '{}' then
        -- where it was said: the earliest of its source events in this scope (session neighbours, 069)
        _source := membank_private.first_source_event(_scope_id, source_event_ids);
    end if;
    insert into membank_private.memories as m (
        scope_id, scope, memory_type, fact, structured_content, topics, metadata, expire_time, context,
        source_session_id, source_event_time, source_append_seq
    ) values (
        _scope_id, _scope, memory_type, _fact, _content, _topics, _metadata, _expire, context,
        _source.session_id, _source.event_time, _source.append_seq
    ) returning * into _row;
    -- The coordinator's index of due work (121_due_work.sql; a no-op on one
    -- server) hears of the embedding job and the expiry, in this
    -- transaction, once the scope's lock is held: a mark waits for the
    -- index row of another writer of the scope until it commits, and on
    -- Citus the lock is only taken by the INSERT (waiting here first would
    -- be a wait that membank.lock_timeout does not bound).
    if membank_private.distributed() then
        perform membank_private.mark_due(_scope_id, 'embedding');
    end if;
    if _expire is not null then
        perform membank_private.mark_due(_scope_id, 'expiry', _expire);
    end if;
    if _context then
        perform membank_private.clear_revision_context();
    end if;
    return membank_private.to_memory(_row);
end
$$;

comment on function membank.create_memory(
    jsonb, text, text[], jsonb, interval, timestamptz, text, jsonb, jsonb, text[], text
) is
$$Create one memory in an exact scope and record revision 1 (action CREATED).
Arguments: scope jsonb object of 1..16 string keys (1..128 chars) to string values (1..1024 chars), e.g. {"user_id":"u1"};
fact text 1..32768 chars (required for NATURAL_LANGUAGE); topics text[] (at most 32 labels, stored sorted and distinct);
metadata jsonb object (<= 64 KiB); ttl interval > 0 or expire_time timestamptz in the future (not both; none = never expires);
memory_type NATURAL_LANGUAGE | STRUCTURED_PROFILE (the latter needs structured_content, a JSON object);
labels jsonb object and source_event_ids text[] (at most 1000 ids of 1..200 characters) are kept on the revision;
context text 1..32768 chars or null: the text around the fact where it was said (e.g. the conversation turn before
it), which retrieval searches but never returns: it is embedded with the fact (context, newline, fact) and its words
match the text leg at half the weight of the fact's own words (Anthropic, "Introducing Contextual Retrieval", 2024).
It is kept for the memory's life (update_memory changes the fact, not the context) and erased with the memory.
The earliest of source_event_ids stored in the scope's sessions (append_events) places the memory in its session:
retrieval's session neighbours (neighbour_weight of retrieve_memories) are the memories placed just before and after.
Times end before 10000-01-01: a ttl or expire_time past year 9999 is refused; ttl => 'infinity' and
expire_time => 'infinity' both mean never expires (stored as null). Returns membank.memory. Raises 22023 (invalid_parameter_value) naming the argument, with a hint; nothing is written on error.$$;

-- name: get_memory: one live memory by name.
create or replace function membank.get_memory(
    name text, scope jsonb default null
) returns membank.memory
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
    select membank_private.to_memory(membank_private.find_memory(name, scope));
$$;

comment on function membank.get_memory(text, jsonb) is
$$Return the live memory called name (uuid as text). With scope, the memory must belong to exactly that scope.
Raises 22P02 for a malformed name, P0002 (no_data_found) when the memory does not exist, was deleted, has expired
or belongs to another scope (the four are indistinguishable on purpose).$$;

-- name: page_token: opaque keyset position after (create_time, name).
create or replace function membank_private.page_token(create_time timestamptz, name uuid)
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select translate(encode(convert_to(jsonb_build_object('t', create_time, 'n', name)::text, 'UTF8'),
                            'base64'), E'+/\n', '-_');
$$;

-- name: parse_page_token: (create_time, name) from a page token, or 22023.
create or replace function membank_private.parse_page_token(
    page_token text, out create_time timestamptz, out name uuid
)
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _token jsonb;
begin
    _token := convert_from(decode(translate(page_token, '-_', '+/'), 'base64'), 'UTF8')::jsonb;
    create_time := (_token ->> 't')::timestamptz;
    name := (_token ->> 'n')::uuid;
    if create_time is null or name is null then
        raise exception using errcode = 'invalid_text_representation';
    end if;
exception
    when others then
        perform membank_private._raise_invalid('page_token', 'is not a token returned by list_memories',
            'pass next_page_token from the last row of the previous page, or null for the first page');
end
$$;

-- name: list_memories: live memories of exact scopes, keyset-paged, filtered.
create or replace function membank.list_memories(
    scope jsonb,
    page_size integer default 100,
    page_token text default null,
    metadata_filter jsonb default null,
    topics text[] default null,
    memory_type text default null,
    created_after timestamptz default null,
    created_before timestamptz default null,
    updated_after timestamptz default null,
    updated_before timestamptz default null
) returns setof membank.memory_page_item
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scopes jsonb [] := membank_private.validate_scopes(scope);
    _scope_ids uuid [] := array(select md5(s::text)::uuid from unnest(_scopes) as s);
    _size integer := membank_private.validate_page_size(page_size);
    _after_time timestamptz := '-infinity';
    _after_name uuid := '00000000-0000-0000-0000-000000000000';
    _topics text [] := case when topics is not null then membank_private.validate_topics(topics) end;
begin
    perform membank_private.validate_memory_type(memory_type);
    if metadata_filter is not null then
        perform membank_private.validate_object(metadata_filter, 'metadata_filter');
    end if;
    -- An empty range is a caller's mistake (swapped bounds), not an empty page.
    if created_after > created_before then
        perform membank_private._raise_invalid('created_after', 'is after created_before',
            'the range is (created_after, created_before): memories created after the one and before the other');
    end if;
    if updated_after > updated_before then
        perform membank_private._raise_invalid('updated_after', 'is after updated_before',
            'the range is (updated_after, updated_before): memories updated after the one and before the other');
    end if;
    if page_token is not null then
        select t.create_time, t.name into _after_time, _after_name
        from membank_private.parse_page_token(page_token) as t;
    end if;
    return query
    with page as (
        select m.*
        from membank_private.memories as m
        where m.scope_id = any(_scope_ids)
          and m.scope = any(_scopes)
          and (m.expire_time is null or m.expire_time > statement_timestamp())
          and (m.create_time, m.name) > (_after_time, _after_name)
          and (metadata_filter is null or m.metadata @> metadata_filter)
          and (_topics is null or m.topics && _topics)
          -- Profile fields only when asked for (as Memory Bank does): retrieve_profiles reads them.
          and m.memory_type = coalesce(list_memories.memory_type, 'NATURAL_LANGUAGE')
          and (created_after is null or m.create_time > created_after)
          and (created_before is null or m.create_time < created_before)
          and (updated_after is null or m.update_time > updated_after)
          and (updated_before is null or m.update_time < updated_before)
        order by m.create_time, m.name
        limit _size + 1
    ), numbered as (
        select p.*, row_number() over (order by p.create_time, p.name) as rn, count(*) over () as n
        from page as p
    )
    select x.name, x.scope, x.memory_type, x.fact, x.structured_content, x.topics, x.metadata,
           x.revision, x.create_time, x.update_time, x.expire_time,
           case when x.rn = _size and x.n > _size
                then membank_private.page_token(x.create_time, x.name) end
    from numbered as x
    where x.rn <= _size
    order by x.rn;
end
$$;

comment on function membank.list_memories(
    jsonb, integer, text, jsonb, text[], text, timestamptz, timestamptz, timestamptz, timestamptz
) is
$$List the live memories of one exact scope (a JSON object) or of several exact scopes
(a JSON array of up to 16 objects), oldest first, keyset-paged by (create_time, name). Scopes match exactly: same keys and values, key order irrelevant,
never a prefix. page_size 1..1000 (default 100); page_token is next_page_token from the last row of the previous page,
non-null only when more rows follow. Filters: metadata_filter (JSON object, containment @>), topics (any of),
memory_type (default NATURAL_LANGUAGE: STRUCTURED_PROFILE field memories are listed only when asked for),
created_/updated_ after/before (exclusive bounds; an after later than its before is refused).
Raises 22023 naming the argument (bad scope, page_size, page_token, metadata_filter, topics, memory_type,
created_after or updated_after).$$;

-- name: update_memory: change only the given fields; one new revision.
create or replace function membank.update_memory(
    name text,
    fact text default null,
    topics text[] default null,
    metadata jsonb default null,
    ttl interval default null,
    expire_time timestamptz default null,
    structured_content jsonb default null,
    scope jsonb default null,
    labels jsonb default '{}',
    source_event_ids text[] default '{}',
    expected_revision integer default null
) returns membank.memory
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.memories;
    _new membank_private.memories;
    _context boolean;
begin
    if num_nulls(fact, topics, metadata, ttl, expire_time, structured_content) = 6 then
        perform membank_private._raise_invalid('fact',
            'nothing to update: fact, topics, metadata, ttl, expire_time and structured_content are all null',
            'give at least one field to change; fields left null keep their value');
    end if;
    _row := membank_private.find_memory(name, scope, lock => true);
    perform membank_private.check_revision(_row.name, _row.revision, expected_revision);
    _new := _row;
    if fact is not null then
        _new.fact := membank_private.validate_fact(fact);
    end if;
    if topics is not null then
        _new.topics := membank_private.validate_topics(topics);
    end if;
    if metadata is not null then
        _new.metadata := membank_private.validate_object(metadata, 'metadata');
    end if;
    if structured_content is not null then
        _new.structured_content := membank_private.validate_object(structured_content, 'structured_content');
    end if;
    if ttl is not null or expire_time is not null then
        _new.expire_time := membank_private.resolve_expire_time(ttl, expire_time);
    end if;
    perform membank_private.validate_object(labels, 'labels');
    perform membank_private.validate_text_array(source_event_ids, 'source_event_ids');
    if (_new.fact, _new.topics, _new.metadata, _new.structured_content, _new.expire_time)
       is not distinct from
       (_row.fact, _row.topics, _row.metadata, _row.structured_content, _row.expire_time) then
        return membank_private.to_memory(_row);  -- nothing changed: no revision
    end if;
    if _new.expire_time is not null and _new.expire_time is distinct from _row.expire_time then
        perform membank_private.mark_due(_row.scope_id, 'expiry', _new.expire_time);  -- Citus: 121_due_work.sql
    end if;
    -- As in create_memory: with no labels or sources to pass and no context
    -- left set, the revision trigger's defaults are the same, so the setting
    -- is left alone (on Citus each set and clear is a SET LOCAL sent to the
    -- scope's worker: two of this call's shard commands).
    _context := labels <> '{}' or source_event_ids <> '{}'
                or coalesce(current_setting('membank.revision_context', true), '') <> '';
    if _context then
        perform membank_private.set_revision_context(labels, source_event_ids);
    end if;
    update membank_private.memories as m
    set fact = _new.fact, topics = _new.topics, metadata = _new.metadata,
        structured_content = _new.structured_content, expire_time = _new.expire_time
    where m.scope_id = _row.scope_id and m.name = _row.name
    returning * into _new;
    if _context then
        perform membank_private.clear_revision_context();
    end if;
    return membank_private.to_memory(_new);
end
$$;

comment on function membank.update_memory(
    text, text, text[], jsonb, interval, timestamptz, jsonb, jsonb, jsonb, text[], integer
) is
$$Update a live memory: only the arguments given (non-null) change; a new revision (action UPDATED)
records the old and new fact. ttl or expire_time reset the expiry (expire_time => 'infinity' removes it). With scope, the memory must be in that
exact scope. An update that changes nothing writes no revision and returns the memory as it is.
expected_revision (compare-and-set): when given, the update happens only if the memory is still at that revision.
Raises 22P02 (malformed name), P0002 (not found, deleted, expired or other scope), 22023 naming the argument,
MB003 (the memory is no longer at expected_revision; nothing written), MB040 (scope lock wait over membank.lock_timeout; retry).$$;

-- name: delete_memory: remove a live memory; its revisions stay readable.
create or replace function membank.delete_memory(
    name text, scope jsonb default null, labels jsonb default '{}', expected_revision integer default null
) returns membank.memory
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _row membank_private.memories := membank_private.find_memory(name, scope, lock => true);
    _context boolean;
begin
    perform membank_private.check_revision(_row.name, _row.revision, expected_revision);
    -- As in create_memory: the setting only when there is something to pass
    -- or a context to replace (on Citus each set and clear is a shard command).
    _context := membank_private.validate_object(labels, 'labels') <> '{}'
                or coalesce(current_setting('membank.revision_context', true), '') <> '';
    if _context then
        perform membank_private.set_revision_context(labels);
    end if;
    delete from membank_private.memories as m where m.scope_id = _row.scope_id and m.name = _row.name;
    if _context then
        perform membank_private.clear_revision_context();
    end if;
    return membank_private.to_memory(_row);
end
$$;

comment on function membank.delete_memory(text, jsonb, jsonb, integer) is
$$Delete a live memory and record a revision with action DELETED; returns the memory as it was.
Its revisions stay readable through list_revisions/get_revision. With scope, the memory must be in that exact scope.
expected_revision (compare-and-set): when given, the memory is deleted only if it is still at that revision.
Raises 22P02 (malformed name), P0002 (not found, already deleted, expired or other scope),
MB003 (no longer at expected_revision; nothing written), MB040 (scope lock wait over membank.lock_timeout; retry).$$;

-- name: purge_memories: delete (or with force => false only count) a scope's live memories matching a filter.
create or replace function membank.purge_memories(
    scope jsonb,
    metadata_filter jsonb default null,
    topics text[] default null,
    force boolean default false
) returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _topics text [] := case when topics is not null then membank_private.validate_topics(topics) end;
    _count bigint;
begin
    if metadata_filter is not null then
        perform membank_private.validate_object(metadata_filter, 'metadata_filter');
    end if;
    if force is null then
        perform membank_private._raise_invalid('force', 'must be true or false',
            'force => false (default) only counts; force => true deletes');
    end if;
    perform membank_private.lock_scope(md5(_scope::text)::uuid);
    perform membank_private.set_revision_context(jsonb_build_object('reason', 'purge'));
    with target as (
        select m.name
        from membank_private.memories as m
        where m.scope_id = md5(_scope::text)::uuid
          and m.scope = _scope
          and (m.expire_time is null or m.expire_time > statement_timestamp())
          and (metadata_filter is null or m.metadata @> metadata_filter)
          and (_topics is null or m.topics && _topics)
        order by m.name
        for update
    ), purged as (
        delete from membank_private.memories as m
        using target as t
        where force and m.name = t.name
        returning 1
    )
    select case when force then (select count(*) from purged) else (select count(*) from target) end
    into _count;
    if force then
        -- Memories deleted earlier that match are purged too (their text goes; 085_erasure.sql).
        perform membank_private.forget_deleted_memories(md5(_scope::text)::uuid, _scope, metadata_filter, _topics);
    end if;
    perform membank_private.clear_revision_context();
    return _count;
end
$$;

comment on function membank.purge_memories(jsonb, jsonb, text[], boolean) is
$$Delete every live memory of one exact scope that matches the filters (metadata_filter: JSON object, containment;
topics: any of). With force => false (the default) nothing is deleted and the count of matching memories is returned;
with force => true they are deleted, each with a DELETED revision labelled {"reason":"purge"}, and the count deleted is
returned; their text is destroyed wherever it is stored (revisions, the events they came from, operations), and so is
the text of the scope's memories deleted earlier (delete_memory) that match the filters by their last revision: a
purge ends their rollback window. Other scopes are never touched. Raises 22023 naming the argument.$$;
