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
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from psycopg.types.json import Jsonb

from _db import fresh_database

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", type=int, default=20)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
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
