"""Fit the relevance model (db/functions/073_relevance.sql) on LoCoMo and write db/functions/072_relevance_model.sql.

Data: every turn of the LoCoMo conversations stored as a memory, one scope
per conversation, embedded with the default model (as
bench/retrieval_quality.py loads them). Rows: the top 20 of
membank.retrieve_memories for each question with evidence (category 5
skipped) asked in its own conversation's scope (positive: an evidence turn;
negative: any other turn) and for each question of the *other* conversations
of the same set asked in this scope (every row negative). Features:
membank_private.relevance_features, the same SQL the product scores with.
Two models: 'hybrid' (query text and embedding) and 'text' (no embedding).

Fit: logistic regression by iteratively reweighted least squares (Newton's
method on the log-likelihood, with a small ridge 1e-3 on the standardised
features; Hastie, Tibshirani & Friedman, ESL 4.4.1). A feature whose fitted
coefficient has the sign opposite to the documented one (073_relevance.sql)
is dropped (its coefficient 0) and the model refitted, so that relevance
stays monotone in every signal.

Then the query-level model (membank_private.answerability, 'query'), fitted
the same way on one row per query: the logit of the best hybrid relevance in
its top 10, the query's best similarity (top_similarity) and unknown_share;
positive for a conversation's own questions, negative for other
conversations' questions and gibberish asked in its scope. A row's relevance
with a query vector is then its row relevance times the query's
answerability; the floor below is chosen on that product.

Default min_relevance: the largest threshold at which the tuning set's
hybrid recall@10 on answerable questions drops by at most --max-recall-loss,
a query's top 10 being left out when none of its rows reaches the threshold
(the gate retrieve_memories applies); reported with the share of other-conversation questions and of
gibberish / stop-word queries left with nothing, on the tuning and the
confirmation conversations (never fitted on).

Run (writes the SQL file; --dry-run prints only):
  MEMBANK_LOCOMO_DIR=../shared/data/locomo .venv/bin/python bench/fit_relevance.py
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import pickle
import sys
from pathlib import Path

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402
from retrieval_quality import CachedEmbedder, load  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.embedding import get_embedder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL_FILE = ROOT / "db" / "functions" / "072_relevance_model.sql"
TUNING = ("26", "30")
CONFIRMATION = ("41", "42", "43")
DEPTH = 20  # rows per query the model is fitted on
FEATURES = {
    # name: documented sign (073_relevance.sql), in relevance_features' order
    "hybrid": {"similarity": 1, "top_similarity": 1, "match_share": 1, "unknown_share": -1, "ln_vector_rank": -1, "ln_text_rank": -1,
               "both_lists": 1},
    "text": {"match_share": 1, "unknown_share": -1, "ln_text_rank": -1},
}
QUERY_FEATURES = {"logit_best_relevance": 1, "top_similarity": 1, "unknown_share": -1}
"""The query-level model (membank_private.answerability), over one row per query; documented signs."""
GIBBERISH = ("zzzz qqqq", "nonexistent", "the and or", "asdf jkl", "qwerty uiop", "xyzzy plugh", "of the a an",
             "is it to be", "blorft znax", "lorem ipsum dolor", "???", "and then but")
"""Queries no conversation answers: made-up words and stop words only (also used by retrieval_quality.py)."""

# top_similarity: the similarity of the vector list's first (vector_rank 1), as retrieve_memories takes it from
# its candidates; that row is in the top 20 (else the best similarity among them stands in).
ROWS_SQL = """
select r.metadata->>'dia_id',
       membank_private.relevance_features(
           r.similarity, coalesce(max(r.similarity) filter (where r.vector_rank = 1) over (),
                                  max(r.similarity) over ()),
           least(r.text_rank / nullif(q.idf_total, 0), 1), q.unknown_share, r.vector_rank, r.text_match_rank),
       r.relevance
from membank.retrieve_memories(scope => %(scope)s, query_text => %(text)s, query_embedding => %(emb)s::real[],
                               top_k => %(k)s) as r
