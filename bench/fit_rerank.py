"""Fit the re-ranker of retrieve_memories (rerank => true) on LoCoMo, and write its coefficients.

Data: every turn of the LoCoMo conversations stored as a memory, one scope
per conversation, as bench/retrieval_quality.py stores them. For each scored
question (evidence, not category 5) in its own conversation's scope: the
fused top 50 of retrieve_memories' candidate lists as a default call reads
them (hybrid, defaults, each list 50 deep; membank_private.fused_memories:
the first pass that rerank => true re-ranks) and, for each candidate, the
features membank_private.rerank_features computes in SQL
(db/functions/076_rerank.sql; their names from rerank_feature_names()): the
product's own numbers, so the fit and the product cannot drift.

  fused, ln_fused_rank       the fused (RRF) score and ln of the fused rank
  similarity, similarity_gap cosine similarity and its gap to the list's best
  match_share                share of the query's IDF the memory matches
  ln_vector_rank/_text_rank  ln of the rank in each list (absent: 51)
  relevance_logit            logit of the relevance retrieve_memories returns (073)
  prev_score, next_score     fused scores of the memories said right before and after it in its session
                             (0 when not among the 50)
  session_top3, session_hits10, near_top5
                             shares a session with a top-3 hit; other top-10 hits in its session;
                             1 / turns to the nearest top-5 hit of its session
  shared_proper              names (capitalised, not sentence-initial) shared with the top-3 hits, the question's
                             left out
  shared_lexeme_idf          ln(1 + BM25 IDF of the fts lexemes shared with the top-3 hits, the query's left out)

Fit: logistic regression (IRLS with a ridge on standardised features, as
bench/fit_relevance.py) on the tuning conversations' rows (label: an
evidence turn), the ridge chosen by leave-one-tuning-conversation-out
recall@10; the top 50 re-ranked by the model's probability. Printed in one
run: recall@5/10/20 overall and per category, first pass and re-ranked, on
the tuning (26, 30) and the held-out (41, 42, 43) conversations. The
held-out rows are never fitted on. Unless --dry-run, the coefficients go to
db/functions/074_rerank_model.sql with this command and the figures.

Run: MEMBANK_LOCOMO_DIR=../shared/data/locomo .venv/bin/python bench/fit_rerank.py [--save-rows F | --load-rows F]
Another embedder: MEMBANK_EMBEDDER=... (and a --cache file of its own), then the same command; the file records
the embedder it was fitted with.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import pickle
import statistics
import sys
import textwrap
from pathlib import Path

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402
from fit_relevance import fit_logistic  # noqa: E402
from retrieval_quality import CATEGORIES, CachedEmbedder, load, recall  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.embedding import get_embedder  # noqa: E402

TUNING = ("26", "30")
DEPTH = 50  # rows re-ranked
LIST_DEPTH = 50  # depth of each candidate list of the first pass (retrieve_memories: greatest(5 top_k, 50))
KS = (5, 10, 20)
MODEL_FILE = Path(__file__).resolve().parents[1] / "db" / "functions" / "074_rerank_model.sql"

# The first pass that rerank => true re-ranks: the fused top 50 of the candidate lists a default call reads (50
# deep: membank_private.fused_memories, which retrieve_memories calls with the defaults below), and the features SQL
# computes over it.
ROWS_SQL = """
with asked as (
    select q.texts, q.queries, s.scopes, array(select md5(x::text)::uuid from unnest(s.scopes) as x) as ids
    from membank_private.check_queries(%(text)s, %(emb)s::real[], null, null, null) as q
    cross join (select membank_private.validate_scopes(%(scope)s) as scopes) as s
), first as (
    select a.texts, a.ids, array(
        select r from membank_private.fused_memories(
            a.scopes, a.ids, a.texts, a.queries, %(k)s, %(depth)s, null, null, null, null, null, null,
            'rrf', 1, 1, 10, 400, 0, null) as r) as rows
    from asked as a
)
select c.name, c.metadata->>'dia_id', f.features
from first
cross join unnest(first.rows) with ordinality as c
inner join membank_private.rerank_features(first.ids, first.texts, first.rows)
    with ordinality as f on f.ordinality = c.ordinality
