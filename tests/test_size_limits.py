"""Size limits on what a tenant stores (membank_private.size_limit), and ADK app: state one user cannot bloat.

An attack: one user wrote 200 MB of app: state, and every other user's
get_session of that app read it (11 ms -> 25.9 s). Each limit is refused
with 22023 naming the argument, its hint giving the limit, nothing written;
the app's state is bounded on write and on read. The timing is measured by
bench/app_state.py --victim, not here.
"""

import json
import re
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import connect_as, count_all_rows

ROOT = Path(__file__).resolve().parent.parent
CHUNK = "x" * 60_000  # one state value under size_limit('state_value') (65536 bytes)


def limit(conn, what):
    row = conn.execute("select membank_private.size_limit(%s) as n", (what,)).fetchone()
    return row["n"] if isinstance(row, dict) else row[0]


def test_every_size_limit_named_in_db_is_defined(superuser):
    used = set()
    for path in sorted((ROOT / "db").rglob("*.sql")):
        used |= set(re.findall(r"size_limit\('(\w+)'\)", path.read_text()))
    assert {"fact", "json_object", "query_text", "state_value", "app_state", "session_event"} <= used
    assert {name: limit(superuser, name) for name in used if limit(superuser, name) is None} == {}


def test_docs_give_each_state_limit(superuser):
    # The limits table (docs/memories.md) states the values size_limit holds.
    doc = (ROOT / "docs" / "memories.md").read_text()
    for name in ("state_value", "session_state", "user_state", "app_state", "state_keys", "session_event"):
        assert f"{limit(superuser, name):,}" in doc, name


def _event(event_id, delta, **extra):
    return Jsonb({"id": event_id, "author": "user", "timestamp": 1700000000, "actions": {"state_delta": delta},
                  **extra})


def _refused(c, statement, params, argument):
    with pytest.raises(psycopg.Error) as err:
        c.execute(statement, params)
    assert err.value.sqlstate == "22023"
    assert err.value.diag.message_primary.startswith(f"{argument}: ")
    return err.value.diag


APPEND = ("select membank.append_session_event(app_name => 'shop', user_id => %s, session_id => 's',"
          " event => %s)")
GET = "select membank.get_session(app_name => 'shop', user_id => %s, session_id => 's') as s"


@pytest.mark.role("membank_writer")
def test_200_mb_of_state_is_refused_and_nothing_is_written(conn, superuser):
    # The attack's size, built in the server (no 200 MB on the wire): as one value and as one write of many keys.
    before = count_all_rows(superuser)
    diag = _refused(conn, "select membank.create_session(app_name => 'shop', user_id => 'u1', session_id => 's',"
                          " state => jsonb_build_object('app:big', repeat('x', 200 * 1024 * 1024)))", (), "state")
    # Refused from its size in memory, before any of it is written out as text (which took seconds).
    assert re.fullmatch(r"state: is 2097152\d\d bytes as stored", diag.message_primary)
    assert diag.message_hint == ("a session's own, a user's and an app's state are at most 1048576, 1048576 and"
                                 " 65536 bytes as JSON text")
    diag = _refused(conn, "select membank.create_session(app_name => 'shop', user_id => 'u1', session_id => 's',"
                          " state => jsonb_build_object('app:big', repeat('x', 100000)))", (), "state")
    assert diag.message_primary == f'state: key "app:big" holds {100000 + 2 + len("app:big")} bytes'
    assert "at most 65536 bytes" in diag.message_hint
    conn.execute("select membank.create_session(app_name => 'shop', user_id => 'u1', session_id => 's')")
    seeded = count_all_rows(superuser)
    many = "(select jsonb_object_agg('app:k' || i, repeat('x', 60000)) from generate_series(1, %s) as i)"
    diag = _refused(conn, "select membank.append_session_event(app_name => 'shop', user_id => 'u1', session_id => 's',"
                          " event => jsonb_build_object('id', 'e1', 'author', 'user', 'timestamp', 1700000000,"
                          f" 'actions', jsonb_build_object('state_delta', {many % 20})))", (), "event")
    assert diag.message_hint.startswith("an event is at most 1048576 bytes")
    diag = _refused(conn, f"select membank.create_session(app_name => 'shop', user_id => 'u2', state => {many % 10})",
                    (), "state")
    assert diag.message_primary == "state: would make the app's \"app:\" state 600041 bytes"
    assert diag.message_hint.startswith("the app's \"app:\" state is at most 65536 bytes")
    assert count_all_rows(superuser) == seeded
    assert seeded["membank_private.sessions"] == before["membank_private.sessions"] + 1
    assert conn.execute(GET, ("u1",)).fetchone()["s"]["state"] == {}


