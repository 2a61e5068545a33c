"""The re-ranker (retrieve_memories' rerank, 076_rerank.sql; coefficients 074_rerank_model.sql by bench/fit_rerank.py).

A second pass over the first pass's top 50: a fitted logistic model orders
them by where each was said relative to the top hits and by whether the
question names who said it.
"""

import json
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from psycopg.types.json import Jsonb

from conftest import connect_as
from membank import MemoryBank

ROOT = Path(__file__).resolve().parents[1]
MODEL_FILE = ROOT / "db" / "functions" / "074_rerank_model.sql"
T0 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
SCOPE = {"user_id": "melanie"}
QUERY = "Where did Melanie see a violin at the market?"
HIT = "Yesterday Melanie bought a violin at the market in Cremona"
# Said by Melanie right before the hit, in its session: it names the hit's town (a rare word the question
# lacks) and shares only the common word "market" with the question; the longest such fact, so the first
# pass ranks it last of them. Every distractor is Caroline's.
EVIDENCE = ("The Cremona workshop where she found it also keeps a stall at the Sunday market, run by the"
            " grandsons of the luthier who carved the scroll by hand")
DISTRACTORS = [f"The market on {day} sold {thing}" for day, thing in [
    ("Monday", "fish"), ("Tuesday", "bread"), ("Wednesday", "cheese"), ("Thursday", "apples"),
    ("Friday", "flowers"), ("Saturday", "honey"), ("Sunday", "olives"), ("the first", "lamps"),
    ("the second", "rugs"), ("the third", "books"), ("the fourth", "plates"), ("the fifth", "hats"),
    ("the sixth", "kites")]]
# So that "market" is in at most half the scope (a word in more does not seek text candidates).
FILLERS = [f"Melanie's cousin number {i} likes {thing}" for i, thing in enumerate(
    ["tea", "rain", "chess", "jazz", "trains", "maps", "soup", "snow", "clocks", "owls", "ferns", "dice", "tango",
     "kayaks", "puzzles", "stamps"])]


def said(conn, scope, session, turns, start=T0, author="user"):
    """Append the turns as events of the session (one second apart) and store each as a memory sourced by its event."""
    events = [{"event_id": f"{session}:{i}", "author": author, "text": text,
               "timestamp": (start + timedelta(seconds=i)).isoformat()} for i, text in enumerate(turns)]
    conn.execute("select membank.append_events(%s, %s, %s)", (Jsonb(scope), session, Jsonb(events)))
    for text, e in zip(turns, events):
        conn.execute("select membank.create_memory(scope => %s, fact => %s, source_event_ids => %s)",
                     (Jsonb(scope), text, [e["event_id"]]))


@pytest.fixture
def stored(login):
    """The evidence and the hit said by Melanie one after the other in session s1; each distractor by Caroline in
    a session of its own; fillers that match no query word, in none."""
    _, url = login("membank_writer")
    with connect_as(url) as conn:
        said(conn, SCOPE, "s1", [EVIDENCE, HIT], author="Melanie")
        for i, fact in enumerate(DISTRACTORS):
            said(conn, SCOPE, f"d{i}", [fact], start=T0 + timedelta(hours=i + 1), author="Caroline")
        for fact in FILLERS:
            conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(SCOPE), fact))


def facts(conn, **extra):
    args = "".join(f", {k} => %({k})s" for k in extra)
    return [r["fact"] for r in conn.execute(
        "select fact from membank.retrieve_memories(scope => %(scope)s, query_text => %(q)s" + ("" if "top_k" in extra else ", top_k => 10") + args + ")",
        {"scope": Jsonb(SCOPE), "q": QUERY, **extra}).fetchall()]


@pytest.mark.role("membank_reader")
def test_the_reranker_lifts_evidence_from_fused_rank_11_to_50_into_the_top_10(conn, stored):
    first = [r["fact"] for r in conn.execute(
        "select fact from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 50)",
        (Jsonb(SCOPE), QUERY)).fetchall()]
    assert first[0] == HIT and first.index(EVIDENCE) + 1 == 15  # the premise: fused rank 11..50
    assert EVIDENCE not in facts(conn) and facts(conn) == facts(conn, rerank=False)  # off is the default
    reranked = facts(conn, rerank=True)
    assert len(reranked) == 10 and reranked[0] == HIT
    assert EVIDENCE in reranked  # fused rank 15 -> the top 10 (2nd with 074's coefficients of 2026-12-03:
    # Melanie said it, whom the question names, right before the top hit)


@pytest.mark.role("membank_reader")
def test_the_python_client_passes_rerank(bank, stored):
    got = [r.memory.fact for r in bank.retrieve_memories(SCOPE, QUERY, top_k=10, rerank=True, use_embedding=False)]
    assert EVIDENCE in got
    assert EVIDENCE not in [r.memory.fact for r in bank.retrieve_memories(SCOPE, QUERY, top_k=10,
                                                                         use_embedding=False)]


