"""TTL: expired memories vanish from every read at once; the procedure purges them."""

import time
from datetime import datetime, timedelta, timezone

import pytest

from conftest import count_rows, wait_for_database_clock
from membank import InvalidArgumentError, NotFoundError

U1 = {"user_id": "u1"}


def test_expired_memory_is_invisible_at_once_and_purged_later(bank, conn, db_url):
    short = bank.create_memory(U1, "temporary code is 1234", ttl=timedelta(hours=1))
    keep = bank.create_memory(U1, "likes tea", ttl=timedelta(days=1))
    forever = bank.create_memory(U1, "name is Joy")
    assert bank.get_memory(short.name).fact == "temporary code is 1234"
    # a short expiry set now, then waited out on the database clock: no race with a busy machine
    wait_for_database_clock(db_url, bank.update_memory(short.name, ttl=0.1).expire_time)
    with pytest.raises(NotFoundError):
        bank.get_memory(short.name)
    assert {m.name for m in bank.list_memories(U1).memories} == {keep.name, forever.name}
    with pytest.raises(NotFoundError):
        bank.update_memory(short.name, fact="changed")
    # The row is still stored until the purge procedure runs.
    assert count_rows(conn)[0] == 3
    assert bank.purge_expired_memories() == 1
    assert count_rows(conn)[0] == 2
    assert {m.name for m in bank.list_memories(U1).memories} == {keep.name, forever.name}
    last = bank.list_revisions(short.name)[-1]
    assert (last.action, last.labels) == ("DELETED", {"reason": "expired"})


def test_purge_expired_runs_in_batches(bank, conn):
    for i in range(5):
        bank.create_memory(U1, f"fact {i}", ttl=0.2)
    bank.create_memory(U1, "stays")
    time.sleep(0.3)
    assert bank.purge_expired_memories(batch_size=2, max_batches=1) == 2
    assert bank.purge_expired_memories(batch_size=2) == 3
    assert count_rows(conn)[0] == 1


def test_purge_expired_procedure_from_sql(conn):
    conn.execute("select membank.create_memory(scope => '{\"u\":\"1\"}', fact => 'x', ttl => interval '100 ms')")
    time.sleep(0.2)
    row = conn.execute("call membank.purge_expired_memories()").fetchone()
    assert row["purged"] == 1


def test_expire_time_and_ttl(bank):
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    m = bank.create_memory(U1, "fact", expire_time=at)
    assert m.expire_time == at
    m2 = bank.update_memory(m.name, ttl=timedelta(hours=2))
    assert m2.expire_time > at
    assert bank.update_memory(m.name, clear_expiry=True).expire_time is None
    with pytest.raises(InvalidArgumentError, match="ttl: ttl and expire_time are mutually exclusive"):
        bank.create_memory(U1, "fact", ttl=5, expire_time=at)
    with pytest.raises(InvalidArgumentError, match="ttl: must be positive"):
        bank.create_memory(U1, "fact", ttl=-5)
    with pytest.raises(InvalidArgumentError, match="expire_time: .* is not in the future"):
        bank.create_memory(U1, "fact", expire_time=datetime.now(timezone.utc) - timedelta(seconds=1))