cross join membank_private.query_signals(array[%(text)s], array[md5(%(scope)s::text)::uuid]) as q
"""


def retrieve(conn, scope: dict, text: str, emb: list[float] | None, k: int = DEPTH) -> list[tuple]:
    """(dia_id, features, relevance) of the top k rows of retrieve_memories for one query."""
    return conn.execute(ROWS_SQL, {"scope": Jsonb(scope), "text": text, "emb": emb, "k": k}).fetchall()


def fit_logistic(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3, iterations: int = 50) -> np.ndarray:
    """Logistic regression by IRLS on standardised features; returns [intercept, coefficients...] unstandardised."""
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / std])
    beta = np.zeros(z.shape[1])
    penalty = ridge * np.eye(z.shape[1])
    penalty[0, 0] = 0
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-z @ beta))
        w = np.clip(p * (1 - p), 1e-9, None)
        step = np.linalg.solve(z.T @ (z * w[:, None]) + penalty, z.T @ (y - p) - penalty @ beta)
        beta += step
        if np.max(np.abs(step)) < 1e-8:
            break
    coef = beta[1:] / std
    return np.concatenate([[beta[0] - np.sum(coef * mean)], coef])


def fit_signed(x: np.ndarray, y: np.ndarray, signs: list[int], ridge: float = 1e-3) -> tuple[np.ndarray, list[int]]:
    """Fit; drop (zero) the feature whose sign contradicts its documented one most, refit, until none does."""
    keep = list(range(x.shape[1]))
    dropped = []
    while True:
        b = fit_logistic(x[:, keep], y, ridge)
        full = np.zeros(x.shape[1] + 1)
        full[0] = b[0]
        full[[i + 1 for i in keep]] = b[1:]
        wrong = [(full[i + 1] * signs[i] * x[:, i].std(), i) for i in keep if full[i + 1] * signs[i] < 0]
        if not wrong:
            return full, dropped
        worst = min(wrong)[1]
        keep.remove(worst)
        dropped.append(worst)


def predict(b: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-(b[0] + x @ b[1:])))


def query_features(b_row: np.ndarray, rows, k: int = 10) -> list[float]:
    """answerability's features of one query (hybrid rows): logit of the best row relevance of its top k,
    top_similarity, unknown_share; the clamps are the SQL's."""
    best = float(np.clip(predict(b_row, np.array([r[1] for r in rows[:k]], dtype=float)).max(), 1e-9, 1 - 1e-9))
    return [np.log(best / (1 - best)), rows[0][1][1], rows[0][1][3]]


def scored(model: str, b: dict, rows, k: int = 10) -> np.ndarray:
    """The relevance retrieve_memories gives the top k rows: row relevance, times answerability with a vector."""
    p = predict(b[model], np.array([r[1] for r in rows[:k]], dtype=float))
    if model == "hybrid" and "query" in b:
        p = p * predict(b["query"], np.array(query_features(b[model], rows, k)))
    return p