@pytest.mark.parametrize("prefix, what, argument", [
    ("", "session_state", "event.actions.state_delta"),
    ("user:", "user_state", "event.actions.state_delta"),
    ("app:", "app_state", "event.actions.state_delta"),
])
@pytest.mark.role("membank_writer")
def test_a_state_is_refused_past_its_total_and_keeps_what_it_held(conn, superuser, prefix, what, argument):
    total = limit(superuser, what)
    conn.execute("select membank.create_session(app_name => 'shop', user_id => 'u1', session_id => 's')")
    n = 0
    while (n + 1) * (len(CHUNK) + 2 + len(f"k{n}")) <= total:  # fill to just under the limit, one key per event
        conn.execute(APPEND, ("u1", _event(f"e{n}", {f"{prefix}k{n}": CHUNK})))
        n += 1
    held = conn.execute(GET, ("u1",)).fetchone()["s"]["state"]
    before = count_all_rows(superuser)
    diag = _refused(conn, APPEND, ("u1", _event("over", {f"{prefix}k{n}": CHUNK})), argument)
    assert f"at most {total} bytes" in diag.message_hint and "nothing was written" in diag.message_hint
    assert count_all_rows(superuser) == before
    assert conn.execute(GET, ("u1",)).fetchone()["s"]["state"] == held
    # Rewriting a key at the same size is not growth: still accepted at the limit.
    conn.execute(APPEND, ("u1", _event("same", {f"{prefix}k0": CHUNK.replace("x", "y")})))


@pytest.mark.role("membank_writer")
def test_a_state_holds_at_most_1000_keys(conn, superuser):
    keys = {f"user:k{i}": i for i in range(limit(superuser, "state_keys") + 1)}
    diag = _refused(conn, "select membank.create_session(app_name => 'shop', user_id => 'u1', state => %s)",
                    (Jsonb(keys),), "state")
    assert diag.message_primary == "state: would give the user's \"user:\" state 1001 keys"


def _app_bytes(state):
    """The app: part of a session's state as size_limit counts it: key names (without the prefix) and JSON values."""
    return sum(len(k) - len("app:") + len(json.dumps(v, separators=(", ", ": "))) for k, v in state.items()
               if k.startswith("app:"))


def test_one_users_app_state_writes_do_not_grow_another_users_get_session(login, superuser):
    # u1 fills the app: state to its bound, is refused past it, then keeps rewriting it at the bound; u2's
    # get_session of the same app reads at most size_limit('app_state') bytes of it, the same after every write.
    (_, url1), (_, url2) = login("membank_writer"), login("membank_writer")
    with connect_as(url1) as u1, connect_as(url2) as u2:
        bound = limit(superuser, "app_state")
        for user, c in (("u1", u1), ("u2", u2)):
            c.execute("select membank.create_session(app_name => 'shop', user_id => %s, session_id => 's')", (user,))
        fits = bound // (len(CHUNK) + 2 + 2)
        for k in range(fits):
            u1.execute(APPEND, ("u1", _event(f"fill{k}", {f"app:k{k}": CHUNK})))
        diag = _refused(u1, APPEND, ("u1", _event("over", {f"app:k{fits}": CHUNK})), "event.actions.state_delta")
        assert diag.message_primary.startswith("event.actions.state_delta: would make the app's \"app:\" state ")
        assert f"at most {bound} bytes" in diag.message_hint and "every user of the app" in diag.message_hint
        sizes = set()
        for i in range(12):  # rewrites at the bound: accepted, and u2 reads the same amount each time
            u1.execute(APPEND, ("u1", _event(f"again{i}", {f"app:k{i % fits}": CHUNK.replace("x", "yz"[i % 2])})))
            got = u2.execute(GET, ("u2",)).fetchone()["s"]
            assert _app_bytes(got["state"]) <= bound
            sizes.add(len(json.dumps(got)))
        assert len(sizes) == 1
    # About one entry per key is kept (superseded ones are deleted by the next writer).
    with connect_as(url1) as u1:
        assert u1.execute("select membank.get_user_state(app_name => 'shop', user_id => 'u1') as s").fetchone()


def test_racing_writers_cannot_make_a_read_carry_more_than_the_bound(login, superuser):
    # Two users' writes, open at once, each pass the check against the committed state (the app's state takes no
    # lock another user waits for); together they pass the bound. A read then returns the keys in the order they
    # were written, up to the bound: the first writer's.
    (_, url1), (_, url2), (_, url3) = login("membank_writer"), login("membank_writer"), login("membank_writer")
    with connect_as(url1) as u1, connect_as(url2) as u2, connect_as(url3) as u3:
        bound = limit(superuser, "app_state")
        two = {f"app:a{k}": "x" * 30_000 for k in range(2)}  # 60 kB: under the bound alone, over it twice
        for user, c in (("u1", u1), ("u2", u2), ("u3", u3)):
            c.execute("select membank.create_session(app_name => 'shop', user_id => %s, session_id => 's')", (user,))
        u1.execute("begin")
        u1.execute(APPEND, ("u1", _event("e1", two)))
        u2.execute("begin")
        u2.execute(APPEND, ("u2", _event("e1", {k.replace("app:a", "app:b"): v for k, v in two.items()})))
        u1.execute("commit")
        u2.execute("commit")
        stored = superuser.execute("select sum(size) as n from membank_private.app_state_entries"
                                   " where app_name = 'shop'").fetchone()["n"]
        assert stored > bound  # the overshoot racing writes can leave
        state = u3.execute(GET, ("u3",)).fetchone()["s"]["state"]
        assert sorted(state) == sorted(two) and _app_bytes(state) <= bound
        # Over the bound, a write that grows the state is refused; one that shrinks it is taken.
        _refused(u3, APPEND, ("u3", _event("e1", {"app:c": 1})), "event.actions.state_delta")
        u3.execute(APPEND, ("u3", _event("e2", {"app:b0": None})))
