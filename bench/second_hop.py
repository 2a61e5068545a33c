"""A second retrieval hop from the first pass's rare words, on LoCoMo (measured; not in the product).

For each question (stored as bench/retrieval_quality.py stores them): the
fused top 50 of membank.retrieve_memories (hybrid, defaults); from its top M
hits, the L rarest words (IDF in the scope, by this script's own word split
and stop list) that the question does not hold, optionally only proper nouns
(capitalised, not sentence-initial); those words as a second, text-only
retrieval (top 50); the two lists fused by RRF (k 10), the second at weight
w. Printed: hybrid recall@10 per LoCoMo category, first pass alone and each
(M, L, w), for the tuning (26, 30) and the held-out (41, 42, 43)
conversations. Re-ranked here, outside the product: nothing of it is in SQL.

Run: MEMBANK_LOCOMO_DIR=../shared/data/locomo .venv/bin/python bench/second_hop.py [--proper-nouns]
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402
from retrieval_quality import CATEGORIES, TUNING, CachedEmbedder, load, recall  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.embedding import get_embedder  # noqa: E402

STOP = set("""i me my we our you your he she it they them their what which who whom this that these those am is are
was were be been being have has had do does did a an the and but if or because as until while of at by for with about
against between into through during before after above below to from up down in out on off over under again further
then once here there when where why how all any both each few more most other some such no nor not only own same so
than too very can will just don should now yeah really oh wow also like know think going get got good great thanks
thank love one lot much""".split())
SETTINGS = [(m, n, w) for m in (1, 3, 5) for n in (3, 6) for w in (0.25, 0.5, 1.0)]


def words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in STOP and len(w) > 2]


def proper_nouns(fact: str) -> set[str]:
    body = fact.split(":", 1)[-1].strip()  # "Speaker: text": the speaker is every turn's
    return {m.group(0).lower() for m in re.finditer(r"\b[A-Z][a-z]+", body)
            if m.start() > 0 and not re.search(r"[.!?]\s*$", body[:m.start()])}


def fuse(first: list[str], second: list[str], weight: float, k: int = 10) -> list[str]:
    score: dict[str, float] = {}
    for i, d in enumerate(first):
        score[d] = score.get(d, 0) + 1 / (k + i + 1)
    for i, d in enumerate(second):
        score[d] = score.get(d, 0) + weight / (k + i + 1)
    return sorted(score, key=lambda d: -score[d])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_db_argument(parser, "second_hop")
    parser.add_argument("--cache", default="/tmp/membank_bench_embeddings.npz", type=Path)
    parser.add_argument("--proper-nouns", action="store_true", help="second-hop words: proper nouns only")
    args = parser.parse_args()
    conversations = locomo.conversations()
    url = fresh_database(database_name(args.db, "second_hop"))
    embedder = CachedEmbedder(get_embedder(None), args.cache)
    with MemoryBank(url, embedder=embedder) as bank:
        scopes = [load(bank, c) for c in conversations]
        bank.process_pending()
        embedder.save()
    hybrid = ("select metadata->>'dia_id' from membank.retrieve_memories(scope => %s, query_text => %s,"
              " query_embedding => %s::real[], top_k => 50)")
    text = "select metadata->>'dia_id' from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 50)"
    results: dict[str, list[tuple[int, float, dict]]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for conv, scope in zip(conversations, scopes):
            facts = dict(conn.execute("select metadata->>'dia_id', fact from membank_private.memories where scope = %s",
                                      (Jsonb(scope),)).fetchall())
            df: dict[str, int] = {}
            for fact in facts.values():
                for w in set(words(fact)):
                    df[w] = df.get(w, 0) + 1
            for qa in conv.scored_qas:
                first = [r[0] for r in conn.execute(hybrid, (Jsonb(scope), qa.question,
                                                             embedder.embed_query(qa.question)))]
                asked = set(words(qa.question))
                cells = {}
                for m, n, w in SETTINGS:
                    rarity: dict[str, float] = {}
                    for d in first[:m]:
                        found = set(words(facts[d]))
                        if args.proper_nouns:
                            found &= proper_nouns(facts[d])
                        for word in found - asked:
                            rarity[word] = math.log(len(facts) / df.get(word, 1))
                    chosen = sorted(rarity, key=lambda x: (-rarity[x], x))[:n]
                    second = [r[0] for r in conn.execute(text, (Jsonb(scope), " ".join(chosen)))] if chosen else []
                    cells[m, n, w] = recall(fuse(first, second, w), qa.evidence, 10)
                results.setdefault(conv.id, []).append((qa.category, recall(first, qa.evidence, 10), cells))
    for title, ids in (("tuning", set(TUNING)), ("held-out", set(results) - set(TUNING))):
        rows = [r for cid in sorted(ids) for r in results.get(cid, [])]
        if not rows:
            continue

        def line(name, values):
            cats = [statistics.mean([v for (c, _, _), v in zip(rows, values) if c == cat] or [float("nan")])
                    for cat in CATEGORIES]
            return f"  {name:18s}{statistics.mean(values):8.3f}" + "".join(f"{c:13.3f}" for c in cats)

        print(f"\nrecall@10, {title} ({', '.join(sorted(ids))})" + (", proper nouns" if args.proper_nouns else ""))
        print(f"  {'':18s}{'all':>8}" + "".join(f"{c:>13}" for c in CATEGORIES.values()))
        print(line("first pass", [r[1] for r in rows]))
        for setting in SETTINGS:
            print(line("M%d L%d w%g" % setting, [r[2][setting] for r in rows]))


if __name__ == "__main__":
    main()
