-- IngestEvents: memory that forms by itself. Events are streamed into a
-- stream (the session of the same id in the same exact scope); generation
-- starts when the stream's trigger fires, as in Vertex AI Memory Bank's
-- IngestEvents (generation_trigger_config.generation_rule: event_count,
-- idle_duration, fixed_interval; force_flush; pending events are flushed at
-- the latest 24 h after the last one).
--
-- SQL decides, the worker carries: whether a stream is due is decided here,
-- from the times its pending events arrived and from its last generation.
-- event_count (and force_flush, and a stream with no rule) fire inside
-- ingest_events itself; idle_duration, fixed_interval and the 24 h flush fire
-- when time passes, so something must look: the worker's loop calls
-- generate_due_streams every poll interval, or, where the database has
-- pg_cron, a job does (cron.schedule('membank-ingest', '* * * * *',
-- 'select count(*) from membank.generate_due_streams()') run as a worker role).
--
-- Exactly once: a stream's watermark (covered_seq, the last append_seq given
-- to an operation) moves in the same transaction that queues the operation,
-- under the stream's row lock, so "due" and "queued" are one commit: a
-- worker killed between them rolls both back and the next sweep finds the
-- stream due again; one killed after the commit left both. The operation's
-- request_id names the stream and the sequence range, a second guard.
-- Appends to a session hold the session's row lock (append_events,
-- append_session_event), so within a session append_seq follows commit order
-- and a watermark never skips an event committed later with a smaller seq.
-- Locks are taken session first, then stream, everywhere.

