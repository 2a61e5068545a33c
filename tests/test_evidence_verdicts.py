"""membank.evidence_verdicts: the context boundary's judgement in SQL, in one round trip, bound to the given scopes."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import psycopg
import pytest

from membank import InvalidArgumentError, MemoryBank
from membank.context import build_context

U1 = {"user_id": "u1", "app_name": "shop"}
OTHER = {"user_id": "u2", "app_name": "shop"}


@pytest.fixture
def vbank(db_url, embedder):
    with MemoryBank(db_url, embedder=embedder, max_size=4) as bank:
        yield bank


def event(text):
    return {"event_id": uuid.uuid4().hex, "author": "user", "text": text, "timestamp": datetime.now(timezone.utc)}


def test_build_context_judges_every_memory_in_one_round_trip(vbank, make_buffer, monkeypatch):
    for fact in ("User is allergic to peanuts", "User lives in Lisbon", "User plays the cello", "User likes tea"):
        vbank.create_memory(U1, fact)
    vbank.process_pending()
    note = vbank.create_memory(U1, "Parking spot is B12 in the north garage")
    vbank.generate_memories(U1, session_id="s1", events=[event("I moved to Porto last month.")])  # left running
    calls = []
    real = MemoryBank._call

    def counting(self, function, args, **kwargs):
        calls.append(function)
        return real(self, function, args, **kwargs)

    monkeypatch.setattr(MemoryBank, "_call", counting)
    ctx = build_context(vbank, make_buffer(), U1, "s1", "what is the user allergic to?", 1000, top_k=4,
                        expected=[note.name])
    # The long-term part is one call (membank.build_context: retrieval, the judgement and the profiles; no
    # get_memory / list_revisions / list_operations per memory).
    assert calls == ["build_context"]
    assert len(ctx.verdicts) == 5 and {v.verdict for v in ctx.verdicts} == {"wait"} and len(ctx.memories) == 5


def test_a_sql_caller_as_reader_gets_verdicts_bound_to_its_scopes(conn):
    def create(scope, fact):
        return conn.execute("select (membank.create_memory(scope => %s::jsonb, fact => %s)).name::text as n",
                            (json.dumps(scope), fact)).fetchone()["n"]

    mine, stale, gone = (create(U1, f) for f in ("User likes tea", "User's locker is 12", "User's code is 1234"))
    theirs = create(OTHER, "Other user's secret is zanzibar")
    theirs_gone = create(OTHER, "Other user's pin is marmalade")
    conn.execute("select membank.update_memory(name => %s, fact => 'User''s locker is 14')", (stale,))
    conn.execute("select membank.delete_memory(name => %s)", (gone,))
    conn.execute("select membank.delete_memory(name => %s)", (theirs_gone,))
    retrieved = [{"name": mine, "scope": U1, "revision": 1, "degraded": False},
                 {"name": stale, "scope": U1, "revision": 1},
                 {"name": gone, "scope": U1, "revision": 1},
                 {"name": theirs, "scope": OTHER, "revision": 1},  # a leaking retriever, honest about the scope
                 {"name": theirs, "scope": U1, "revision": 1}]  # ... or lying about it
    conn.execute("set role membank_reader")
    try:
        rows = conn.execute("select * from membank.evidence_verdicts(scopes => %s::jsonb, session_id => 's',"
                            " retrieved => %s::jsonb, expected => %s::text[])",
                            (json.dumps(U1), json.dumps(retrieved), [theirs_gone, mine])).fetchall()
    finally:
        conn.execute("reset role")
    got = [(str(r["memory_name"]), r["verdict"], r["reason"], r["source"], r["rank"]) for r in rows]
    assert got == [
        (mine, "allow", "retrieved in scope, current revision, embedded", "retrieval", 1),
        (stale, "degrade", "stale revision: retrieved revision 1, current 2; the current revision enters",
         "retrieval", 2),
        (gone, "block", "deleted (revision 2)", "retrieval", 3),
        (theirs, "block", "scope differs from the requested scopes", "retrieval", 4),
        (theirs, "block", "not fetchable: no memory or revision of that name in its scope", "retrieval", 5),
        (theirs_gone, "block", "expected but not fetchable in the requested scopes", "expected", None),
    ]  # mine is not repeated as expected: it was retrieved
    assert rows[1]["fact"] == "User's locker is 14" and rows[1]["revision"] == 2
    assert rows[2]["revision"] == 2 and rows[2]["fact"] is None
    # Another scope's memory: no text, and no evidence of its state (revision, times) either.
    for r in rows[3:]:
        assert r["fact"] is None and r["revision"] is None and r["update_time"] is None and r["create_time"] is None
    assert not any(w in json.dumps(r, default=str) for r in rows for w in ("zanzibar", "marmalade"))


def test_expired_memory_is_blocked_on_state(conn):
    name = conn.execute("select (membank.create_memory(scope => %s::jsonb, fact => 'temporary', ttl => '1 hour'))"
                        ".name::text as n", (json.dumps(U1),)).fetchone()["n"]
    # Move time explicitly: the memory expired an hour ago (the purge has not run).
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 hour'"
                 " where name = %s", (name,))
    [row] = conn.execute("select * from membank.evidence_verdicts(scopes => %s::jsonb, expected => %s::text[])",
                         (json.dumps(U1), [name])).fetchall()
    assert (row["verdict"], row["reason"], row["fact"]) == ("block", "expired", None)
    assert row["expire_time"] < row["checked_time"]


def test_the_session_operations_give_wait_and_expected(vbank):
    op = vbank.generate_memories(U1, session_id="s1", events=[event("My locker at the gym is number 31.")]).wait(
        30, process=True)
    [made] = [g.memory for g in op.generated_memories if g.action == "CREATED"]
    rows = vbank.evidence_verdicts(U1, session_id="s1", generated_lookback=5)
    assert [(r["memory_name"], r["verdict"], r["source"]) for r in rows] == [(made.name, "degrade", "expected")]
    assert vbank.evidence_verdicts(U1, session_id="s1", generated_lookback=0) == []
    assert vbank.evidence_verdicts(U1, session_id="s2", generated_lookback=5) == []
    running = vbank.generate_memories(U1, session_id="s1", events=[event("I moved to Porto last month.")])
    rows = vbank.evidence_verdicts(U1, session_id="s1", generated_lookback=5)
    assert [(r["verdict"], r["operation"]) for r in rows] == [("wait", running.name)]
    running.wait(30, process=True)


@pytest.mark.parametrize("kwargs,argument", [
    ({"scopes": "{}"}, "scopes"),
    ({"retrieved": '{"name": "x"}'}, "retrieved"),
    ({"retrieved": '[{"name": "00000000-0000-0000-0000-000000000001"}]'}, "retrieved"),  # no scope
    ({"retrieved": '[{"name": "00000000-0000-0000-0000-000000000001", "scope": {"u": "1"}, "revision": "2"}]'},
     "retrieved"),
    ({"generated_lookback": -1}, "generated_lookback"),
])
def test_bad_input_is_22023_naming_the_argument(conn, kwargs, argument):
    args = {"scopes": json.dumps(U1), "retrieved": "[]", "generated_lookback": 5, **kwargs}
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute("select * from membank.evidence_verdicts(scopes => %(scopes)s::jsonb,"
                     " retrieved => %(retrieved)s::jsonb, generated_lookback => %(generated_lookback)s)", args)
    assert err.value.diag.message_primary.startswith(f"{argument}:") and err.value.diag.message_hint


@pytest.mark.parametrize("kwargs,argument", [
    ({"retrieved": '[{"name": "nope", "scope": {"u": "1"}}]'}, "retrieved"),
    ({"expected": ["nope"]}, "expected"),
])
def test_a_malformed_name_is_22p02_naming_the_argument(conn, kwargs, argument):
    args = {"retrieved": "[]", "expected": [], **kwargs}
    with pytest.raises(psycopg.errors.InvalidTextRepresentation) as err:
        conn.execute("select * from membank.evidence_verdicts(scopes => '{\"u\": \"1\"}',"
                     " retrieved => %(retrieved)s::jsonb, expected => %(expected)s::text[])", args)
    assert err.value.diag.message_primary.startswith(f"{argument}:")


def test_the_client_names_bad_scopes(vbank):
    with pytest.raises(InvalidArgumentError) as err:
        vbank.evidence_verdicts([], session_id="s")
    assert err.value.argument == "scopes"