order by c.ordinality
"""


def collect(url: str, conversations, embedder) -> tuple[list[str], list[dict]]:
    """The SQL feature names, and every scored question's top 50 with its features and labels (a dict each)."""
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        names = conn.execute("select membank_private.rerank_feature_names()").fetchone()[0]
        for conv in conversations:
            scope = {"locomo": conv.id}
            for qa in conv.scored_qas:
                rows = conn.execute(ROWS_SQL, {"scope": Jsonb(scope), "text": qa.question,
                                               "emb": embedder.embed_query(qa.question), "k": DEPTH,
                                               "depth": LIST_DEPTH}).fetchall()
                out.append({"conv": conv.id, "category": qa.category, "evidence": qa.evidence,
                            "dias": [r[1] for r in rows], "x": np.array([r[2] for r in rows], dtype=float)})
    return names, out


def table(title: str, questions: list[dict], lists: dict[str, list[list[str]]]) -> list[str]:
    lines = [f"\n{title} ({len(questions)} questions; recall@5/10/20)",
             f"  {'':24s}{'all':>18}" + "".join(f"{c:>18}" for c in CATEGORIES.values())]
    for name, ranked in lists.items():
        cells = []
        for cat in [None, *CATEGORIES]:
            chosen = [(q, r) for q, r in zip(questions, ranked) if cat is None or q["category"] == cat]
            cells.append("/".join(f"{statistics.mean(recall(r, q['evidence'], k) for q, r in chosen):.3f}"
                                  for k in KS) if chosen else "-")
        lines.append(f"  {name:24s}" + "".join(f"{c:>18}" for c in cells))
    return lines


def rerank(questions: list[dict], b: np.ndarray) -> list[list[str]]:
    """Each question's top 50 ordered as retrieve_memories(rerank => true) orders it: probability, then position."""
    out = []
    for q in questions:
        z = b[0] + q["x"] @ b[1:] if len(q["dias"]) else np.zeros(0)
        order = sorted(range(len(q["dias"])), key=lambda i: (-z[i], i))
        out.append([q["dias"][i] for i in order])
    return out


RIDGES = (0.01, 0.1, 1.0, 10.0, 100.0)


