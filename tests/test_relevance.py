"""Relevance (073_relevance.sql, fitted by bench/fit_relevance.py) and min_relevance: retrieval that can say
"nothing relevant".

The LoCoMo check loads one shared conversation (../shared/data/locomo, or
MEMBANK_LOCOMO_DIR) with the suite's real embedder, as the roles apps use.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import sys
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb

from conftest import connect_as
from membank import InvalidArgumentError, MemoryBank
from membank.cli import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import locomo  # noqa: E402
from fit_relevance import GIBBERISH  # noqa: E402

SCOPE = {"app_name": "relevance", "user_id": "locomo-26"}
BAD = (1.5, -0.01, float("nan"), float("inf"))


def conversation(name: str) -> locomo.Conversation:
    for folder in (os.environ.get("MEMBANK_LOCOMO_DIR"), locomo.DATA, ROOT.parents[1] / "shared" / "data" / "locomo"):
        if folder and (Path(folder) / f"{name}.json").exists():
            return locomo.load(Path(folder) / f"{name}.json")
    pytest.skip("no LoCoMo files: set MEMBANK_LOCOMO_DIR")


@pytest.mark.role("membank_reader")
def test_min_relevance_outside_0_1_or_nan_is_refused_naming_it(conn, bank):
    for value in BAD:
        for sql in ("select * from membank.retrieve_memories(%s, 'coffee', min_relevance => %s)",
                    "select membank.build_context(%s, query_text => 'coffee', min_relevance => %s)"):
            with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
                conn.execute(sql, (Jsonb(SCOPE), value))
            assert err.value.diag.message_primary.startswith("min_relevance: must be between 0 and 1")
            assert "default_min_relevance()" in err.value.diag.message_hint
        with pytest.raises(InvalidArgumentError) as err:
            bank.retrieve_memories(SCOPE, "coffee", min_relevance=value, use_embedding=False)
        assert err.value.argument == "min_relevance" and err.value.hint
        with pytest.raises(InvalidArgumentError) as err:
            bank.build_context(SCOPE, "coffee", min_relevance=value, use_embedding=False)
        assert err.value.argument == "min_relevance"
    # 0, 1 and null are accepted; the default floor is a probability
    for value in (0, 1, None):
        conn.execute("select * from membank.retrieve_memories(%s, 'coffee', min_relevance => %s)", (Jsonb(SCOPE), value))
    assert 0 < conn.execute("select membank.default_min_relevance() as d").fetchone()["d"] < 1


def test_min_relevance_out_of_range_is_one_line_and_exit_2_in_the_cli(db_url, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    result = CliRunner().invoke(main, ["memories", "retrieve", "--scope", json.dumps(SCOPE), "--query", "coffee",
                                       "--text-only", "--min-relevance", "1.5"])
    assert result.exit_code == 2 and "min_relevance: must be between 0 and 1" in result.output
    assert "Traceback" not in result.output
    # The hint speaks the CLI's options, not the Python client's None or a SQL function.
    assert "hint: relevance is the estimated probability that a memory is evidence for the query; " \
           "`--min-relevance default` is the bank's fitted floor; leave the option out to keep every row" \
           in result.output
    result = CliRunner().invoke(main, ["memories", "retrieve", "--scope", json.dumps(SCOPE), "--query", "coffee",
                                       "--text-only", "--min-relevance", "high"])
    assert result.exit_code == 2 and "'high' is neither a number from 0 to 1 nor 'default'" in result.output


def test_the_cli_takes_the_banks_default_floor_by_name(db_url, monkeypatch, embedder):
    """--min-relevance default applies membank.default_min_relevance(), as build_context and ADK do."""
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    with MemoryBank(db_url, embedder=embedder) as bank:
        for fact in ("The user drinks oat milk coffee every morning", "The user lives in Lisbon",
                     "The user plays the cello on Sundays"):
            bank.create_memory(SCOPE, fact)
        bank.process_pending(generation=False)
        floor = bank.default_min_relevance()
    args = ["memories", "retrieve", "--scope", json.dumps(SCOPE), "--min-relevance", "default", "--query"]
    gated = CliRunner().invoke(main, [*args, "zzzz qqqq"])
    assert gated.exit_code == 0 and json.loads(gated.stdout) == []
    assert f"none of the 3 best matches reaches relevance {floor}" in gated.stderr
    answered = CliRunner().invoke(main, [*args, "What does the user drink in the morning?"])
    assert [r["fact"] for r in json.loads(answered.stdout)][0] == (
        "The user drinks oat milk coffee every morning")


def test_relevance_is_a_probability_monotone_in_each_signal_as_documented(superuser):
    """Rises with the similarity, the query's best similarity and the match share; falls with the unknown
    share and the ranks (073_relevance.sql); stays within [0, 1] for every fitted coefficient."""
    def relevance(*signals):
        return superuser.execute("select membank_private.relevance(%s, %s, %s, %s, %s, %s) as r",
                                 signals).fetchone()["r"]

    sims, shares, ranks = (None, 0.7, 0.85, 0.95), (0, 0.5, 1), (1, 10, None)
    grid = list(itertools.product(sims, (0.8, 0.9), shares, shares, ranks, ranks))
    values = {g: relevance(*g) for g in grid}
    assert all(0 <= v <= 1 and not math.isnan(v) for v in values.values())
    assert max(values.values()) - min(values.values()) > 0.5  # the fitted model is not constant
    up = {0.7: 0.85, 0.85: 0.95}
    worse = {1: 10, 10: None}
    for (sim, top, match, unknown, vrank, trank), v in values.items():
        if sim in up:
            assert values[(up[sim], top, match, unknown, vrank, trank)] >= v
        if top == 0.8 and sim is not None:
            assert values[(sim, 0.9, match, unknown, vrank, trank)] >= v
        if match < 1:
            assert values[(sim, top, match + 0.5, unknown, vrank, trank)] >= v
        if unknown < 1:
            assert values[(sim, top, match, unknown + 0.5, vrank, trank)] <= v
        if vrank in worse and sim is not None:
            assert values[(sim, top, match, unknown, worse[vrank], trank)] <= v
        if trank in worse:
            assert values[(sim, top, match, unknown, vrank, worse[trank])] <= v


def test_answerability_is_a_probability_monotone_in_each_signal_and_1_without_a_query_vector(superuser):
    """The query-level factor of relevance (073_relevance.sql): rises with the top k's best row relevance and the
    query's best similarity, falls with its unknown share; 1 when the query has no vector (text model alone) or
    there is no row; within [0, 1] at the extremes (the logit is clamped, the sum too)."""
    def answerability(*signals):
        return superuser.execute("select membank_private.answerability(%s, %s, %s) as a", signals).fetchone()["a"]

    best, tops, unknowns = (0.0, 0.01, 0.3, 1.0), (0.7, 0.8, 0.85, 0.95), (0, 0.5, 1)
    values = {g: answerability(*g) for g in itertools.product(best, tops, unknowns)}
    assert all(0 <= v <= 1 and not math.isnan(v) for v in values.values())
    assert min(values.values()) < 0.01 and max(values.values()) > 0.99  # it separates, it is not constant
    for (b, top, unknown), v in values.items():
        if b != best[-1]:
            assert values[(best[best.index(b) + 1], top, unknown)] >= v
        if top != tops[-1]:
            assert values[(b, tops[tops.index(top) + 1], unknown)] >= v
        if unknown != unknowns[-1]:
            assert values[(b, top, unknowns[unknowns.index(unknown) + 1])] <= v
    assert answerability(0.3, None, 0.5) == 1 and answerability(None, 0.9, 0) == 1


@pytest.mark.embedded_only("run once per CI: minutes of embedding a LoCoMo conversation to check the fitted floor on"
                            " data; the relevance SQL itself runs on every server in this file's other tests")
def test_a_locomo_conversation_says_nothing_relevant_to_gibberish_and_other_conversations(db_url, login, embedder):
    """Conversation 26 stored (every turn a memory, the turn before as context) as a writer; at the default floor:
    every gibberish / stop-word query returns nothing (SQL, Python, build_context, ADK), at least 80 % of
    conversation 30's questions too, while recall@10 of conversation 26's own questions drops by at most 0.03
    (the tuning figures of db/functions/072_relevance_model.sql, one direction of the pair)."""
    own, other = conversation("26"), conversation("30")
    _, writer = login("membank_writer")
    with MemoryBank(writer, embedder=embedder, max_size=2) as bank, connect_as(writer) as c:
        for prev, t in zip([None, *own.turns], own.turns):
            c.execute("select membank.create_memory(scope => %s, fact => %s, metadata => %s, context => %s)",
                      (Jsonb(SCOPE), t.fact, Jsonb({"dia_id": t.dia_id}),
                       prev.fact if prev is not None and prev.session == t.session else None))
        _, admin = login("membank_admin")
        with MemoryBank(admin, embedder=embedder, max_size=2) as worker:
            worker.process_pending(generation=False)
        floor = bank.default_min_relevance()

        for query in GIBBERISH:
            assert len(bank.retrieve_memories(SCOPE, query, top_k=10)) == 10  # no floor: Vertex's top k
            found = bank.retrieve_memories(SCOPE, query, top_k=10, min_relevance=floor)
            assert list(found) == [] and found.below_threshold == 10, query
            assert list(c.execute("select * from membank.retrieve_memories(%s, %s, %s::real[], top_k => 10,"
                                  " min_relevance => %s)", (Jsonb(SCOPE), query, embedder.embed_query(query),
                                                            floor))) == [], query
            ctx = bank.build_context(SCOPE, query)
            assert ctx["memories"] == [] and ctx["below_threshold"] == 5, query
        rows = c.execute("select relevance from membank.retrieve_memories(%s, 'zzzz qqqq', %s::real[], top_k => 5)",
                         (Jsonb(SCOPE), embedder.embed_query("zzzz qqqq"))).fetchall()
        assert len(rows) == 5 and all(0 <= r["relevance"] < floor for r in rows)

        asked = [q.question for q in other.scored_qas]
        empty = [not bank.retrieve_memories(SCOPE, q, top_k=10, min_relevance=floor) for q in asked]
        assert sum(empty) / len(empty) >= 0.8, f"{sum(empty)} of {len(empty)}"

        def recall(found, qa):
            ids = {r.memory.metadata["dia_id"] for r in found}
            return sum(e in ids for e in qa.evidence) / len(qa.evidence)

        qas = own.scored_qas
        base = sum(recall(bank.retrieve_memories(SCOPE, q.question, top_k=10), q) for q in qas) / len(qas)
        cut = sum(recall(bank.retrieve_memories(SCOPE, q.question, top_k=10, min_relevance=floor), q)
                  for q in qas) / len(qas)
        assert base - cut <= 0.03, (base, cut)

    # The ADK memory service applies the floor by default: gibberish reaches no prompt.
    pytest.importorskip("google.adk")
    from membank.adk import MembankMemoryService

    with MemoryBank(writer, embedder=embedder, max_size=2) as bank:
        service = MembankMemoryService(bank)
        for query in GIBBERISH[:3]:
            response = asyncio.run(service.search_memory(app_name=SCOPE["app_name"], user_id=SCOPE["user_id"],
                                                         query=query))
            assert response.memories == [], query
        answered = asyncio.run(service.search_memory(app_name=SCOPE["app_name"], user_id=SCOPE["user_id"],
                                                     query=own.scored_qas[0].question))
        assert len(answered.memories) == 3  # the top_k, the best of them at or above the floor
        assert max(m.custom_metadata["relevance"] for m in answered.memories) >= bank.default_min_relevance()


def test_the_gate_judges_the_rows_returned_not_rows_tied_with_the_last(conn):
    """Two memories tied on fused score (vector ranks 1, 2; text ranks 2, 1) with top_k => 1: the SQL gate took
    the best relevance of both, so the row returned came back though its own relevance was under min_relevance
    (and the Python client, judging the rows returned, said nothing relevant)."""
    conn.execute("select membank.configure_embedding(model_id => 'test/exact', dimension => 2)")
    # zebra in two facts of six (a word in most facts has no IDF weight)
    sims = {"zebra one": 0.81, "quartz zebra two": 0.80, "a walk in the park": -0.5, "tea at noon": -0.6,
            "rain on sunday": -0.7, "a red bicycle": -0.8}
    for fact in sims:
        conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(SCOPE), fact))
    with conn.transaction():
        jobs = conn.execute("select * from membank.claim_embedding_jobs(10)").fetchall()
        conn.execute("select membank.store_embeddings('test/exact', 2, %s, %s, %s)",
                     ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs],
                      [f"[{sims[j['memory_fact']]},{(1 - sims[j['memory_fact']] ** 2) ** 0.5}]" for j in jobs]))

    def retrieve(top_k, min_relevance=None):
        return conn.execute("select fact, score, relevance from membank.retrieve_memories(%s, 'zebra quartz',"
                            " '{1,0}'::real[], top_k => %s, min_relevance => %s)",
                            (Jsonb(SCOPE), top_k, min_relevance)).fetchall()

    both = retrieve(2)
    assert [r["fact"] for r in both] == ["zebra one", "quartz zebra two"] and both[0]["score"] == both[1]["score"]
    first, second = both[0]["relevance"], both[1]["relevance"]
    assert first < second  # the row cut by top_k => 1 is the more relevant one
    floor = (first + second) / 2
    assert retrieve(1, floor) == []
    assert [r["fact"] for r in retrieve(2, floor)] == ["zebra one", "quartz zebra two"]
    assert [r["fact"] for r in retrieve(1, first)] == ["zebra one"]


@pytest.mark.role("membank_writer")
def test_query_signals_idf_total_is_query_idf_total(conn, superuser):
    """query_signals reads idf_total in its own statement (one read of the lexicon on Citus): the value is
    query_idf_total's (the separate read it replaced, kept as the reference), to the last bit: one scope
    and two, several texts (the largest counts), unknown and accented words, stop words only, a null text, and
    counts appended by a transaction's later writes (the lexicon delta)."""
    scopes = [{"user_id": "idf_a"}, {"user_id": "idf_b"}]
    facts = ["Maya works as a nurse in Lisbon", "Maya likes jazz and café au lait", "The nurse plays tennis",
             "Maya's brother lives in Berlin", "Tennis on sundays with Maya"]
    for i, fact in enumerate(facts):
        conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(scopes[i % 2]), fact))
    ids = [superuser.execute("select md5(%s::jsonb::text)::uuid as id", (Jsonb(s),)).fetchone()["id"]
           for s in scopes]
    queries = [["What is Maya's job?"], ["nurse Lisbon tennis", "jazz"], ["cafe"], ["zebra quartz"],
               ["the and of"], [None, "Berlin brother"], ["Maya Maya Maya", "zebra Maya"]]
    compare = ("select (membank_private.query_signals(%(t)s::text[], %(s)s::uuid[])).idf_total as signals,"
               " membank_private.query_idf_total(%(t)s::text[], %(s)s::uuid[]) as direct")

    def check() -> int:
        checked = 0
        for scope_ids in ([ids[0]], ids):
            for texts in queries:
                got = superuser.execute(compare, {"t": texts, "s": scope_ids}).fetchone()
                assert got["signals"] == got["direct"], (texts, scope_ids, got)
                checked += got["direct"] > 0
        return checked

    assert check() >= 8  # most queries know some words
    with superuser.transaction():  # a transaction's later writes: counts in the lexicon delta
        for fact in ("Maya adopted a zebra", "A quartz clock for the nurse"):
            superuser.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(scopes[0]), fact))
        assert superuser.execute("select (membank_private.scope_counts(%s::uuid[])).pending as p",
                                 ([ids[0]],)).fetchone()["p"]
        assert check() > 8  # zebra and quartz known now
        raise psycopg.Rollback


