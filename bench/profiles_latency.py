"""Latency of retrieve_profiles at 1M memories.

Builds, directly in SQL with generate_series (triggers off while loading:
this measures the read path, not the writes), 1,000,000 memories over
100,000 scopes: per scope 6 natural-language facts and 4 profile fields (two
schemas of two fields each), so 400,000 STRUCTURED_PROFILE field memories.
Then, for 2,000 random scopes, in one process and session, each query once
untimed and once timed (warm caches):

- ours:      select membank.retrieve_profiles(scope)  (one call, one index range)
- raw same:  the same aggregate as one raw SQL statement (the function's overhead)
- listing:   membank.list_memories(scope, memory_type => 'STRUCTURED_PROFILE') and
             grouping the rows into {schema_id: {field: value}} in Python (the
             way a client would without retrieve_profiles)

Prints p50/p95/p99 in ms and ratios. Run once, with nice:
    nice -n 10 .venv/bin/python bench/profiles_latency.py [--scopes 100000] [--queries 2000] [--db NAME [--reuse]]
(--reuse: keep the database a previous run loaded into --db NAME; only upgrade its functions.)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import psycopg
from psycopg.types.json import Jsonb

from psycopg.conninfo import make_conninfo

from _db import add_db_argument, database, database_name, fresh_database, migrate

LOAD = """
set session_replication_role = replica;  -- no revision, embedding or lexicon triggers while loading
insert into membank_private.memories (scope_id, scope, memory_type, fact, structured_content, create_time, update_time)
select md5(jsonb_build_object('user_id', 'u' || s)::text)::uuid, jsonb_build_object('user_id', 'u' || s),
       case when k <= 6 then 'NATURAL_LANGUAGE' else 'STRUCTURED_PROFILE' end,
       case when k <= 6 then format('user %s fact number %s about their life', s, k) end,
       case k when 7 then jsonb_build_object('schema_id', 'user-profile', 'field', 'technical_stack',
                                             'value', 'ADK, Python')
              when 8 then jsonb_build_object('schema_id', 'user-profile', 'field', 'job_status', 'value', 'student')
              when 9 then jsonb_build_object('schema_id', 'preferences', 'field', 'tone', 'value', 'succinct')
              when 10 then jsonb_build_object('schema_id', 'preferences', 'field', 'topics',
                                              'value', '["python", "agents"]'::jsonb) end,
       now(), now()