-- name: parse_trigger_duration: a protobuf JSON duration ("60s", "1.5s") or a number of seconds as an interval.
create or replace function membank_private.parse_trigger_duration(value jsonb, argument text)
returns interval
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _seconds numeric;
begin
    if jsonb_typeof(value) = 'number' then
        _seconds := (value #>> '{}')::numeric;
    elsif jsonb_typeof(value) = 'string' and (value #>> '{}') ~ '^\d{1,9}(\.\d{1,6})?s$' then
        _seconds := rtrim(value #>> '{}', 's')::numeric;
    end if;
    if _seconds is null or _seconds < 1 or _seconds > 86400 then
        perform membank_private._raise_invalid(argument,
            format('must be a duration of 1 s to 24 h, e.g. "60s" or 60, got %s', coalesce(value::text, 'null')),
            'protobuf JSON durations ("300s") or seconds; Vertex AI requires whole minutes, membank does not');
    end if;
    return make_interval(secs => _seconds::double precision);
end
$$;

-- name: validate_trigger_config: {"generation_rule": {one trigger}}, durations as seconds (22023 naming the field).
create or replace function membank_private.validate_trigger_config(config jsonb, argument text)
returns jsonb
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _rule jsonb;
    _key text;
    _count integer;
begin
    if config is null then
        return null;
    end if;
    if jsonb_typeof(config) <> 'object'
       or exists (select from jsonb_object_keys(config) as k where k <> 'generation_rule')
       or jsonb_typeof(config -> 'generation_rule') is distinct from 'object' then
        perform membank_private._raise_invalid(argument,
            'must be {"generation_rule": {"event_count": n} | {"idle_duration": "60s"} | {"fixed_interval": "300s"}}',
            'Vertex AI Memory Bank''s MemoryGenerationTriggerConfig; null uses the stream''s or the bank''s rule');
    end if;
    _rule := config -> 'generation_rule';
    if (select count(*) from jsonb_object_keys(_rule)) <> 1 then
        perform membank_private._raise_invalid(argument || '.generation_rule',
            'must hold exactly one of event_count, idle_duration, fixed_interval',
            'e.g. {"event_count": 6}: generate once six new events have arrived');
    end if;
    _key := (select k from jsonb_object_keys(_rule) as k);
    if _key = 'event_count' then
        if jsonb_typeof(_rule -> 'event_count') <> 'number' or (_rule ->> 'event_count') !~ '^\d+$'
           or (_rule ->> 'event_count')::numeric not between 1 and 1000 then
            perform membank_private._raise_invalid(argument || '.generation_rule.event_count',
                format('must be a whole number from 1 to 1000, got %s', _rule -> 'event_count'),
                'the number of new events that starts a generation');
        end if;
        _count := (_rule ->> 'event_count')::integer;
        return jsonb_build_object('generation_rule', jsonb_build_object('event_count', _count));
    elsif _key in ('idle_duration', 'fixed_interval') then
        return jsonb_build_object('generation_rule', jsonb_build_object(_key, extract(epoch from
            membank_private.parse_trigger_duration(_rule -> _key, format('%s.generation_rule.%s', argument, _key)))));
    end if;
    perform membank_private._raise_invalid(format('%s.generation_rule.%s', argument, _key), 'is not a trigger',
        'the triggers are event_count, idle_duration and fixed_interval');
    return null;
end
$$;

-- name: bank_generation_rule: the bank's default rule (configure_ingestion), or null.
create or replace function membank_private.bank_generation_rule()
returns jsonb
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select s.generation_trigger_config -> 'generation_rule' from membank_private.ingestion_settings as s;
$$;

-- name: stream_trigger: why a stream is due at now (a trigger name), or null when it is not.
create or replace function membank_private.stream_trigger(
    stream membank_private.ingest_streams, bank_rule jsonb, now timestamptz
) returns text
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case
        when stream.pending_events = 0 then null
        when now >= stream.last_event_time + interval '24 hours' then 'flush_after_24h'
        when _rule is null then 'no_rule'
        when _rule ? 'event_count' and stream.pending_events >= (_rule ->> 'event_count')::integer then 'event_count'
        when _rule ? 'idle_duration'
             and now >= stream.last_event_time + make_interval(secs => (_rule ->> 'idle_duration')::double precision)
            then 'idle_duration'
        when _rule ? 'fixed_interval'
             and now >= coalesce(stream.last_generation_time, stream.first_pending_time)
                        + make_interval(secs => (_rule ->> 'fixed_interval')::double precision)
            then 'fixed_interval'
    end
    from (select coalesce(stream.generation_rule, bank_rule) as _rule) as r;
$$;

-- name: refresh_stream: recompute a stream's pending events above its watermark; returns the row.
create or replace function membank_private.refresh_stream(scope_id uuid, stream_id text)
returns membank_private.ingest_streams
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
    update membank_private.ingest_streams as t
    set pending_events = p.n, first_pending_time = p.first_time, last_event_time = p.last_time,
        update_time = statement_timestamp()
    from (select count(*)::integer as n, min(e.append_time) as first_time, max(e.append_time) as last_time
          from membank_private.ingest_streams as s
          inner join membank_private.events as e
              on e.scope_id = s.scope_id and e.session_id = s.stream_id and e.append_seq > s.covered_seq
          where s.scope_id = refresh_stream.scope_id and s.stream_id = refresh_stream.stream_id) as p
    where t.scope_id = refresh_stream.scope_id and t.stream_id = refresh_stream.stream_id
    returning t.*;
$$;

-- name: flush_stream: queue GenerateMemories for a locked stream's uncovered events and move its watermark.
create or replace function membank_private.flush_stream(
    stream membank_private.ingest_streams, trigger_reason text, now timestamptz
)
returns setof membank.due_stream
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
declare
    _last bigint;
    _count integer;
    _chunk jsonb;
    _from bigint;
    _to bigint;
    _name uuid;
begin
    select max(e.append_seq), count(*) into _last, _count
    from membank_private.events as e
    where e.scope_id = stream.scope_id and e.session_id = stream.stream_id and e.append_seq > stream.covered_seq;
    if _last is null then
        return;
    end if;
    -- One operation takes at most 1000 events: cut the uncovered ones in append order.
    for _chunk, _from, _to in
        select jsonb_agg(jsonb_build_object(
                   'event_id', c.event_id, 'author', c.author, 'text', c.text,
                   'timestamp', membank_private.local_time_text(c.event_time, c.utc_offset)) order by c.append_seq),
               min(c.append_seq), max(c.append_seq)
        from (select e.*, (row_number() over (order by e.append_seq) - 1) / 1000 as part
              from membank_private.events as e
              where e.scope_id = stream.scope_id and e.session_id = stream.stream_id
                and e.append_seq > stream.covered_seq and e.append_seq <= _last
                and not membank_private.is_blank(e.text)) as c
        group by c.part
        order by c.part
    loop
        _name := membank.generate_memories(
            scope => stream.scope, events => _chunk, session_id => stream.stream_id,
            request_id => format('ingest:%s:%s-%s', md5(stream.stream_id), _from, _to));
        return next row(stream.scope, stream.stream_id, trigger_reason, _name, _from, _to,
                        jsonb_array_length(_chunk))::membank.due_stream;
    end loop;
    update membank_private.ingest_streams as t
    set covered_seq = _last, last_generation_time = flush_stream.now,
        last_operation_name = coalesce(_name, t.last_operation_name)
    where t.scope_id = stream.scope_id and t.stream_id = stream.stream_id;
    perform membank_private.refresh_stream(stream.scope_id, stream.stream_id);
end
$$;

-- name: ingest_events: IngestEvents: append events to a stream and generate memories when its trigger fires.
create or replace function membank.ingest_events(
    scope jsonb,
    stream_id text default 'default',
    events jsonb default '[]',
    generation_trigger_config jsonb default null,
    force_flush boolean default false
) returns membank.ingestion
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _scope jsonb := membank_private.validate_scope(scope);
    _scope_id uuid := md5(_scope::text)::uuid;
    _rule jsonb := membank_private.validate_trigger_config(generation_trigger_config, 'generation_trigger_config')
                   -> 'generation_rule';
    _appended integer;
    _stream membank_private.ingest_streams;
    _trigger text;
    _queued membank.due_stream;
    _name uuid;
begin
    if force_flush is null then
        perform membank_private._raise_invalid('force_flush', 'must be true or false',
            'true generates from every pending event now, whatever the trigger');
    end if;
    if stream_id is null or length(stream_id) not between 1 and 200 then
        perform membank_private._raise_invalid('stream_id', 'must be 1 to 200 characters',
            'a stream is the session of that id in this scope; the default is "default"');
    end if;
    -- The session's row lock (taken by append_events) orders this call after any other append to it.
    _appended := membank_private.store_events(_scope, ingest_events.stream_id, coalesce(events, '[]'));
    insert into membank_private.ingest_streams as t (scope_id, stream_id, scope, generation_rule)
    values (_scope_id, ingest_events.stream_id, _scope, _rule)
    on conflict on constraint ingest_streams_pkey
    do update set generation_rule = coalesce(excluded.generation_rule, t.generation_rule);
    _stream := membank_private.refresh_stream(_scope_id, ingest_events.stream_id);
    _trigger := case when force_flush and _stream.pending_events > 0 then 'force_flush'
                     else membank_private.stream_trigger(_stream, membank_private.bank_generation_rule(),
                                                         statement_timestamp()) end;
    if _trigger is not null then
        for _queued in select * from membank_private.flush_stream(_stream, _trigger, statement_timestamp()) loop
            _name := _queued.operation_name;
        end loop;
        select * into _stream from membank_private.ingest_streams as t
        where t.scope_id = _scope_id and t.stream_id = ingest_events.stream_id;
    end if;
    return row(_scope, ingest_events.stream_id, _appended, _stream.pending_events, _name, _trigger,
               _stream.last_operation_name)::membank.ingestion;
end
$$;

comment on function membank.ingest_events(jsonb, text, jsonb, jsonb, boolean) is
$$IngestEvents (Vertex AI Memory Bank): append events to the stream stream_id (1..200 characters, default "default") of
an exact scope and start GenerateMemories by itself when the stream's trigger fires. A stream is the session of the
same id in that scope: events (a JSON array as for append_events, [] to only re-check the trigger) are appended to it,
deduplicated by event_id; events appended to that session otherwise (append_events, append_session_event) count too.
generation_trigger_config: {"generation_rule": {"event_count": 1..1000} | {"idle_duration": d} | {"fixed_interval":
d}} with d a protobuf JSON duration ("60s") or seconds, 1 s to 24 h (whole minutes are not required, unlike Vertex AI);
given, it is kept as the stream's rule; null keeps the stream's rule, else the bank's (configure_ingestion), else none.
A generation covers exactly the stream's events not yet covered (a watermark on their append order, moved in the
transaction that queues the operation). event_count: when that many events are pending; idle_duration: when no event
arrived for d; fixed_interval: d after the stream's last generation (or its first pending event) while events are
pending; no rule: at once (as Vertex does without a config); force_flush => true: now. Whatever the rule, pending events
are flushed 24 h after the last one arrived. Times are arrival times (the database clock). event_count, no rule and
force_flush fire inside this call; the others fire in generate_due_streams (the worker's loop, or pg_cron).
Returns membank.ingestion: scope, stream_id, appended (new events), pending_events (not yet covered, after this call),
operation_name (the operation this call queued, else null; a stream of over 1000 pending events queues several, the
last is named), trigger_reason (event_count, force_flush, no_rule, flush_after_24h, or null) and last_operation_name
(the stream's newest operation). Raises 22023 naming the argument (events[i].field, generation_trigger_config...),
42501 (a role bound to other scopes), MB020 (an event_id already stored with other content), MB040 (lock wait);
nothing is written on error.$$;

-- name: generate_due_streams: the sweep: queue GenerateMemories for every stream whose trigger is due at now.
create or replace function membank.generate_due_streams(now timestamptz default null, max_streams integer default 100)
returns setof membank.due_stream
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _now timestamptz := coalesce(now, clock_timestamp());
    _bank_rule jsonb := membank_private.bank_generation_rule();
    _candidate membank_private.ingest_streams;
    _stream membank_private.ingest_streams;
    _trigger text;
    _queued membank.due_stream [];
    _error text;
    _sqlstate text;
begin
    if max_streams is null or max_streams not between 1 and 10000 then
        perform membank_private._raise_invalid('max_streams',
            format('must be between 1 and 10000, got %s', coalesce(max_streams::text, 'null')),
            'the default is 100 streams per call; call again while it returns rows');
    end if;
    perform membank_private.refuse_bound_role('generate_due_streams');
    for _candidate in
        select t.* from membank_private.ingest_streams as t
        -- row(t.*) as the table's type: on a Citus shard t is of the shard's own row type.
        where t.pending_events > 0
          and membank_private.stream_trigger(row(t.*)::membank_private.ingest_streams, _bank_rule, _now) is not null
        order by t.last_event_time, t.scope_id, t.stream_id
        limit max_streams
    loop
        -- Session first, then stream (the order ingest_events takes them); one
        -- that another transaction holds is left to the next sweep.
        perform from membank_private.sessions as s
        where s.scope_id = _candidate.scope_id and s.session_id = _candidate.stream_id
        for update skip locked;
        continue when not found;
        select t.* into _stream from membank_private.ingest_streams as t
        where t.scope_id = _candidate.scope_id and t.stream_id = _candidate.stream_id
        for update skip locked;
        continue when _stream.scope_id is null;
        _stream := membank_private.refresh_stream(_stream.scope_id, _stream.stream_id);
        _trigger := membank_private.stream_trigger(_stream, _bank_rule, _now);
        continue when _trigger is null;
        -- One stream per subtransaction: a stream whose generation fails (a
        -- lock wait past membank.lock_timeout, an event the bank now refuses)
        -- is left pending with a warning naming it, and the sweep goes on with
        -- every other tenant's streams. Rows are returned once the stream's
        -- writes have succeeded.
        begin
            _queued := array(select f from membank_private.flush_stream(_stream, _trigger, _now) as f);
        exception
            when others then
                get stacked diagnostics _error = message_text, _sqlstate = returned_sqlstate;
                raise warning 'generate_due_streams: stream % of scope % left pending: % (SQLSTATE %)',
                    to_jsonb(_stream.stream_id), _stream.scope, _error, _sqlstate
                    using hint = 'the next sweep tries it again; the other streams were queued';
                continue;
        end;
        return query select * from unnest(_queued);
    end loop;
end
$$;

comment on function membank.generate_due_streams(timestamptz, integer) is
$$The IngestEvents sweep: for up to max_streams (1..10000, default 100) streams whose trigger is due at now (default
the database clock; tests and replays pass it) — idle_duration, fixed_interval, no rule, or the 24 h flush — queue one
GenerateMemories operation over the events not yet covered and move the stream's watermark, in the caller's
transaction (due and queued commit together: a caller that dies before commit queued nothing and moved nothing).
Streams locked by another transaction are skipped (next sweep); a stream whose generation fails is left pending
with a WARNING naming it and its error (next sweep), the others are queued.
Returns one membank.due_stream per queued operation:
scope, stream_id, trigger_reason, operation_name, first_seq and last_seq (append order range covered),
covered_events. Worker and admin roles only (it reaches every scope); call it from the worker's loop or from pg_cron
(cron.schedule('membank-ingest', '* * * * *', 'select count(*) from membank.generate_due_streams()')).
Raises 22023 naming the argument, 42501 for a role bound to scopes.$$;

-- name: configure_ingestion: set the bank's default generation trigger; returns it.
create or replace function membank.configure_ingestion(generation_trigger_config jsonb)
returns jsonb
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _config jsonb := membank_private.validate_trigger_config(generation_trigger_config, 'generation_trigger_config');
begin
    perform membank_private.refuse_bound_caller('configure_ingestion');
    -- A bank-wide row: the wait for another call holding it is bounded (MB040).
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    update membank_private.ingestion_settings as s
    set generation_trigger_config = _config, update_time = statement_timestamp();
    return _config;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('generation_trigger_config', 'the bank''s ingestion settings');
end
$$;

comment on function membank.configure_ingestion(jsonb) is
$$Set the bank's default generation trigger for IngestEvents streams that have no rule of their own:
{"generation_rule": {"event_count": n} | {"idle_duration": d} | {"fixed_interval": d}} as for ingest_events, or null
(the default: such a stream is flushed at every ingest, as Vertex AI does without a config). Returns the stored config
(durations as seconds). Admin only (42501 for a role bound to scopes). Raises 22023 naming the argument, MB040 after
waiting membank.lock_timeout for another call holding the settings (retryable).$$;