def test_the_model_file_is_what_fit_relevance_writes(superuser):
    """072_relevance_model.sql is bench/fit_relevance.py's output: regenerated from the coefficients, floor and
    figures it holds (as the server has them), it is the same bytes."""
    import re

    import fit_relevance

    text = fit_relevance.MODEL_FILE.read_text()

    def field(pattern):
        return re.search(pattern, text, re.M).groups()

    tuning, confirmation = field(r"^--   --tuning (\S+) --confirmation (\S+) \\$")
    max_loss, = field(r"^--   --max-recall-loss (\S+)$")
    model_id, dimension = field(r"^-- Embedder: (\S+) \((\d+)-d\)")
    conversations, digest = field(r"^-- Data: .* conversations (.+), sha256 of the\n--   files (\w+);")
    date, = field(r"^-- Date: (\S+)$")
    lines = [line[len("--   "):] for line in text.split("-- Fit:\n", 1)[1].split("\n\n", 1)[0].splitlines()]
    fitted = {m: superuser.execute("select membank_private.relevance_coefficients(%s) as c", (m,)).fetchone()["c"]
              for m in ("hybrid", "text", "query")}
    floor = superuser.execute("select membank.default_min_relevance() as f").fetchone()["f"]
    assert f"default min_relevance {floor}: " in text  # the figures are the floor's
    assert fit_relevance.model_file_text(
        fitted, floor, lines, set(tuning.split(",")), set(confirmation.split(",")), float(max_loss),
        conversations.split(", "), digest, model_id, int(dimension), date) == text


