"""Session neighbours in retrieval (069_session_neighbours.sql): the memories said just before and after a hit.

Text-only queries, so every fused score is an exact RRF value (rrf_k 10):
the one text hit at rank 1 scores 1/11; the memory said right before it
gains 1 x that, the one said right after it 0.5 x that.
"""

from datetime import datetime, timedelta, timezone

import pytest
from psycopg.types.json import Jsonb

from conftest import connect_as
from membank import InvalidArgumentError, MemoryBank

A, B = {"user_id": "a"}, {"user_id": "b"}
T0 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
QUERY = "instrument market"


def said(conn, scope, session, turns, start=T0):
    """Append the turns as events of the session (one second apart) and store each as a memory sourced by its event."""
    events = [{"event_id": f"{session}:{i}", "author": "user", "text": text,
               "timestamp": (start + timedelta(seconds=i)).isoformat()} for i, text in enumerate(turns)]
    conn.execute("select membank.append_events(%s, %s, %s)", (Jsonb(scope), session, Jsonb(events)))
    return [conn.execute("select name from membank.create_memory(scope => %s, fact => %s,"
                         " source_event_ids => %s)", (Jsonb(scope), text, [e["event_id"]])).fetchone()["name"]
            for text, e in zip(turns, events)]


def retrieve(conn, scope, **extra):
    """Fact -> score of a text query in ``scope``; the lever at its tuned weight 1 unless ``extra`` names one."""
    extra = {"neighbour_weight": 1.0, **extra}
    args = "".join(f", {k} => %({k})s" for k in extra)
    return {r["fact"]: r["score"] for r in conn.execute(
        "select fact, score from membank.retrieve_memories(scope => %(scope)s, query_text => %(q)s, top_k => 10"
        + args + ")", {"scope": Jsonb(scope), "q": QUERY, **extra}).fetchall()}


@pytest.fixture
def turns(login, superuser):
    """Scope A, session s1: a guess, the hit, an expired turn, a deleted turn, then the answer (no query word).

    Scope B holds a session of the same id whose turns fall between A's in time. Written by a writer login.
    """
    _, url = login("membank_writer")
    with connect_as(url) as conn:
        return stored(conn, superuser)


def stored(conn, superuser):
    names = said(conn, A, "s1", ["Guess what happened today",
                                 "I bought an instrument at the market",
                                 "Expired: it came in a red case",
                                 "Deleted: it came in a blue case",
                                 "A violin, handmade in Cremona"])
    said(conn, B, "s1", ["B: a drum from the fair", "B: a flute from the fair"],
         start=T0 + timedelta(milliseconds=1500))
    # time moved explicitly: the row's expiry is set in the past (the trigger copies it to memory_embeddings)
    superuser.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 s'"
                      " where name = %s", (names[2],))
    conn.execute("select membank.delete_memory(%s)", (str(names[3]),))
    return names


@pytest.mark.role("membank_writer")
def test_the_answer_said_after_a_hit_is_reached_only_through_its_session(conn, turns):
    hit = 1 / 11
    assert retrieve(conn, A) == pytest.approx({
        "I bought an instrument at the market": hit,
        "Guess what happened today": hit,                  # said right before the hit: 1 x its score
        "A violin, handmade in Cremona": 0.5 * hit,        # the next live turn after it: 0.5 x
    })
    # off: only the text hit (the answer shares no word with the question)
    assert retrieve(conn, A, neighbour_weight=0.0) == pytest.approx({"I bought an instrument at the market": hit})
    # and off is the default (it suits turns, not facts generated from a session: docs/retrieval.md)
    assert {r["fact"] for r in conn.execute(
        "select fact from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 10)", (Jsonb(A), QUERY))
    } == {"I bought an instrument at the market"}
    assert retrieve(conn, A, neighbour_weight=2.0) == pytest.approx({
        "I bought an instrument at the market": hit, "Guess what happened today": 2 * hit,
        "A violin, handmade in Cremona": hit})


@pytest.mark.role("membank_reader")
def test_neighbours_stay_in_the_scope_and_skip_expired_and_deleted(conn, turns, superuser):
    assert superuser.execute("select count(*) from membank_private.memories").fetchone()["count"] == 6
    both = retrieve(conn, [A, B])
    # B's turns of a session with the same id, said between A's hit and A's answer, are never its neighbours
    assert set(both) == {"I bought an instrument at the market", "Guess what happened today",
                         "A violin, handmade in Cremona"}
    # a filter: a neighbour no list found is never added (it was not tested against the filter)
    assert set(retrieve(conn, A, metadata_filter=Jsonb({}))) == {"I bought an instrument at the market"}


@pytest.mark.role("membank_writer")
def test_a_memory_without_a_source_event_has_no_neighbours(conn, superuser):
    conn.execute("select membank.create_memory(scope => %s, fact => 'I bought an instrument at the market')",
                 (Jsonb(A),))
    said(conn, A, "s1", ["A violin"])
    assert superuser.execute("select source_session_id from membank_private.memories where fact = 'A violin'"
                             ).fetchone()["source_session_id"] == "s1"
    assert set(retrieve(conn, A)) == {"I bought an instrument at the market"}


@pytest.mark.role("membank_writer")
def test_neighbour_weight_is_checked(role_url):
    with MemoryBank(role_url) as bank:
        for bad in (-0.5, 11.0, float("nan")):
            with pytest.raises(InvalidArgumentError, match="neighbour_weight: must be between 0 and 10") as err:
                bank.retrieve_memories(A, QUERY, use_embedding=False, neighbour_weight=bad)
            assert "0 turns session neighbours off" in str(err.value)


def test_memories_generated_from_a_session_are_placed_where_it_said_them(bank, superuser):
    bank.append_events(A, "s9", [
        {"event_id": "e1", "author": "user", "text": "My name is Coco.", "timestamp": "2023-05-01T09:00:00Z"},
        {"event_id": "e2", "author": "user", "text": "I went to Paris last week.", "timestamp": "2023-05-24T18:30:00Z"}])
    op = bank.generate_memories(A, session_id="s9").wait(120, process=True)
    assert op.error is None and len(op.generated_memories) == 2
    rows = superuser.execute("select fact, source_session_id, source_event_time from membank_private.memories"
                             " order by source_event_time").fetchall()
    assert [(r["source_session_id"], r["source_event_time"]) for r in rows] == [
        ("s9", datetime(2023, 5, 1, 9, tzinfo=timezone.utc)), ("s9", datetime(2023, 5, 24, 18, 30, tzinfo=timezone.utc))]
