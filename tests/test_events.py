"""Sessions and events: idempotent appends, exact-scope isolation, clear errors that write nothing."""

from datetime import datetime, timezone

import psycopg
import pytest

from membank import ConflictError, InvalidArgumentError

U1, U2 = {"user_id": "u1"}, {"user_id": "u2"}
T0 = datetime(2023, 5, 24, 10, 0, tzinfo=timezone.utc)


def events(*items):
    return [{"event_id": e, "author": a, "text": t, "timestamp": T0.replace(second=s)} for e, a, t, s in items]


def count_events(conn):
    return conn.execute("select count(*) as n from membank_private.events").fetchone()["n"]


def test_append_is_idempotent_on_event_id(bank):
    batch = events(("e1", "user", "My name is Coco", 0), ("e2", "assistant", "Hi Coco", 5))
    assert bank.append_events(U1, "s1", batch) == 2
    assert bank.append_events(U1, "s1", batch) == 0  # a retried request
    assert bank.append_events(U1, "s1", batch + events(("e3", "user", "I like tea", 9))) == 1
    listed = bank.list_events(U1, "s1")
    assert [(e.event_id, e.author, e.text) for e in listed] == [
        ("e1", "user", "My name is Coco"), ("e2", "assistant", "Hi Coco"), ("e3", "user", "I like tea")]
    assert listed[0].event_time == T0


def test_events_are_ordered_by_time_and_filtered_by_range(bank):
    bank.append_events(U1, "s1", events(("late", "user", "b", 30), ("early", "user", "a", 1)))
    assert [e.event_id for e in bank.list_events(U1, "s1")] == ["early", "late"]
    assert [e.event_id for e in bank.list_events(U1, "s1", start_time=T0.replace(second=2))] == ["late"]
    assert [e.event_id for e in bank.list_events(U1, "s1", end_time=T0.replace(second=2))] == ["early"]


def test_sessions_are_isolated_by_exact_scope(bank):
    bank.append_events(U1, "s1", events(("e1", "user", "secret of u1", 0)))
    assert bank.append_events(U2, "s1", events(("e1", "user", "u2 says hi", 0))) == 1
    assert [e.text for e in bank.list_events(U2, "s1")] == ["u2 says hi"]
    assert [e.text for e in bank.list_events(U1, "s1")] == ["secret of u1"]
    assert bank.list_events({"user_id": "u1", "app": "x"}, "s1") == []


def test_same_event_id_with_other_content_is_refused(bank, conn):
    bank.append_events(U1, "s1", events(("e1", "user", "My name is Coco", 0)))
    before = count_events(conn)
    with pytest.raises(ConflictError) as err:
        bank.append_events(U1, "s1", events(("e2", "user", "new", 1), ("e1", "user", "My name is Joy", 0)))
    assert err.value.sqlstate == "MB020" and 'event_id "e1"' in err.value.message
    assert count_events(conn) == before  # e2 was not stored either


@pytest.mark.parametrize("bad, argument", [
    ({"not": "an array"}, "events"),
    ([{"author": "user", "text": "x", "timestamp": "2023-05-24T10:00:00Z"}], "events[0].event_id"),
    ([{"event_id": "e", "text": "x", "timestamp": "2023-05-24T10:00:00Z"}], "events[0].author"),
    ([{"event_id": "e", "author": "user", "text": 5, "timestamp": "2023-05-24T10:00:00Z"}], "events[0].text"),
    ([{"event_id": "e", "author": "user", "text": "x", "timestamp": "yesterday-ish"}], "events[0].timestamp"),
    ([{"event_id": "e", "author": "user", "text": "x", "timestamp": "2023-05-24T10:00:00Z"}] * 2, "events"),
])
def test_bad_events_name_the_field_and_write_nothing(bank, conn, bad, argument):
    with pytest.raises(InvalidArgumentError) as err:
        bank.append_events(U1, "s1", bad)
    assert err.value.message.startswith(f"{argument}: ") and err.value.hint
    assert count_events(conn) == 0
    assert conn.execute("select count(*) as n from membank_private.sessions").fetchone()["n"] == 0


def test_bad_session_id_and_scope(bank, conn):
    with pytest.raises(InvalidArgumentError, match="session_id: must be 1 to 200 characters"):
        bank.append_events(U1, "", events(("e1", "user", "x", 0)))
    with pytest.raises(InvalidArgumentError, match="scope: must not be empty"):
        bank.append_events({}, "s1", events(("e1", "user", "x", 0)))
    with pytest.raises(psycopg.Error) as err:
        conn.execute("select * from membank.list_events(scope => '{\"user_id\":\"u1\"}', session_id => 's1',"
                     " max_events => 0)")
    assert err.value.sqlstate == "22023" and err.value.diag.message_primary.startswith("max_events: ")