def test_the_default_floor_holds_the_recall_loss_on_both_paths():
    """fit_relevance chooses the floor on the first pass and on the re-ranked path (build_context's default): the
    largest threshold at which neither loses more than the allowed recall@10, though the first pass alone would
    allow a higher one."""
    import types

    import fit_relevance

    qa = [types.SimpleNamespace(evidence=(f"D1:{i}",)) for i in range(10)]

    def view(bests):  # every question's evidence in its top 10, its best relevance as given
        return {"own": [(q, [q.evidence[0]], b) for q, b in zip(qa, bests)], "other": [0.01, 0.2],
                "gibberish": [0.001]}

    views = {"first pass": view([0.9] * 9 + [0.05]), "re-ranked": view([0.9] * 8 + [0.03, 0.05])}
    assert fit_relevance.choose_floor({"first pass": views["first pass"]}, 0.1) == 0.9
    assert fit_relevance.choose_floor(views, 0.1) == 0.05  # 0.9 costs the re-ranked path 0.2
    assert fit_relevance.choose_floor(views, 0.05) == 0.03
    assert fit_relevance.choose_floor(views, 0.0) == 0.03  # the lowest candidate keeps every question
    a = fit_relevance.gate(views["re-ranked"], 0.05)
    assert (a["loss"], a["other_empty"], a["gibberish_empty"]) == (pytest.approx(0.1), 0.5, 1.0)
