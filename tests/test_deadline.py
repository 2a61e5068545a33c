"""The client's own deadline per call and the mapping of lost-database SQLSTATEs (deadline.py, errors.py).

On a Citus cluster a call on a hung worker can outlive statement_timeout
(tests/test_citus_failures.py); here, on one server, a call held by a table
lock stands in for it: the client ends it at its deadline, whatever the
server does, from the sync and the async client alike.
"""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
import pytest

from membank import AsyncMemoryBank, MemoryBank
from membank.deadline import GRACE_S, call_deadline
from membank.errors import DatabaseUnavailableError, MembankError, from_psycopg

SCOPE = json.dumps({"user_id": "deadline"})


@pytest.mark.parametrize(("setting", "seconds"), [
    ("30s", 30 + GRACE_S), ("500ms", 0.5 + GRACE_S), ("1min", 60 + GRACE_S), ("2000", 2 + GRACE_S),
    ("1.5 s", 1.5 + GRACE_S), ("0", None), ("nonsense", None),
])
def test_the_deadline_is_statement_timeout_plus_the_grace(setting, seconds):
    assert call_deadline(setting) == seconds


def raised(conn: psycopg.Connection, sqlstate: str, message: str) -> psycopg.Error:
    """A real server error of ``sqlstate`` (raised by a DO block) as psycopg hands it to the client."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(f"do $$ begin raise exception using errcode = '{sqlstate}', message = '{message}'; end $$")
    return caught.value


def test_node_errors_are_database_unavailable_errors_naming_the_node(conn):
    err = from_psycopg(raised(conn, "08006", "connection to the remote node postgres@10.0.0.7:5433 failed with the"
                                            " following error: Connection refused"))
    assert isinstance(err, DatabaseUnavailableError) and isinstance(err, ConnectionError)
    assert (err.node, err.sqlstate) == ("10.0.0.7:5433", "08006") and "10.0.0.7:5433" in err.hint
    err = from_psycopg(raised(conn, "08006", "could not establish any connections to the node w2.example:5432"
                                            " after 5000 ms"))
    assert err.node == "w2.example:5432"
    err = from_psycopg(raised(conn, "57P01", "terminating connection due to administrator command"))
    assert isinstance(err, DatabaseUnavailableError) and err.node is None
    assert type(from_psycopg(raised(conn, "57014", "canceling statement due to statement timeout"))) is MembankError


@pytest.fixture
def locked(db_url):
    """memories locked by another transaction: a create_memory waits (the stand-in for a node that never answers)."""
    with psycopg.connect(db_url) as holder:
        holder.execute("lock table membank_private.memories in access exclusive mode")
        yield
        holder.rollback()


def test_the_sync_client_ends_a_call_at_its_deadline(db_url, locked):
    with MemoryBank(db_url, statement_timeout="60s", lock_timeout="60s", max_size=1) as bank:
        bank._watchdog.seconds = 1.0  # a deadline far below what the server would wait
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError, match="within statement_timeout 60s . 5 s: no node found silent"):
            bank.create_memory(json.loads(SCOPE), "never written")
        assert time.monotonic() - started < 30
    with psycopg.connect(db_url) as c:
        c.execute("set lock_timeout = '1s'")
        with pytest.raises(psycopg.errors.LockNotAvailable):  # the holder still holds it: nothing else happened
            c.execute("select count(*) from membank_private.memories")


def test_the_async_client_ends_a_call_at_its_deadline(db_url, locked):
    async def main():
        async with AsyncMemoryBank(db_url, statement_timeout="60s", lock_timeout="60s", max_size=1) as bank:
            bank._watchdog.seconds = 1.0
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailableError, match="no node found silent"):
                await bank.create_memory(json.loads(SCOPE), "never written")
            assert time.monotonic() - started < 30

    asyncio.run(main())
