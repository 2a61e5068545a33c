"""A learned re-ranker over retrieval's fused top 50, on LoCoMo (an offline experiment; not in the product).

Data: every turn of the LoCoMo conversations stored as a memory, one scope
per conversation, as bench/retrieval_quality.py stores them. For each scored
question (evidence, not category 5) in its own conversation's scope: the
fused top 50 of membank.retrieve_memories (hybrid, defaults: the real SQL
function on the configured server), one row per candidate with signals the
first pass has or can cheaply compute:

  fused      the fused (RRF) score and ln of the fused rank
  similarity cosine similarity, and its gap to the list's best similarity
  match      share of the query's IDF the memory matches (query_signals)
  ranks      ln of the rank in the vector list and in the text list (absent: 51)
  relevance  logit of the relevance retrieve_memories returns (073)
  neighbours the fused scores of the turns said right before and right after
             it in its session (0 when not among the 50)
  session    whether it shares a session with a top-3 hit (not itself); the
             number of top-10 hits in its session; 1 / its distance in turns
             to the nearest top-5 hit of its session (0: none)
  entities   proper nouns (capitalised, not sentence-initial) shared with the
             top-3 hits and absent from the question; the IDF (in the scope)
             of the content words it shares with the top-3 hits and the
             question does not hold (second-hop signal); the same from the
             memories' fts lexemes (fact and context, or the fact's only) with
             BM25 IDF over the scope: what a SQL version could compute

Fit: logistic regression (IRLS with a ridge on standardised features, as
bench/fit_relevance.py) on the tuning conversations' rows (label: an
evidence turn); the top 50 re-ranked by the model's probability. Printed in
one run: recall@5/10/20 overall and per category, first pass and re-ranked
(and each feature set tried), on the tuning (26, 30) and the held-out (41,
42, 43) conversations, and for reference the first pass with session
neighbours on (neighbour_weight => 1). The held-out rows are never fitted on.

Run: MEMBANK_LOCOMO_DIR=../shared/data/locomo .venv/bin/python bench/fit_rerank.py [--save-rows F | --load-rows F]
"""

from __future__ import annotations

import argparse
import math
import pickle
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402
from fit_relevance import fit_logistic  # noqa: E402
from retrieval_quality import CATEGORIES, CachedEmbedder, load, recall  # noqa: E402
from second_hop import proper_nouns, words  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.embedding import get_embedder  # noqa: E402

TUNING = ("26", "30")
DEPTH = 50
KS = (5, 10, 20)

ROWS_SQL = """
select r.metadata->>'dia_id', r.score, 1 - r.distance, r.vector_rank, r.text_match_rank,
       least(r.text_rank / nullif(q.idf_total, 0), 1), r.relevance
from membank.retrieve_memories(scope => %(scope)s, query_text => %(text)s, query_embedding => %(emb)s::real[],
                               top_k => %(k)s, neighbour_weight => %(w)s) as r
cross join membank_private.query_signals(array[%(text)s], array[md5(%(scope)s::text)::uuid]) as q
"""
NEIGHBOURS_SQL = """
select r.metadata->>'dia_id'
from membank.retrieve_memories(scope => %(scope)s, query_text => %(text)s, query_embedding => %(emb)s::real[],
                               top_k => %(k)s, neighbour_weight => 1) as r
"""


def place(dia: str) -> tuple[int, int]:
    """(session, turn) of a dia_id D<session>:<turn>."""
    m = re.fullmatch(r"D(\d+):(\d+)", dia)
    return int(m[1]), int(m[2])


FEATURES = ["fused", "ln_fused_rank", "similarity", "similarity_gap", "match_share", "ln_vector_rank",
            "ln_text_rank", "relevance_logit", "prev_score", "next_score", "session_top3", "session_hits10",
            "near_top5", "shared_proper", "shared_idf", "shared_lexeme_idf", "shared_fact_lexeme_idf"]
