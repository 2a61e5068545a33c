"""Cost of ADK app: state as append-only entries (0013) against the single shared row it replaced (0012).

In one process and session, on a fresh bank, for --apps apps of --users users and --keys keys each:

- ours write:  membank_private.merge_app_state(app, user scope, {key: value})  (insert one entry per key, then
               delete the entries it supersedes with SKIP LOCKED)
- ours read:   membank_private.app_state(app)  (each key's latest entry)
- 0012 write:  the upsert 0012 ran: insert ... on conflict (app_name) do update set state = state || delta, on a
               table of the same shape as 0012's app_states
- 0012 read:   select state from that table

Each statement runs --rounds times per (app, user) in its own transaction, alternating ours and 0012's, so both
meet the same machine load. Prints p50/p95 in ms and ours/0012 ratios. What the append-only design buys (no user
waits for another user's open transaction) is tested in tests/test_fail_closed.py, not timed here.
Run with nice:
    nice -n 10 .venv/bin/python bench/app_state.py [--apps 20] [--users 20] [--keys 10] [--rounds 5]
(MEMBANK_DATABASE_URL: the server to use; a database membank_bench_app_state is created on it.)

--victim: what one user's app: state costs another user of the app (the attack it answers: 200 MB of one
user's app: state took another user's get_session from 11 ms to 25.9 s). A victim user has a session with --events events in app
"shop" and a twin session in app "calm"; its get_session of each is timed alternately, read by read, so that
the twin (whose app: state stays empty) is the baseline under the same machine load. Phases: before (both
app: states empty); shop's app: state filled to membank_private.size_limit('app_state') by an attacker user
(four values; the next is refused); the attacker rewriting them at that bound without pause (a process of
its own). Each read is timed on two paths: the SQL call (fetched, jsonb parsed by psycopg) and ADK's
MembankSessionService.get_session (the issue's path: the call, then an ADK Session with Event objects).
Also tried first: one 200 MB app: write (refused: its time and error are printed). Prints p50/p95 ms per app,
shop's ratio to calm and to the before phase, the bytes get_session returned, the attacker's writes.
    nice -n 10 .venv/bin/python bench/app_state.py --victim [--events 20] [--reads 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from _db import database_name, fresh_database

BASELINE_TABLE = """
create table if not exists public.bench_app_states_0012 (
    app_name text not null primary key,
    state jsonb not null default '{}',
    update_time timestamptz not null default statement_timestamp()
)"""
BASELINE_WRITE = """
insert into public.bench_app_states_0012 as a (app_name, state) values (%(app)s, %(delta)s)
on conflict (app_name) do update set state = a.state || excluded.state, update_time = statement_timestamp()"""
BASELINE_READ = "select state from public.bench_app_states_0012 where app_name = %(app)s"
OURS_WRITE = "select membank_private.merge_app_state(%(app)s, md5(%(scope)s::text)::uuid, %(delta)s)"
OURS_READ = "select membank_private.app_state(%(app)s)"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def timed(conn: psycopg.Connection, statement: str, params: dict) -> float:
    start = time.perf_counter()
    with conn.transaction():
        cur = conn.execute(statement, params)
        if cur.description is not None:
            cur.fetchall()
    return (time.perf_counter() - start) * 1000


VICTIM_READ = "select membank.get_session(app_name => %s, user_id => 'victim', session_id => 's') as s"
ATTACK = ("select membank.append_session_event(app_name => 'shop', user_id => 'attacker', session_id => 's',"
          " event => %s)")


def attack(url: str, chunk: int, fill_only: bool, stop: Any, counts: Any) -> None:
    """The attacker (its own process): app: keys of ``chunk`` bytes until one is refused, then (unless
    ``fill_only``) rewrites of the keys that fit, without pause, until ``stop`` is set."""
    value = "x" * chunk
    n = 0
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            key = n if counts["refused"] == 0 else n % max(1, counts["fitted"])
            event = {"id": f"a{n}-{time.time_ns()}", "author": "user", "timestamp": 1700000000 + n,
                     "actions": {"state_delta": {f"app:k{key}": value.replace("x", "xy"[n % 2])}}}
            try:
                conn.execute(ATTACK, (Jsonb(event),))
                counts["accepted"] += 1
                if counts["refused"] == 0:
                    counts["fitted"] += 1
            except psycopg.errors.InvalidParameterValue:
                counts["refused"] += 1
                if fill_only:
                    return
            n += 1


def victim(args: argparse.Namespace) -> None:
    from membank import MemoryBank
    from membank.adk import MembankSessionService

    url = fresh_database(database_name(None, "app_state"))
    with psycopg.connect(url, autocommit=True) as conn:
        bound = conn.execute("select membank_private.size_limit('app_state')").fetchone()[0]
        # The victim has one session in "shop" (attacked) and a twin in "calm" (whose app: state stays empty):
        # read alternately, the twin is the baseline under the same machine load at every moment.
        for app, user in (("shop", "victim"), ("calm", "victim"), ("shop", "attacker")):
            conn.execute("select membank.create_session(app_name => %s, user_id => %s, session_id => 's',"
                         " state => %s)", (app, user, Jsonb({"lang": "pt", "user:name": user, "app:theme": "dark"})))
        for app in ("shop", "calm"):
            for i in range(args.events):
                conn.execute("select membank.append_session_event(app_name => %s, user_id => 'victim',"
                             " session_id => 's', event => %s)",
                             (app, Jsonb({"id": f"e{i}", "author": "user" if i % 2 == 0 else "assistant",
                                          "timestamp": 1700000000 + i,
                                          "content": {"role": "user",
                                                      "parts": [{"text": f"turn {i}: " + "words " * 30}]}}),))
    bank = MemoryBank(url, max_size=1)
    service = MembankSessionService(bank)

    async def adk_read(app: str) -> float:
        start = time.perf_counter()
        await service.get_session(app_name=app, user_id="victim", session_id="s")
        return (time.perf_counter() - start) * 1000

    def reads(conn: psycopg.Connection) -> dict[str, list[float]]:
        # Per path (the SQL call, fetched and parsed by psycopg; ADK's MembankSessionService.get_session: the same
        # call, then an ADK Session with its Event objects) and app, alternating calm and shop read by read.
        out: dict[str, list[float]] = {f"{p} {a}": [] for p in ("sql", "adk") for a in ("calm", "shop")}
        sizes = {}
        for _ in range(args.reads):
            for app in ("calm", "shop"):
                start = time.perf_counter()
                got = conn.execute(VICTIM_READ, (app,)).fetchone()[0]
                out[f"sql {app}"].append((time.perf_counter() - start) * 1000)
                sizes[app] = len(json.dumps(got))
                out[f"adk {app}"].append(asyncio.run(adk_read(app)))
        out["bytes"] = [sizes["calm"], sizes["shop"]]
        return out

    chunk = min(60_000, bound // 4 - 16)  # four keys fill the bound
    manager = multiprocessing.Manager()
    counts = manager.dict(accepted=0, refused=0, fitted=0)
    phases: dict[str, dict[str, list[float]]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        reads(conn)  # warm-up, unmeasured
        phases["before (both app: states empty)"] = reads(conn)
        start = time.perf_counter()
        try:
            conn.execute("select membank.append_session_event(app_name => 'shop', user_id => 'attacker',"
                         " session_id => 's', event => jsonb_build_object('id', 'big', 'author', 'user',"
                         " 'timestamp', 1700000000, 'actions', jsonb_build_object('state_delta',"
                         " jsonb_build_object('app:big', repeat('x', 200 * 1024 * 1024)))))")
            big = "ACCEPTED"
        except psycopg.Error as err:
            big = f"refused after {time.perf_counter() - start:.1f} s: [{err.sqlstate}] {err.diag.message_primary}"
        stop = manager.Event()
        filler = multiprocessing.Process(target=attack, args=(url, chunk, True, stop, counts))
        filler.start()
        filler.join()
        phases["shop's app: state at the bound"] = reads(conn)
        writer = multiprocessing.Process(target=attack, args=(url, chunk, False, stop, counts))
        writer.start()
        time.sleep(0.5)
        phases["attacker rewriting it at the bound"] = reads(conn)
        stop.set()
        writer.join()
        entries = conn.execute("select count(*), sum(size) from membank_private.app_state_entries"
                               " where app_name = 'shop'").fetchone()
    bank.close()
    print(f"victim get_session, {args.events} events, {args.reads} reads per app and phase; app: state bound {bound}"
          f" bytes, attacker values of {chunk} bytes")
    print(f"200 MB app: write: {big}")
    before = phases["before (both app: states empty)"]
    for name, got in phases.items():
        print(f"{name} (get_session returned {got['bytes'][0]} bytes in calm, {got['bytes'][1]} in shop):")
        for path in ("sql", "adk"):
            calm, shop = got[f"{path} calm"], got[f"{path} shop"]
            print(f"  {path} p50 ms calm {statistics.median(calm):6.3f} shop {statistics.median(shop):6.3f}"
                  f" (x{statistics.median(shop) / statistics.median(calm):.2f} of calm,"
                  f" x{statistics.median(shop) / statistics.median(before[f'{path} shop']):.2f} of before);"
                  f" p95 calm {pct(calm, 95):6.3f} shop {pct(shop, 95):6.3f} (x{pct(shop, 95) / pct(calm, 95):.2f})")
    print(f"attacker writes: {counts['accepted']} accepted ({counts['fitted']} keys fit), {counts['refused']} refused;"
          f" app_state_entries left: {entries[0]} ({entries[1]} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", type=int, default=20)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--victim", action="store_true",
                        help="time another user's get_session while one user writes app: state at the bound")
    parser.add_argument("--events", type=int, default=20, help="--victim: events in the victim's session")
    parser.add_argument("--reads", type=int, default=300, help="--victim: get_session calls per phase")
    args = parser.parse_args()
    if args.victim:
        victim(args)
        return
    url = fresh_database("membank_bench_app_state")
    times: dict[str, list[float]] = {"ours write": [], "0012 write": [], "ours read": [], "0012 read": []}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(BASELINE_TABLE)
        for r in range(args.rounds):
            for a in range(args.apps):
                for u in range(args.users):
                    params = {"app": f"app{a}", "scope": Jsonb({"app_name": f"app{a}", "user_id": f"u{u}"}),
                              "delta": Jsonb({f"k{(u + r) % args.keys}": f"value {r} from u{u}"})}
                    times["ours write"].append(timed(conn, OURS_WRITE, params))
                    times["0012 write"].append(timed(conn, BASELINE_WRITE, params))
                    times["ours read"].append(timed(conn, OURS_READ, params))
                    times["0012 read"].append(timed(conn, BASELINE_READ, params))
        entries = conn.execute("select count(*) from membank_private.app_state_entries").fetchone()[0]
        same = conn.execute("select bool_and(membank_private.app_state(b.app_name) = b.state)"
                            " from public.bench_app_states_0012 as b").fetchone()[0]
    print(f"{args.apps} apps x {args.users} users x {args.rounds} rounds, {args.keys} keys per app;"
          f" entries left: {entries} (keys: {args.apps * args.keys}); same state as 0012: {same}")
    for name, values in times.items():
        print(f"{name:11s} p50 {statistics.median(values):7.3f} ms  p95 {pct(values, 95):7.3f} ms  n={len(values)}")
    for kind in ("write", "read"):
        ours, base = times[f"ours {kind}"], times[f"0012 {kind}"]
        print(f"{kind}: ours/0012 p50 {statistics.median(ours) / statistics.median(base):.2f}x,"
              f" p95 {pct(ours, 95) / pct(base, 95):.2f}x")


if __name__ == "__main__":
    main()