from generate_series(1, %(scopes)s) as s, generate_series(1, 10) as k;
set session_replication_role = origin;
"""


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scopes", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--reuse", action="store_true", help="reuse the data of a previous run (needs its --db)")
    add_db_argument(parser, "profiles")
    args = parser.parse_args()
    if args.reuse:
        if not args.db:
            parser.error("--reuse needs the --db NAME of the run that loaded the data")
        url = make_conninfo(database.database_url(), dbname=args.db)
        migrate.upgrade(url)
    else:
        url = fresh_database(database_name(args.db, "profiles"))
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        if not args.reuse:
            conn.execute(LOAD.replace("%(scopes)s", str(int(args.scopes))))
            conn.execute("vacuum analyze membank_private.memories")
        total = conn.execute("select count(*) from membank_private.memories").fetchone()[0]
        if not args.reuse:
            print(f"loaded {total:,} memories over {args.scopes:,} scopes in {time.perf_counter() - t0:.0f} s")
        print(f"{total:,} memories; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        rng = random.Random(7)
        scopes = [{"user_id": f"u{rng.randint(1, args.scopes)}"} for _ in range(args.queries)]

        def ours(scope):
            return conn.execute("select membank.retrieve_profiles(%s)", (Jsonb(scope),)).fetchone()[0]

        def raw(scope):
            return conn.execute("""
                select coalesce(jsonb_object_agg(p.schema_id, p.profile), '{}') from (
                    select m.structured_content ->> 'schema_id' as schema_id,
                           jsonb_object_agg(m.structured_content ->> 'field', m.structured_content -> 'value') as profile
                    from membank_private.memories as m
                    where m.scope_id = md5(%(s)s::text)::uuid and m.memory_type = 'STRUCTURED_PROFILE'
                      and m.scope = %(s)s and (m.expire_time is null or m.expire_time > statement_timestamp())
                    group by 1) as p""", {"s": Jsonb(scope)}).fetchone()[0]

        def listing(scope):
            rows = conn.execute("select structured_content from membank.list_memories(scope => %s,"
                                " memory_type => 'STRUCTURED_PROFILE')", (Jsonb(scope),)).fetchall()
            out: dict = {}
            for (content,) in rows:
                out.setdefault(content["schema_id"], {})[content["field"]] = content["value"]
            return out

        inner = conn.execute("""explain select m.structured_content from membank_private.memories as m
            where m.scope_id = md5('{"user_id": "u1"}'::jsonb::text)::uuid and m.memory_type = 'STRUCTURED_PROFILE'
              and m.scope = '{"user_id": "u1"}'""").fetchall()
        print("plan of the read inside retrieve_profiles:", " / ".join(r[0].strip() for r in inner))
        times: dict[str, list[float]] = {"ours": [], "raw same": [], "listing": []}
        for scope in scopes:
            expected = None
            for name, fn in (("ours", ours), ("raw same", raw), ("listing", listing)):
                fn(scope)  # warm
                t = time.perf_counter()
                result = fn(scope)
                times[name].append((time.perf_counter() - t) * 1000)
                expected = expected or result
                assert result == expected, (name, scope, result, expected)
            assert expected == {"user-profile": {"technical_stack": "ADK, Python", "job_status": "student"},
                                "preferences": {"tone": "succinct", "topics": ["python", "agents"]}}
        print(f"\nretrieve_profiles over {total:,} memories, {args.queries:,} random scopes (ms, client round trip):")
        print(f"{'method':<10} {'p50':>7} {'p95':>7} {'p99':>7}")
        for name, values in times.items():
            print(f"{name:<10} {statistics.median(values):7.3f} {pct(values, 95):7.3f} {pct(values, 99):7.3f}")
        o50, o95 = statistics.median(times["ours"]), pct(times["ours"], 95)
        for name in ("raw same", "listing"):
            print(f"ours / {name}: p50 {o50 / statistics.median(times[name]):.2f}x, "
                  f"p95 {o95 / pct(times[name], 95):.2f}x")
        # Inside the server (no client, no round trip): each call timed with clock_timestamp() in a loop.
        conn.execute("create temp table timings (method text, ms float8)")
        conn.execute("""
            do $bench$
            declare
                _scope jsonb;
                _t timestamptz;
                _r jsonb;
            begin
                for i in 1..%s loop
                    _scope := jsonb_build_object('user_id', 'u' || (1 + (i * 7919) %% %s));
                    _t := clock_timestamp();
                    _r := membank.retrieve_profiles(_scope);
                    insert into timings values ('ours', extract(epoch from clock_timestamp() - _t) * 1000);
                    _t := clock_timestamp();
                    select coalesce(jsonb_object_agg(p.schema_id, p.profile), '{}') into _r from (
                        select m.structured_content ->> 'schema_id' as schema_id,
                               jsonb_object_agg(m.structured_content ->> 'field',
                                                m.structured_content -> 'value') as profile
                        from membank_private.memories as m
                        where m.scope_id = md5(_scope::text)::uuid and m.memory_type = 'STRUCTURED_PROFILE'
                          and m.scope = _scope
                          and (m.expire_time is null or m.expire_time > statement_timestamp())
                        group by 1) as p;
                    insert into timings values ('raw same', extract(epoch from clock_timestamp() - _t) * 1000);
                end loop;
            end
            $bench$""" % (int(args.queries), int(args.scopes)))
        print("\ninside the server (ms per call, no round trip):")
        for method, p50, p95, p99 in conn.execute("""
                select method, percentile_cont(0.5) within group (order by ms),
                       percentile_cont(0.95) within group (order by ms),
                       percentile_cont(0.99) within group (order by ms)
                from timings group by method order by method"""):
            print(f"{method:<10} {p50:7.3f} {p95:7.3f} {p99:7.3f}")


if __name__ == "__main__":
    main()