ALL = [f for f in FEATURES if f not in ("shared_lexeme_idf", "shared_fact_lexeme_idf")]
SETS = {
    "first-pass signals": ALL[:8],
    "+ neighbours": ALL[:10],
    "+ session": ALL[:13],
    "all (+ entities)": ALL,
    # ablations of the full set: which signal carries the gain
    "all - neighbours": [f for f in ALL if f not in ("prev_score", "next_score")],
    "all - session": [f for f in ALL if f not in ("session_top3", "session_hits10", "near_top5")],
    "all - shared_proper": [f for f in ALL if f != "shared_proper"],
    "all - shared_idf": [f for f in ALL if f != "shared_idf"],
    # the shared-word signal as SQL would compute it: the memories' fts lexemes, BM25 IDF from their scope counts
    "all, shared fts lexemes": [*ALL[:-1], "shared_lexeme_idf"],
    "all, shared fact lexemes": [*ALL[:-1], "shared_fact_lexeme_idf"],
}


def features(question: str, rows: list[tuple], facts: dict[str, str], idf: dict[str, float],
             lexemes: dict[str, set[str]], lexeme_idf: dict[str, float], query_lexemes: set[str],
             fact_lexemes: dict[str, set[str]], fact_lexeme_idf: dict[str, float]) -> np.ndarray:
    """One feature row per candidate (FEATURES' order), from the fused list and the scope's facts.

    shared_idf splits the facts with bench/second_hop.py's words and stop
    list; shared_lexeme_idf is the same signal from what SQL holds: each
    memory's fts lexemes (as stored: its fact's, and its context's), IDF ln(1 + (N - df + 0.5) / (df + 0.5))
    over the scope (membank_private.bm25_idf), the query's lexemes
    (membank_private.query_lexemes) left out; shared_fact_lexeme_idf the
    same from the fact's lexemes only (fts weight A; the context is weight D).
    """
    score = {r[0]: r[1] for r in rows}
    top_sim = max((r[2] for r in rows if r[2] is not None), default=0.0)
    places = [place(r[0]) for r in rows]
    asked = set(words(question))
    asked_proper = {w.lower() for w in re.findall(r"\b[A-Z][a-z]+", question)}
    top_words = [set(words(facts[r[0]])) for r in rows[:3]]
    top_proper = [proper_nouns(facts[r[0]]) for r in rows[:3]]
    top_lexemes = [lexemes[r[0]] for r in rows[:3]]
    top_fact_lexemes = [fact_lexemes[r[0]] for r in rows[:3]]
    out = []
    for i, (dia, fused, sim, vrank, trank, share, rel) in enumerate(rows):
        s, t = places[i]
        rel = min(max(rel or 1e-6, 1e-6), 1 - 1e-6)
        others3 = [j for j in range(min(3, len(rows))) if j != i]
        near = [abs(places[j][1] - t) for j in range(min(5, len(rows))) if j != i and places[j][0] == s]
        mine = set(words(facts[dia]))
        mine_proper = proper_nouns(facts[dia])
        shared = set().union(*[top_words[j] for j in others3]) & mine - asked if others3 else set()
        shared_p = set().union(*[top_proper[j] for j in others3]) & mine_proper - asked_proper if others3 else set()
        shared_l = set().union(*[top_lexemes[j] for j in others3]) & lexemes[dia] - query_lexemes if others3 else set()
        shared_f = (set().union(*[top_fact_lexemes[j] for j in others3]) & fact_lexemes[dia] - query_lexemes
                    if others3 else set())
        out.append([
            fused, math.log(i + 1), sim if sim is not None else 0.0, top_sim - (sim if sim is not None else 0.0),
            share or 0.0, math.log(vrank or DEPTH + 1), math.log(trank or DEPTH + 1), math.log(rel / (1 - rel)),
            score.get(f"D{s}:{t - 1}", 0.0), score.get(f"D{s}:{t + 1}", 0.0),
            float(any(places[j][0] == s for j in others3)),
            float(sum(1 for j in range(min(10, len(rows))) if j != i and places[j][0] == s)),
            1.0 / min(near) if near else 0.0,
            float(len(shared_p)), math.log1p(sum(idf.get(w, 0.0) for w in shared)),
            math.log1p(sum(lexeme_idf[w] for w in shared_l)), math.log1p(sum(fact_lexeme_idf[w] for w in shared_f)),
        ])
    return np.array(out, dtype=float)


