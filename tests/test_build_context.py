"""membank.build_context: the prompt context assembled in SQL, within the budget, for callers in any language.

On LoCoMo turns (../shared/data/locomo, or MEMBANK_LOCOMO_DIR) stored as memories and as a session's events.
"""

from __future__ import annotations

import math
import os
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import count_all_rows
from membank import MemoryBank
from membank.buffer import get_tokenizer
from membank.context import build_context, judge_memories
from conftest import connect_as as connect

ROOT = Path(__file__).resolve().parents[1]
U = {"user_id": "locomo-u", "app_name": "ctx"}
OTHER = {"user_id": "locomo-other", "app_name": "ctx"}
BUDGETS = (16, 24, 32, 48, 64, 100, 160, 250, 400, 640, 1000, 1600, 2500, 4000)
MEMORIES = 60  # of the conversation's turns, embedded (the rest are events only)


def locomo_conversation():
    sys.path.insert(0, str(ROOT / "bench"))
    import locomo

    for folder in (os.environ.get("MEMBANK_LOCOMO_DIR"), locomo.DATA, ROOT.parents[1] / "shared" / "data" / "locomo"):
        if folder and sorted(Path(folder).glob("*.json")):
            return locomo.load(sorted(Path(folder).glob("*.json"))[0])
    pytest.skip("no LoCoMo files: set MEMBANK_LOCOMO_DIR")


@pytest.fixture(scope="module")
def conversation():
    return locomo_conversation()


@pytest.fixture
def stocked(db_url, embedder, conversation):
    """U holds MEMORIES turns as memories (embedded) and every turn as events of session s1; OTHER holds a
    marked copy of some of them, and a session s1 of its own."""
    with MemoryBank(db_url, embedder=embedder, max_size=4) as bank:
        names = [bank.create_memory(U, t.fact).name for t in conversation.turns[:MEMORIES]]
        others = [bank.create_memory(OTHER, f"[other] {t.fact}").name for t in conversation.turns[:30]]
        events = [{"event_id": t.dia_id, "author": t.speaker, "text": t.text, "timestamp": t.time}
                  for t in conversation.turns]
        for start in range(0, len(events), 500):
            bank.append_events(U, "s1", events[start:start + 500])
        bank.append_events(OTHER, "s1", [{**e, "text": f"[other] {e['text']}"} for e in events[:50]])
        bank.process_pending()
        bank.update_memory(names[3], fact=conversation.turns[3].fact + " (edited)")  # revision 2
        bank.delete_memory(names[5])
        yield bank, names, others


def questions(conversation, n=6):
    return [q.question for q in conversation.qas[:n]]


def test_never_over_budget_on_locomo_turns(stocked, conversation):
    bank, _, _ = stocked
    tok = get_tokenizer()
    seen_sections = set()
    for question in questions(conversation):
        for budget in BUDGETS:
            # no relevance floor: the budget is the subject (min_relevance: tests/test_relevance.py)
            ctx = bank.build_context(U, question, session_id="s1", budget_tokens=budget, top_k=10, min_relevance=None)
            estimate = math.ceil(len(ctx["text"].encode()) / 3)
            assert ctx["tokens"] == estimate <= budget, (question, budget)
            assert tok.count(ctx["text"]) <= budget  # the estimate errs long for English: cl100k fits too
            seen_sections |= set(ctx["sections"])
            # the events kept are the newest, contiguous; the memories the non-blocked ones in rank order, less
            # those that did not fit
            kept = ctx["event_ids"]
            assert kept == [t.dia_id for t in conversation.turns][len(conversation.turns) - len(kept):]
            allowed = [v["memory_name"] for v in ctx["verdicts"] if v["verdict"] != "block"]
            chosen = [m["name"] for m in ctx["memories"]]
            assert chosen == [n for n in allowed if n not in ctx["dropped"]["memories"]]
        assert ctx["dropped"]["memories"] == [] and ctx["memories"]
    assert seen_sections == {"memories", "events"}


def test_every_verdict_equals_the_python_paths(stocked, conversation):
    bank, names, others = stocked
    expected = [names[5], others[0], names[7]]  # deleted, another scope's, and one that may not be retrieved

    def compare():
        for question in questions(conversation):
            sql = bank.build_context(U, question, session_id="s1", budget_tokens=4000, top_k=5, expected=expected,
                                     min_relevance=None)  # the same memories as retrieve_memories below
            retrieved = bank.retrieve_memories(U, question, top_k=5, rerank=True)  # build_context's default
            python, _ = judge_memories(bank, U, retrieved, expected=expected, session_id="s1", generated_lookback=5)
            assert [(v["memory_name"], v["verdict"], v["reason"], v["source"], v["rank"], v["revision"],
                     v["operation"]) for v in sql["verdicts"]] == [
                (str(v.memory_name), v.verdict, v.reason, v.source, v.rank, v.revision, v.operation) for v in python]
            blocked = {v["memory_name"] for v in sql["verdicts"] if v["verdict"] == "block"}
            assert {str(names[5]), str(others[0])} <= blocked
            assert not blocked & {m["name"] for m in sql["memories"]}  # a blocked memory never enters
            yield {v["verdict"] for v in sql["verdicts"]}

    assert set().union(*compare()) >= {"allow", "block", "degrade"}
    running = bank.generate_memories(U, session_id="s1", events=[{
        "event_id": "new", "author": "user", "text": "I moved to Porto.", "timestamp": datetime.now(timezone.utc)}])
    assert "wait" in set().union(*compare())
    assert running.get().done is False