def design(questions: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Feature matrix and evidence labels of every candidate of the questions."""
    x = np.vstack([q["x"] for q in questions if len(q["dias"])])
    y = np.concatenate([[1.0 if d in q["evidence"] else 0.0 for d in q["dias"]] for q in questions])
    return x, y


def choose_ridge(tune: list[dict]) -> tuple[float, dict[float, float]]:
    """The ridge with the best mean recall@10 over leave-one-tuning-conversation-out folds (first on ties)."""
    convs = sorted({q["conv"] for q in tune})
    scores = {}
    for ridge in RIDGES:
        fold = []
        for held in convs:
            b = fit_logistic(*design([q for q in tune if q["conv"] != held]), ridge=ridge)
            test = [q for q in tune if q["conv"] == held]
            fold.append(statistics.mean(recall(r, q["evidence"], 10) for q, r in zip(test, rerank(test, b))))
        scores[ridge] = statistics.mean(fold)
    return max(scores, key=lambda r: (scores[r], -RIDGES.index(r))), scores


def recall10(questions: list[dict], ranked: list[list[str]], category: int | None = None) -> float:
    return statistics.mean(recall(r, q["evidence"], 10) for q, r in zip(questions, ranked)
                           if category is None or q["category"] == category)


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
    parser.add_argument("--output", type=Path, default=MODEL_FILE, help="the coefficients file; default: %(default)s")
    parser.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    parser.add_argument("--save-rows", type=Path, help="keep the collected rows in this pickle")
    parser.add_argument("--load-rows", type=Path, help="fit on rows saved by --save-rows (no database)")
    args = parser.parse_args()
    tuning = {n.strip() for n in args.tuning.split(",") if n.strip()}
    conversations = locomo.conversations()
    embedder = CachedEmbedder(get_embedder(None), args.cache)
    if args.load_rows:
        with open(args.load_rows, "rb") as f:
            names, questions = pickle.load(f)
    else:
        print(locomo.evidence_report(conversations))
        url = fresh_database(database_name(args.db, "fit_rerank"))
        with MemoryBank(url, embedder=embedder) as bank:
            for c in conversations:
                load(bank, c)
            bank.process_pending()
            embedder.save()
        embedder.prefetch_queries([q.question for c in conversations for q in c.scored_qas])
        names, questions = collect(url, conversations, embedder)
        if args.save_rows:
            with open(args.save_rows, "wb") as f:
                pickle.dump((names, questions), f)
    tune = [q for q in questions if q["conv"] in tuning]
    held = [q for q in questions if q["conv"] not in tuning]
    if args.ridge is None:
        ridge, folds = choose_ridge(tune)
        how = ("leave-one-conversation-out recall@10 "
               + ", ".join(f"{r:g}: {v:.3f}" for r, v in folds.items()))
    else:
        ridge, how = args.ridge, "given"
    b = fit_logistic(*design(tune), ridge=ridge)
    lists_t = {"first pass": [q["dias"] for q in tune], "re-ranked": rerank(tune, b)}
    lists_h = {"first pass": [q["dias"] for q in held], "re-ranked": rerank(held, b)}
    held_ids = sorted({q["conv"] for q in held})
    x, y = design(tune)
    lines = [f"{len(tune)} tuning questions x top {DEPTH}: {len(y)} rows ({int(y.sum())} evidence); ridge {ridge:g} "
             f"({how})"]
    for name, qs, ls in (("tuning " + ", ".join(sorted(tuning)), tune, lists_t),
                         ("held out " + ", ".join(held_ids), held, lists_h)):
        first, reranked = ls["first pass"], ls["re-ranked"]
        lines.append(f"{name}: recall@10 {recall10(qs, first):.3f} -> {recall10(qs, reranked):.3f}; "
                     + ", ".join(f"{c} {recall10(qs, first, k):.3f} -> {recall10(qs, reranked, k):.3f}"
                                 for k, c in CATEGORIES.items() if any(q["category"] == k for q in qs)))
    print("\n".join(lines))
    print("coefficients (unstandardised): " + ", ".join(f"{f} {v:+.4g}" for f, v in zip(["intercept", *names], b)))
    print("\n".join(table(f"tuning ({', '.join(sorted(tuning))})", tune, lists_t)))
    print("\n".join(table(f"held-out ({', '.join(held_ids)})", held, lists_h)))
    print("\nheld-out recall@10 per conversation")
    for name, ranked in lists_h.items():
        print(f"  {name:24s}" + "".join(
            f"  {c} {statistics.mean(recall(r, q['evidence'], 10) for q, r in zip(held, ranked) if q['conv'] == c):.3f}"
            for c in held_ids))
    if args.dry_run:
        return
    write_model(args.output, names, b, lines, tuning, conversations, embedder)
    print(f"wrote {args.output}")


def write_model(output: Path, names: list[str], b, lines: list[str], tuning: set[str], conversations,
                embedder) -> None:
    """Write the coefficients file (074_rerank_model.sql) for the fit just made."""
    digest = hashlib.sha256(b"".join((locomo.DATA / f"{c.id}.json").read_bytes() for c in conversations)).hexdigest()
    output.write_text(model_file_text(names, b, lines, tuning, [c.id for c in conversations], digest[:16],
                                      embedder.model_id, embedder.dimension, datetime.date.today().isoformat()))


def model_file_text(names: list[str], b, lines: list[str], tuning: set[str], conversations: list[str], digest: str,
                    model_id: str, dimension: int, date: str) -> str:
    """The coefficients file's text: the command, embedder, data, date and fit figures, then the function."""
    header = "\n".join("\n".join(textwrap.wrap(line, 116, initial_indent="--   ", subsequent_indent="--     "))
                       for line in lines)
    names_comment = "\n".join(textwrap.wrap("intercept, " + ", ".join(names), 112, initial_indent="    -- ",
                                             subsequent_indent="    --   "))
    values = "\n".join(textwrap.wrap(", ".join(f"{v:.6g}" for v in b), 108, initial_indent="        ",
                                      subsequent_indent="        "))
    return f"""\
-- Re-ranker model: coefficients of the logistic model of 076_rerank.sql (retrieve_memories' rerank).
-- GENERATED by bench/fit_rerank.py; do not edit: refit instead.
-- Command: MEMBANK_LOCOMO_DIR=../shared/data/locomo .venv/bin/python bench/fit_rerank.py \\
--   --tuning {','.join(sorted(tuning))}
-- Embedder: {model_id} ({dimension}-d), passages stored with context as in
--   bench/retrieval_quality.py; rows: the fused top {DEPTH} of candidate lists {LIST_DEPTH} deep (retrieve_memories'
--   defaults; membank_private.fused_memories) per question, features from membank_private.rerank_features.
-- Data: LoCoMo (Maharana et al., ACL 2024) conversations {', '.join(conversations)}, sha256 of the
--   files {digest}; fitted on {', '.join(sorted(tuning))} only.
-- Date: {date}
-- Fit:
{header}

-- name: rerank_coefficients: the fitted re-ranker's intercept and coefficients (rerank_feature_names order).
create or replace function membank_private.rerank_coefficients()
returns double precision[]
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
{names_comment}
    select array[
{values}
    ]::double precision [];
$$;
"""


if __name__ == "__main__":
    main()