def collect(url: str, conversations, embedder, neighbour_weight: float = 0.0) -> list[dict]:
    """Every scored question's top 50 with features, labels and the neighbour-on list (one dict per question)."""
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        for conv in conversations:
            scope = {"locomo": conv.id}
            facts = dict(conn.execute("select metadata->>'dia_id', fact from membank_private.memories"
                                      " where scope = %s", (Jsonb(scope),)).fetchall())
            df: dict[str, int] = {}
            for fact in facts.values():
                for w in set(words(fact)):
                    df[w] = df.get(w, 0) + 1
            idf = {w: math.log(len(facts) / n) for w, n in df.items()}
            lexemes = {d: set(ls) for d, ls in conn.execute(
                "select metadata->>'dia_id', tsvector_to_array(fts) from membank_private.memories where scope = %s",
                (Jsonb(scope),)).fetchall()}
            ldf: dict[str, int] = {}
            for ls in lexemes.values():
                for w in ls:
                    ldf[w] = ldf.get(w, 0) + 1
            n = len(lexemes)
            lexeme_idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in ldf.items()}
            fact_lexemes = {d: set(ls) for d, ls in conn.execute(
                "select metadata->>'dia_id', tsvector_to_array(ts_filter(fts, '{a}')) from membank_private.memories"
                " where scope = %s", (Jsonb(scope),)).fetchall()}
            fdf: dict[str, int] = {}
            for ls in fact_lexemes.values():
                for w in ls:
                    fdf[w] = fdf.get(w, 0) + 1
            fact_lexeme_idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in fdf.items()}
            for qa in conv.scored_qas:
                params = {"scope": Jsonb(scope), "text": qa.question, "emb": embedder.embed_query(qa.question),
                          "k": DEPTH, "w": neighbour_weight}
                rows = conn.execute(ROWS_SQL, params).fetchall()
                asked = set(conn.execute("select membank_private.query_lexemes(%s)", (qa.question,)).fetchone()[0])
                neighbours = [r[0] for r in conn.execute(NEIGHBOURS_SQL, params)]
                out.append({"conv": conv.id, "category": qa.category, "evidence": qa.evidence,
                            "dias": [r[0] for r in rows],
                            "x": features(qa.question, rows, facts, idf, lexemes, lexeme_idf, asked, fact_lexemes,
                                          fact_lexeme_idf),
                            "neighbours": neighbours})
    return out


def table(title: str, questions: list[dict], lists: dict[str, list[list[str]]]) -> list[str]:
    lines = [f"\n{title} ({len(questions)} questions; recall@5/10/20)",
             f"  {'':32s}{'all':>18}" + "".join(f"{c:>18}" for c in CATEGORIES.values())]
    for name, ranked in lists.items():
        cells = []
        for cat in [None, *CATEGORIES]:
            chosen = [(q, r) for q, r in zip(questions, ranked) if cat is None or q["category"] == cat]
            cells.append("/".join(f"{statistics.mean(recall(r, q['evidence'], k) for q, r in chosen):.3f}"
                                  for k in KS) if chosen else "-")
        lines.append(f"  {name:32s}" + "".join(f"{c:>18}" for c in cells))
    return lines


def rerank(questions: list[dict], b: np.ndarray, cols: list[int]) -> list[list[str]]:
    out = []
    for q in questions:
        z = b[0] + q["x"][:, cols] @ b[1:]
        order = sorted(range(len(q["dias"])), key=lambda i: (-z[i], i))  # ties: the first pass's order
        out.append([q["dias"][i] for i in order])
    return out


RIDGES = (0.01, 0.1, 1.0, 10.0, 100.0)


def choose_ridge(tune: list[dict], cols: list[int]) -> tuple[float, dict[float, float]]:
    """The ridge with the best mean recall@10 over leave-one-tuning-conversation-out folds (first on ties)."""
    convs = sorted({q["conv"] for q in tune})
    scores = {}
    for ridge in RIDGES:
        fold = []
        for held in convs:
            fit = [q for q in tune if q["conv"] != held]
            test = [q for q in tune if q["conv"] == held]
            b = fit_logistic(*design(fit, cols), ridge=ridge)
            fold.append(statistics.mean(recall(r, q["evidence"], 10) for q, r in zip(test, rerank(test, b, cols))))
        scores[ridge] = statistics.mean(fold)
    return max(scores, key=lambda r: (scores[r], -RIDGES.index(r))), scores