def test_a_memory_of_another_scope_never_appears(stocked, conversation):
    bank, _, others = stocked
    for question in questions(conversation) + ["[other]"]:
        ctx = bank.build_context(U, question, session_id="s1", budget_tokens=4000, top_k=20,
                                 expected=[str(n) for n in others[:3]])
        assert "[other]" not in ctx["text"]
        assert not {str(n) for n in others} & {m["name"] for m in ctx["memories"]}
        assert all(v["verdict"] == "block" for v in ctx["verdicts"] if v["memory_name"] in map(str, others))
        assert all(v["scope"] == U for v in ctx["verdicts"] if v["verdict"] != "block")


def test_python_build_context_takes_the_long_term_part_from_sql(stocked, conversation):
    bank, _, _ = stocked
    question = questions(conversation)[0]
    for budget in (40, 400, 4000):
        python = build_context(bank, None, U, "s1", question, budget, top_k=5)
        sql = bank.build_context(U, question, session_id="s1", budget_tokens=budget, top_k=5, recent_events=0)
        assert [str(n) for n in python.memories] == [m["name"] for m in sql["memories"]][:len(python.memories)]
        assert python.tokens <= budget


def test_as_reader_in_one_call(login, stocked):  # noqa: F811
    bank, names, _ = stocked
    _, url = login("membank_reader")
    with connect(url) as reader:
        ctx = reader.execute("select membank.build_context(scopes => %s, session_id => 's1', query_text => 'support',"
                             " budget_tokens => 300) as c", (Jsonb(U),)).fetchone()["c"]
        assert ctx["tokens"] <= 300 and ctx["verdicts"]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("select membank.ingest_events(scope => %s)", (Jsonb(U),))


@pytest.mark.parametrize(("args", "argument"), [
    ({"budget_tokens": -1}, "budget_tokens"), ({"budget_tokens": None}, "budget_tokens"),
    ({"top_k": 0}, "top_k"), ({"recent_events": 1001}, "recent_events"), ({"session_id": ""}, "session_id"),
    ({"scopes": Jsonb({})}, "scopes"), ({"expected": ["not-a-uuid"]}, "expected"),
])
def test_bad_input_names_the_argument(conn, args, argument):
    before = count_all_rows(conn)
    call = {"scopes": Jsonb(U), "query_text": "tea", **args}
    named = ", ".join(f"{k} => %({k})s" for k in call)
    with pytest.raises((psycopg.errors.InvalidParameterValue, psycopg.errors.InvalidTextRepresentation)) as info:
        conn.execute(f"select membank.build_context({named})", call)
    assert info.value.diag.message_primary.startswith(argument)
    assert count_all_rows(conn) == before


def test_sessions_of_other_scopes_give_no_events(conn):
    for scope, text in ((U, "mine"), (OTHER, "theirs")):
        conn.execute("select membank.append_events(%s, 's9', %s)", (Jsonb(scope), Jsonb([{
            "event_id": uuid.uuid4().hex, "author": "user", "text": f"I said {text}", "timestamp": "2024-01-01T00:00Z"}])))
    ctx = conn.execute("select membank.build_context(scopes => %s, session_id => 's9') as c",
                       (Jsonb(U),)).fetchone()["c"]
    assert ctx["text"] == "## Recent turns\nuser: I said mine"


@pytest.mark.role("membank_reader")
def test_a_rerank_that_is_not_a_boolean_is_refused_naming_it(bank):
    """rerank is a boolean (None: the SQL default, on): anything else (text, a number) raises InvalidArgumentError
    naming rerank with a hint, before the server would answer 22P02 or 42846 naming no argument; a bool is taken."""
    from membank.errors import InvalidArgumentError

    for bad in ("x", "false", 1, 0.5):
        with pytest.raises(InvalidArgumentError) as refused:
            bank.build_context(U, "tea", rerank=bad)
        assert "rerank" in str(refused.value) and refused.value.hint, (bad, refused.value)
    for good in (True, False, None):
        assert bank.build_context(U, "tea", rerank=good)["memories"] == []