def query_matrix(data: dict, b_row: np.ndarray, sizes: list[tuple[int, int]] | None = None,
                 scope: int | None = None, leave_out: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One row per query with rows: own questions 1, other conversations' questions and gibberish 0.

    With sizes (per scope, in collect's order: its own questions, the other
    conversations' questions asked in it), only the queries asked in scope
    number `scope` (or, with leave_out, in every other scope).
    """
    where = {"own": [], "other": [], "gibberish": []}
    for i, (n_own, n_other) in enumerate(sizes or []):
        where["own"] += [i] * n_own
        where["other"] += [i] * n_other
        where["gibberish"] += [i] * len(GIBBERISH)

    def chosen(kind, j):
        return sizes is None or (where[kind][j] != scope) == leave_out

    queries = ([(rs, 1.0) for j, (_, rs) in enumerate(data["own"]) if rs and chosen("own", j)]
               + [(rs, 0.0) for j, rs in enumerate(data["other"]) if rs and chosen("other", j)]
               + [(rs, 0.0) for j, rs in enumerate(data["gibberish"]) if rs and chosen("gibberish", j)])
    return (np.array([query_features(b_row, rs) for rs, _ in queries]), np.array([y for _, y in queries]))


RIDGES = (1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0)


def choose_ridge(data: dict, b_row: np.ndarray, sizes: list[tuple[int, int]]) -> tuple[float, list[str]]:
    """The query model's ridge: the least mean log loss over leave-one-scope-out folds of the tuning set.

    The tuning queries are nearly separable (a scope's own questions against
    the others'), so a small ridge gives huge coefficients and overconfident
    probabilities elsewhere; the folds say how much to shrink them.
    """
    losses = {}
    for ridge in RIDGES:
        fold = []
        for i in range(len(sizes)):
            x, y = query_matrix(data, b_row, sizes, i, leave_out=True)
            xv, yv = query_matrix(data, b_row, sizes, i)
            fold.append(log_loss(predict(fit_logistic(x, y, ridge=ridge), xv), yv))
        losses[ridge] = float(np.mean(fold))
    best = min(losses, key=losses.get)
    return best, [f"  ridge {best}: the least leave-one-scope-out log loss over the tuning scopes of",
                  "    " + ", ".join(f"{r:g}: {v:.3f}" for r, v in losses.items())]


def auc(p: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U, ties counted half)."""
    order = np.argsort(p, kind="stable")
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    for value in np.unique(p):  # average ranks of ties
        tie = p == value
        ranks[tie] = ranks[tie].mean()
    pos = y == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)) if n_pos and n_neg else float("nan")


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def collect(conn, conversations, scopes, names, embedder, use_embedding: bool) -> dict:
    """Rows of the conversations named: own questions (labelled) and other conversations' questions (negatives)."""
    chosen = [(c, s) for c, s in zip(conversations, scopes) if c.id in names]
    own, other = [], []
    for conv, scope in chosen:
        for qa in conv.scored_qas:
            emb = embedder.embed_query(qa.question) if use_embedding else None
            rows = retrieve(conn, scope, qa.question, emb)
            own.append((qa, [(d, f, r, d in qa.evidence) for d, f, r in rows]))
        for asker, _ in chosen:
            if asker.id == conv.id:
                continue
            for qa in asker.scored_qas:
                emb = embedder.embed_query(qa.question) if use_embedding else None
                other.append([(d, f, r, False) for d, f, r in retrieve(conn, scope, qa.question, emb)])
    gibberish = []
    for _, scope in chosen:
        for text in GIBBERISH:
            emb = embedder.embed_query(text) if use_embedding else None
            gibberish.append([(d, f, r, False) for d, f, r in retrieve(conn, scope, text, emb)])
    return {"own": own, "other": other, "gibberish": gibberish}


def matrix(data: dict) -> tuple[np.ndarray, np.ndarray]:
    rows = [row for _, rs in data["own"] for row in rs] + [row for rs in data["other"] for row in rs]
    return (np.array([r[1] for r in rows], dtype=float), np.array([1.0 if r[3] else 0.0 for r in rows]))


def abstention(data: dict, model: str, b: dict, threshold: float, k: int = 10) -> dict:
    """recall@k without and with the threshold, share of other / gibberish queries with nothing at or above it."""
    def kept(rows):
        rows = rows[:k]
        return rows if rows and scored(model, b, rows, k).max() >= threshold else []

    def recall(qa, rows):
        top = {r[0] for r in rows}
        return sum(e in top for e in qa.evidence) / len(qa.evidence)

    base = np.mean([recall(qa, rows[:k]) for qa, rows in data["own"]])
    cut = np.mean([recall(qa, kept(rows)) for qa, rows in data["own"]])
    return {"recall": base, "recall_cut": cut, "loss": base - cut,
            "other_empty": np.mean([not kept(rows) for rows in data["other"]]),
            "gibberish_empty": np.mean([not kept(rows) for rows in data["gibberish"]]),
            "own_empty": np.mean([not kept(rows) for _, rows in data["own"]])}


def sql_array(b: np.ndarray) -> str:
    return "array[" + ", ".join(f"{v:.6g}" for v in b) + "]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_db_argument(parser, "fit_relevance")
    parser.add_argument("--tuning", default=",".join(TUNING), metavar="NAMES")
    parser.add_argument("--confirmation", default=",".join(CONFIRMATION), metavar="NAMES")
    parser.add_argument("--cache", default="/tmp/membank_bench_embeddings.npz", type=Path)
    parser.add_argument("--max-recall-loss", type=float, default=0.02,
                        help="the most hybrid recall@10 the default min_relevance may cost on the tuning set")
    parser.add_argument("--output", type=Path, default=MODEL_FILE)
    parser.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    parser.add_argument("--save-rows", type=Path, help="also keep the collected rows in this pickle (to study them)")
    parser.add_argument("--load-rows", type=Path, help="fit on rows saved by --save-rows (no database)")
    args = parser.parse_args()
    tuning = {n.strip() for n in args.tuning.split(",") if n.strip()}
    confirmation = {n.strip() for n in args.confirmation.split(",") if n.strip()}
    if args.load_rows:
        with open(args.load_rows, "rb") as f:
            data = pickle.load(f)
        conversations = [c for c in locomo.conversations() if c.id in tuning | confirmation]
        fit_and_write(args, data, conversations, CachedEmbedder(get_embedder(None), args.cache), tuning, confirmation)
        return

    conversations = [c for c in locomo.conversations() if c.id in tuning | confirmation]
    url = fresh_database(database_name(args.db, "fit_relevance"))
    embedder = CachedEmbedder(get_embedder(None), args.cache)
    with MemoryBank(url, embedder=embedder) as bank:
        scopes = [load(bank, c) for c in conversations]
        bank.process_pending()
        embedder.save()
    embedder.prefetch_queries([q.question for c in conversations for q in c.scored_qas] + list(GIBBERISH))
    data = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for model, use_embedding in (("hybrid", True), ("text", False)):
            for name, ids in (("tuning", tuning), ("confirmation", confirmation)):
                data[model, name] = collect(conn, conversations, scopes, ids, embedder, use_embedding)
    embedder.save()
    if args.save_rows:
        with open(args.save_rows, "wb") as f:
            pickle.dump(data, f)
    fit_and_write(args, data, conversations, embedder, tuning, confirmation)


def fit_and_write(args, data, conversations, embedder, tuning, confirmation) -> None:
    """Fit both models on the collected rows, choose the default floor, print and (unless --dry-run) write."""

    fitted, lines = {}, []
    for model, signs in FEATURES.items():
        x, y = matrix(data[model, "tuning"])
        b, dropped = fit_signed(x, y, list(signs.values()))
        fitted[model] = b
        xc, yc = matrix(data[model, "confirmation"])
        lines.append(f"{model}: {len(y)} tuning rows ({int(y.sum())} positive); dropped for their sign: "
                     f"{', '.join(list(signs)[i] for i in dropped) or 'none'}")
        lines.append(f"  log loss {log_loss(predict(b, x), y):.4f} tuning, {log_loss(predict(b, xc), yc):.4f} "
                     f"confirmation; AUC {auc(predict(b, x), y):.4f} tuning, {auc(predict(b, xc), yc):.4f} confirmation")
    xq, yq = query_matrix(data["hybrid", "tuning"], fitted["hybrid"])
    sizes = [(len(c.scored_qas), sum(len(o.scored_qas) for o in conversations if o.id in tuning and o.id != c.id))
             for c in conversations if c.id in tuning]
    ridge, ridge_lines = choose_ridge(data["hybrid", "tuning"], fitted["hybrid"], sizes)
    b, dropped = fit_signed(xq, yq, list(QUERY_FEATURES.values()), ridge)
    fitted["query"] = b
    xqc, yqc = query_matrix(data["hybrid", "confirmation"], fitted["hybrid"])
    lines.append(f"query (answerability): {len(yq)} tuning queries ({int(yq.sum())} own); dropped for their sign: "
                 f"{', '.join(list(QUERY_FEATURES)[i] for i in dropped) or 'none'}")
    lines.append(f"  log loss {log_loss(predict(b, xq), yq):.4f} tuning, {log_loss(predict(b, xqc), yqc):.4f} "
                 f"confirmation; AUC {auc(predict(b, xq), yq):.4f} tuning, {auc(predict(b, xqc), yqc):.4f} "
                 "confirmation")
    lines += ridge_lines
    # The default threshold: on the tuning set, hybrid.
    # Candidates: each tuning question's best relevance in its top 10 (3 significant digits), tried from the
    # lowest up; the last one within the allowed loss is kept.
    threshold = 0.0
    best = [scored("hybrid", fitted, rows).max() for _, rows in data["hybrid", "tuning"]["own"] if rows]
    for t in sorted({float(f"{v:.3g}") for v in best}):
        if abstention(data["hybrid", "tuning"], "hybrid", fitted, t)["loss"] <= args.max_recall_loss:
            threshold = t
        else:
            break
    lines.append(f"default min_relevance {threshold} (largest at which tuning hybrid recall@10 loses at most "
                 f"{args.max_recall_loss})")
    for model in FEATURES:
        for name in ("tuning", "confirmation"):
            a = abstention(data[model, name], model, fitted, threshold)
            lines.append(f"  {model} {name}: recall@10 {a['recall']:.3f} -> {a['recall_cut']:.3f} "
                         f"(loss {a['loss']:.3f}); empty for: other conversations' questions "
                         f"{a['other_empty']:.1%},")
            lines.append(f"    gibberish {a['gibberish_empty']:.1%}, own questions {a['own_empty']:.1%}")
    print("\n".join(lines))
    if args.dry_run:
        return

    digest = hashlib.sha256(b"".join((locomo.DATA / f"{c.id}.json").read_bytes() for c in conversations)).hexdigest()
    header = "\n".join(f"--   {line}" for line in lines)
    args.output.write_text(f"""\
-- Relevance model: coefficients of the logistic model of 073_relevance.sql.
-- GENERATED by bench/fit_relevance.py; do not edit: refit instead.
-- Command: MEMBANK_LOCOMO_DIR=../shared/data/locomo .venv/bin/python bench/fit_relevance.py \\
--   --tuning {','.join(sorted(tuning))} --confirmation {','.join(sorted(confirmation))} \\
--   --max-recall-loss {args.max_recall_loss}
-- Embedder: {embedder.model_id} ({embedder.dimension}-d), passages stored with context as in
--   bench/retrieval_quality.py; rows: top {DEPTH} of retrieve_memories (defaults) per query.
-- Data: LoCoMo (Maharana et al., ACL 2024) conversations {', '.join(c.id for c in conversations)}, sha256 of the
--   files {digest[:16]}; fitted on {', '.join(sorted(tuning))} only.
-- Date: {datetime.date.today().isoformat()}
-- Fit:
{header}

-- name: relevance_coefficients: the fitted logistic model's intercept and coefficients (relevance_features order).
create or replace function membank_private.relevance_coefficients(model text)
returns double precision[]
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select case model
        -- intercept, {', '.join(FEATURES['hybrid'])}
        when 'hybrid' then {sql_array(fitted['hybrid'])}
        -- intercept, {', '.join(FEATURES['text'])}
        when 'text' then {sql_array(fitted['text'])}
        -- answerability: intercept, {', '.join(QUERY_FEATURES)}
        when 'query' then {sql_array(fitted['query'])}
    end::double precision [];
$$;

-- name: default_min_relevance: the min_relevance of the paths that put memories into a prompt unasked.
create or replace function membank.default_min_relevance()
returns double precision
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
    select {threshold}::double precision;
$$;

comment on function membank.default_min_relevance() is
$$The min_relevance (0..1) that build_context and the ADK memory service apply by default: the largest threshold at
which hybrid recall@10 on the tuning LoCoMo conversations ({', '.join(sorted(tuning))}) dropped by at most
{args.max_recall_loss}, fitted with the relevance coefficients by bench/fit_relevance.py (see
db/functions/072_relevance_model.sql for the figures). retrieve_memories applies none unless asked. Raises nothing
(a constant of the fitted model).$$;
""")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