def design(questions: list[dict], cols: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Feature matrix (the columns chosen) and evidence labels of every candidate of the questions."""
    x = np.vstack([q["x"][:, cols] for q in questions])
    y = np.concatenate([[1.0 if d in q["evidence"] else 0.0 for d in q["dias"]] for q in questions])
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_db_argument(parser, "fit_rerank")
    parser.add_argument("--tuning", default=",".join(TUNING), metavar="NAMES",
                        help="comma-separated LoCoMo conversations to fit on (the others are held out); "
                             "default: %(default)s")
    parser.add_argument("--cache", default="/tmp/membank_bench_embeddings.npz", type=Path,
                        help="file that keeps the embeddings between runs (computed once); default: %(default)s")
    parser.add_argument("--ridge", type=float, default=None,
                        help="ridge on the standardised features; default: chosen by leave-one-conversation-out "
                             "recall@10 over the tuning conversations")
    parser.add_argument("--neighbour-weight", type=float, default=0.0,
                        help="the first pass's neighbour_weight (default 0, retrieval's default): 1 re-ranks the "
                             "top 50 with session neighbours on")
    parser.add_argument("--save-rows", type=Path, help="keep the collected rows in this pickle")
    parser.add_argument("--load-rows", type=Path, help="fit on rows saved by --save-rows (no database)")
    args = parser.parse_args()
    tuning = {n.strip() for n in args.tuning.split(",") if n.strip()}
    if args.load_rows:
        with open(args.load_rows, "rb") as f:
            questions = pickle.load(f)
    else:
        conversations = locomo.conversations()
        print(locomo.evidence_report(conversations))
        url = fresh_database(database_name(args.db, "fit_rerank"))
        embedder = CachedEmbedder(get_embedder(None), args.cache)
        with MemoryBank(url, embedder=embedder) as bank:
            for c in conversations:
                load(bank, c)
            bank.process_pending()
            embedder.save()
        embedder.prefetch_queries([q.question for c in conversations for q in c.scored_qas])
        questions = collect(url, conversations, embedder, args.neighbour_weight)
        if args.save_rows:
            with open(args.save_rows, "wb") as f:
                pickle.dump(questions, f)
    tune = [q for q in questions if q["conv"] in tuning]
    held = [q for q in questions if q["conv"] not in tuning]
    lines = []
    lists_t = {"first pass": [q["dias"] for q in tune], "neighbours on (w 1)": [q["neighbours"] for q in tune]}
    lists_h = {"first pass": [q["dias"] for q in held], "neighbours on (w 1)": [q["neighbours"] for q in held]}
    for name, chosen in SETS.items():
        cols = [FEATURES.index(f) for f in chosen]
        if args.ridge is None:
            ridge, folds = choose_ridge(tune, cols)
            lines.append(f"{name}: ridge {ridge:g} (leave-one-conversation-out recall@10 "
                         + ", ".join(f"{r:g}: {v:.3f}" for r, v in folds.items()) + ")")
        else:
            ridge = args.ridge
            lines.append(f"{name}: ridge {ridge:g}")
        b = fit_logistic(*design(tune, cols), ridge=ridge)
        lines.append("  " + ", ".join(f"{f} {v:+.3g}" for f, v in zip(["intercept", *chosen], b)))
        lists_t["rerank " + name] = rerank(tune, b, cols)
        lists_h["rerank " + name] = rerank(held, b, cols)
    print(f"{len(tune)} tuning questions x top {DEPTH}; coefficients (unstandardised):")
    print("\n".join("  " + line for line in lines))
    print("\n".join(table(f"tuning ({', '.join(sorted(tuning))})", tune, lists_t)))
    held_ids = sorted({q["conv"] for q in held})
    print("\n".join(table(f"held-out ({', '.join(held_ids)})", held, lists_h)))
    print("\nheld-out recall@10 per conversation")
    for name, ranked in lists_h.items():
        print(f"  {name:32s}" + "".join(
            f"  {c} {statistics.mean(recall(r, q['evidence'], 10) for q, r in zip(held, ranked) if q['conv'] == c):.3f}"
            for c in held_ids))


if __name__ == "__main__":
    main()