@pytest.mark.role("membank_reader")
def test_rerank_orders_by_the_model_over_the_features_the_fit_reads(conn, stored, superuser):
    """The product's order and scores are the fitted model over the rows and features bench/fit_rerank.py reads (its
    own query: the first pass as a default call's candidate lists give it): the fit and the product compute the same
    numbers."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fit_rerank

    rows = superuser.execute(fit_rerank.ROWS_SQL, {"scope": Jsonb(SCOPE), "text": QUERY, "emb": None,
                                                   "k": fit_rerank.DEPTH, "depth": fit_rerank.LIST_DEPTH}).fetchall()
    fact = {r["name"]: r["fact"] for r in superuser.execute("select name, fact from membank_private.memories")}
    model = [{"fact": fact[r["name"]], "features": r["features"],
              "p": superuser.execute("select membank_private.rerank_probability(%s) as p",
                                     (r["features"],)).fetchone()["p"]} for r in rows]
    assert len(model) == 2 + len(DISTRACTORS)  # every memory with a query word (fewer than 50)
    names = superuser.execute("select membank_private.rerank_feature_names() as n").fetchone()["n"]
    assert {r["fact"]: dict(zip(names, r["features"]))["asked_author"] for r in model} == {
        f: 1 if f in (HIT, EVIDENCE) else 0 for f in [HIT, EVIDENCE, *DISTRACTORS]}
    assert all(len(r["features"]) == len(names) for r in model)
    expected = sorted(range(len(model)), key=lambda i: (-model[i]["p"], i))[:10]
    got = conn.execute("select fact, score from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 10,"
                       " rerank => true)", (Jsonb(SCOPE), QUERY)).fetchall()
    assert [r["fact"] for r in got] == [model[i]["fact"] for i in expected]
    assert [r["score"] for r in got] == pytest.approx([model[i]["p"] for i in expected])
    # the evidence's session signals (the hit said right after it, in the top 3, one turn away) and its author
    evidence = dict(zip(names, next(r["features"] for r in model if r["fact"] == EVIDENCE)))
    assert evidence["next_score"] == pytest.approx(1 / 11) and evidence["prev_score"] == 0
    assert evidence["session_top3"] == 1 and evidence["near_top5"] == 1
    assert evidence["asked_author"] == 1  # Melanie said it; the question names her


@pytest.mark.role("membank_reader")
def test_the_reranker_prefers_what_the_person_asked_about_said(conn, login, superuser):
    """asked_author: a memory whose source event's author the question names ranks above the same words said by
    another: the first pass ranks Caroline's shorter turn first, the re-ranker Melanie's, whom the question names."""
    scope = {"user_id": "duo"}
    _, url = login("membank_writer")
    with connect_as(url) as writer:
        for i, (author, text) in enumerate([("Caroline", "I bought a violin at the market"),
                                            ("Melanie", "I bought a violin at the market on my trip"),
                                            ("Caroline", "The weather was grey all week"),
                                            ("Melanie", "My kids love the beach in summer")]):
            writer.execute("select membank.append_events(%s, %s, %s)", (Jsonb(scope), f"s{i}", Jsonb([
                {"event_id": f"e{i}", "author": author, "text": text,
                 "timestamp": (T0 + timedelta(days=i)).isoformat()}])))
            writer.execute("select membank.create_memory(scope => %s, fact => %s, source_event_ids => %s)",
                           (Jsonb(scope), text, [f"e{i}"]))
    query = "What did Melanie buy at the market?"
    ask = ("select fact from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 2, rerank => %s)")
    assert [r["fact"] for r in conn.execute(ask, (Jsonb(scope), query, False))] == [
        "I bought a violin at the market", "I bought a violin at the market on my trip"]
    assert [r["fact"] for r in conn.execute(ask, (Jsonb(scope), query, True))] == [
        "I bought a violin at the market on my trip", "I bought a violin at the market"]
    sys.path.insert(0, str(ROOT / "bench"))
    import fit_rerank

    names = superuser.execute("select membank_private.rerank_feature_names() as n").fetchone()["n"]
    rows = superuser.execute(fit_rerank.ROWS_SQL, {"scope": Jsonb(scope), "text": query, "emb": None,
                                                   "k": fit_rerank.DEPTH, "depth": fit_rerank.LIST_DEPTH}).fetchall()
    asked = [dict(zip(names, r["features"]))["asked_author"] for r in rows]
    assert asked == [0, 1]  # Caroline's turn, then Melanie's: the only rows with a query word


@pytest.mark.role("membank_reader")
def test_rerank_keeps_the_relevance_floor_and_null_is_off(conn, stored, superuser):
    floor = conn.execute("select membank.default_min_relevance() as f").fetchone()["f"]
    # a text query no memory matches: nothing, with and without the second pass
    for rerank in (False, True):
        assert conn.execute("select * from membank.retrieve_memories(scope => %s, query_text => 'zzzz qqqq',"
                            " top_k => 5, min_relevance => %s, rerank => %s)",
                            (Jsonb(SCOPE), floor, rerank)).fetchall() == []
    # the gate judges the rows returned: the re-ranked top 2 are returned when one reaches the floor
    rows = conn.execute("select fact, relevance from membank.retrieve_memories(scope => %s, query_text => %s,"
                        " top_k => 2, min_relevance => 0, rerank => true)", (Jsonb(SCOPE), QUERY)).fetchall()
    assert [r["fact"] for r in rows] == facts(conn, rerank=True)[:2]
    best = max(r["relevance"] for r in rows)
    assert conn.execute("select count(*) as n from membank.retrieve_memories(scope => %s, query_text => %s,"
                        " top_k => 2, min_relevance => %s, rerank => true)",
                        (Jsonb(SCOPE), QUERY, min(1.0, best + 1e-9))).fetchone()["n"] == 0
    assert facts(conn, rerank=None) == facts(conn)  # null: off


def test_the_coefficients_file_is_what_fit_rerank_writes(superuser):
    """074_rerank_model.sql is bench/fit_rerank.py's output: regenerated from the values it holds, it is the same
    bytes; it names rerank_feature_names() in order and holds one coefficient each, plus the intercept."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fit_rerank

    text = MODEL_FILE.read_text()
    names = superuser.execute("select membank_private.rerank_feature_names() as n").fetchone()["n"]
    coefficients = superuser.execute("select membank_private.rerank_coefficients() as c").fetchone()["c"]
    assert len(coefficients) == len(names) + 1
    comment = " ".join(re.sub(r"^\s*--\s*", "", line) for line in
                       text.split("as $$\n", 1)[1].split("    select", 1)[0].splitlines())
    assert comment == "intercept, " + ", ".join(names)

    def field(pattern):
        return re.search(pattern, text, re.M).groups()

    tuning, = field(r"^--   --tuning (\S+)$")
    model_id, dimension = field(r"^-- Embedder: (\S+) \((\d+)-d\)")
    conversations, digest, = field(r"^-- Data: .* conversations (.+), sha256 of the\n--   files (\w+);")
    date, = field(r"^-- Date: (\S+)$")
    fit = text.split("-- Fit:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    lines = []
    for line in fit:
        if line.startswith("--     "):
            lines[-1] += " " + line[len("--     "):]
        else:
            lines.append(line[len("--   "):])
    assert fit_rerank.model_file_text(names, coefficients, lines, set(tuning.split(",")), conversations.split(", "),
                                      digest, model_id, int(dimension), date) == text


@pytest.mark.role("membank_reader")
def test_rerank_with_several_queries_a_large_top_k_and_without_a_query(conn, stored):
    """Sub-queries: their fused list re-ranked; top_k above 50: all of them; no query: the listing, unchanged."""
    rows = conn.execute("select fact, score from membank.retrieve_memories(scope => %s, query_texts => %s,"
                        " top_k => 10, rerank => true)", (Jsonb(SCOPE), ["violin", "market"])).fetchall()
    assert len(rows) == 10 and all(0 < r["score"] < 1 for r in rows)
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    everything = conn.execute("select fact from membank.retrieve_memories(scope => %s, query_text => %s,"
                              " top_k => 100, rerank => true)", (Jsonb(SCOPE), QUERY)).fetchall()
    first = conn.execute("select fact from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 100)",
                         (Jsonb(SCOPE), QUERY)).fetchall()
    assert sorted(r["fact"] for r in everything) == sorted(r["fact"] for r in first)
    listed = conn.execute("select fact, score from membank.retrieve_memories(scope => %s, rerank => true)",
                          (Jsonb(SCOPE),)).fetchall()
    assert len(listed) == 2 + len(DISTRACTORS) + len(FILLERS) and all(r["score"] is None for r in listed)


def test_the_cli_reranks_with_its_flag(db_url, monkeypatch, stored):

    from click.testing import CliRunner

    from membank.cli import main

    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    args = ["memories", "retrieve", "--scope", json.dumps(SCOPE), "--query", QUERY, "--text-only", "--top-k", "10",
            "--output", "json"]
    plain = CliRunner().invoke(main, args)
    reranked = CliRunner().invoke(main, [*args, "--rerank"])
    assert plain.exit_code == 0 and reranked.exit_code == 0, (plain.output, reranked.output)

    assert EVIDENCE not in [r["fact"] for r in json.loads(plain.stdout)]
    assert EVIDENCE in [r["fact"] for r in json.loads(reranked.stdout)]


def test_rerank_pairs_session_turns_only_within_a_scope(login):
    """A session name is a scope's own (source_session_id, text): in a call over two scopes the re-ranker's session
    features (prev/next score, shares a session with a top-3 hit, hits in its session, turns to the nearest top-5
    hit) must not pair a memory with another scope's memory said in a session of the same name, as session
    neighbours never do (069) and as Citus, which re-ranks each scope alone, does not. The same call with the other
    scope's session renamed gives the same scores."""
    _, writer_url = login("membank_writer")
    _, reader_url = login("membank_reader")
    a, b_same, b_other = {"user_id": "rr-a"}, {"user_id": "rr-b1"}, {"user_id": "rr-b2"}
    with connect_as(writer_url) as w:
        said(w, a, "s1", ["Melanie bought a violin at the market"])
        for i in range(6):
            w.execute("select membank.create_memory(scope => %s, fact => %s)",
                      (Jsonb(a), f"the market stall {i} sold fruit"))
        said(w, b_same, "s1", ["The violin market opened early", "Cremona luthiers sell violins there"])
        said(w, b_other, "elsewhere", ["The violin market opened early", "Cremona luthiers sell violins there"])
    with connect_as(reader_url) as r:
        def scores(b):
            return {row["fact"]: row["score"] for row in r.execute(
                "select fact, score from membank.retrieve_memories(scope => %s, query_text => 'violin market',"
                " top_k => 10, rerank => true) where scope = %s",
                (Jsonb([a, b]), Jsonb(a))).fetchall()}
        same, other = scores(b_same), scores(b_other)
        assert "Melanie bought a violin at the market" in same
        assert same == pytest.approx(other)


@pytest.mark.role("membank_reader")
def test_build_context_reranks_by_default(conn, bank, stored):
    """build_context puts memories into a prompt unasked: its default is the second pass (rerank => true), in its
    order; rerank => false (SQL, Python) keeps the first pass's, which misses the evidence at top 10."""
    def names(**extra):
        args = "".join(f", {k} => %({k})s" for k in extra)
        got = conn.execute("select membank.build_context(scopes => %(scope)s, query_text => %(q)s, top_k => 10,"
                           " min_relevance => null" + args + ") as c", {"scope": Jsonb(SCOPE), "q": QUERY, **extra})
        return [m["line"][2:] for m in got.fetchone()["c"]["memories"]]

    reranked = facts(conn, rerank=True)
    assert [json.loads(line) for line in names()] == reranked and EVIDENCE in reranked
    assert [json.loads(line) for line in names(rerank=False)] == facts(conn, rerank=False)
    lines = [m["line"] for m in bank.build_context(SCOPE, QUERY, top_k=10, min_relevance=None,
                                                   use_embedding=False)["memories"]]
    assert any(EVIDENCE in line for line in lines)
    lines = [m["line"] for m in bank.build_context(SCOPE, QUERY, top_k=10, min_relevance=None, rerank=False,
                                                   use_embedding=False)["memories"]]
    assert not any(EVIDENCE in line for line in lines)


@pytest.mark.role("membank_reader")
def test_the_adk_memory_service_reranks_by_default(bank, stored):
    """ADK's search_memory (and the preload tool over it) re-ranks unless told not to."""
    pytest.importorskip("google.adk")
    import asyncio

    from membank.adk import MembankMemoryService

    def found(**extra):
        service = MembankMemoryService(bank, top_k=10, min_relevance=None, scope_keys=(None, "user_id"), **extra)
        got = asyncio.run(service.search_memory(app_name="any", user_id=SCOPE["user_id"], query=QUERY))
        return [m.content.parts[0].text for m in got.memories]

    assert EVIDENCE in found()
    assert EVIDENCE not in found(rerank=False)


@pytest.mark.role("membank_reader")
def test_the_mcp_tool_reranks_when_asked(bank, stored):
    """MCP's retrieve_memories keeps retrieve_memories' default (the first pass) and takes rerank."""
    from membank.mcp_server import MembankTools

    tools = MembankTools(bank)
    first = [r["fact"] for r in tools.retrieve_memories(QUERY, top_k=10, scope=SCOPE)["results"]]
    reranked = [r["fact"] for r in tools.retrieve_memories(QUERY, top_k=10, rerank=True, scope=SCOPE)["results"]]
    assert EVIDENCE in reranked and EVIDENCE not in first
    assert reranked == [r.memory.fact for r in bank.retrieve_memories(SCOPE, QUERY, top_k=10, rerank=True)]
