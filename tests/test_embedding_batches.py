"""Per-item failure in every batch the worker runs: one tenant's bad item fails its own job, never the batch.

The embedding worker claims facts of many tenants in one batch, and the
IngestEvents sweep queues many tenants' streams in one call. A fact the
embedder refuses, a vector the bank refuses, a blank fact stored before the
blank rule, or a stream whose generation fails is recorded against that item
alone; the others are embedded or queued. What is blank is decided once, in
SQL (membank_private.is_blank); the Python client holds the same set (BLANK)
and never its own str.strip().

Tested as the roles apps use: writers write, the worker login embeds and sweeps.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import connect_as
from membank import InvalidArgumentError, MemoryBank
from membank.client import BLANK
from membank.worker import EmbeddingWorker

TENANTS = 40
POISON = "poison-scope"


@pytest.fixture
def writer_url(login) -> str:
    return login("membank_writer")[1]


@pytest.fixture
def worker_url(login) -> str:
    return login("membank_worker")[1]


def _tenants_write(writer_url: str) -> list[str]:
    """One fact in each of 40 tenants' scopes, written by the application's role; returns their names."""
    with MemoryBank(writer_url, max_size=2) as writer:
        return [str(writer.create_memory({"user_id": f"tenant-{i}"}, f"Tenant {i} likes green tea").name)
                for i in range(TENANTS)]


def _jobs(conn) -> dict[str, dict]:
    return {str(r["name"]): r for r in conn.execute(
        "select name, attempts, last_error from membank_private.embedding_jobs").fetchall()}


def _embedded(conn) -> set[str]:
    return {str(r["name"]) for r in conn.execute("select name from membank_private.memory_embeddings").fetchall()}


def test_a_blank_fact_stored_before_the_rule_fails_alone_among_40_tenants(conn, writer_url, worker_url, embedder):
    victims = _tenants_write(writer_url)
    with MemoryBank(writer_url, max_size=2) as writer:
        poisoned = str(writer.create_memory({"user_id": POISON}, "placeholder").name)
    # The attack's fact, E'\x1c': SQL refuses it now (below); a bank may hold one from before, as here.
    conn.execute("update membank_private.memories set fact = E'\\x1c' where name = %s", (poisoned,))
    worker = EmbeddingWorker(worker_url, embedder, batch_size=64)
    try:
        assert worker.process_pending() == TENANTS  # one batch; the blank job is never handed out
    finally:
        worker.close()
    assert _embedded(conn) == set(victims)  # 40 of 40
    jobs = _jobs(conn)
    assert set(jobs) == {poisoned}
    assert jobs[poisoned]["attempts"] == 5  # failed for good, at once, by name
    assert jobs[poisoned]["last_error"].startswith("fact: is blank")


def test_an_item_the_embedder_refuses_fails_alone_among_40_tenants(conn, writer_url, worker_url, embedder):
    victims = _tenants_write(writer_url)
    with MemoryBank(writer_url, max_size=2) as writer:
        poisoned = str(writer.create_memory({"user_id": POISON}, "Ignore this: POISON-7 breaks the model").name)

    class Picky:
        """The real embedder, except that it refuses the whole request when one text holds POISON-7."""

        model_id, dimension = embedder.model_id, embedder.dimension
        calls = 0

        def embed_passages(self, texts):
            Picky.calls += 1
            if any("POISON-7" in t for t in texts):
                raise ValueError("the provider refused a text (HTTP 400)")
            return embedder.embed_passages(texts)

    worker = EmbeddingWorker(worker_url, Picky(), batch_size=64)
    try:
        assert worker.process_pending() == TENANTS + 1
    finally:
        worker.close()
    assert _embedded(conn) == set(victims)
    jobs = _jobs(conn)
    assert set(jobs) == {poisoned}
    assert jobs[poisoned]["attempts"] == 1 and "HTTP 400" in jobs[poisoned]["last_error"]  # retried with backoff
    assert Picky.calls <= 2 * 7 + 1  # halves down to the one bad text: O(log n) calls, not one per fact


def test_a_vector_the_bank_refuses_fails_alone_among_40_tenants(conn, writer_url, worker_url, embedder):
    victims = _tenants_write(writer_url)
    with MemoryBank(writer_url, max_size=2) as writer:
        poisoned = str(writer.create_memory({"user_id": POISON}, "ZERO-VECTOR please").name)

    class Zeroes:
        """The real embedder, except that one text gets a zero vector (store_embeddings refuses it: 22023)."""

        model_id, dimension = embedder.model_id, embedder.dimension

        def embed_passages(self, texts):
            vectors = embedder.embed_passages(texts)
            return [[0.0] * self.dimension if "ZERO-VECTOR" in t else v for t, v in zip(texts, vectors)]

    worker = EmbeddingWorker(worker_url, Zeroes(), batch_size=64)
    try:
        assert worker.process_pending() == TENANTS + 1
    finally:
        worker.close()
    assert _embedded(conn) == set(victims)
    jobs = _jobs(conn)
    assert set(jobs) == {poisoned}
    assert jobs[poisoned]["attempts"] == 1 and jobs[poisoned]["last_error"] == "embeddings[1]: has zero norm"


@pytest.mark.role("membank_writer")
def test_sql_refuses_the_blank_fact_the_client_used_to_strip(bank):
    for blank in ("\x1c", "\x1f\x1e", "\x7f", "\x9f", "\x01 \u200b"):
        with pytest.raises(InvalidArgumentError) as err:
            bank.create_memory({"user_id": "u1"}, blank)
        assert err.value.sqlstate == "22023" and err.value.argument == "fact"


def test_the_client_and_sql_hold_one_blank_rule(conn):
    """Every character of the Basic Multilingual Plane is blank for SQL exactly when it is in the client's BLANK."""
    blank_in_sql = {chr(r["c"]) for r in conn.execute(
        "select c from generate_series(1, 65533) as c"
        " where c not between 55296 and 57343 and membank_private.is_blank(chr(c))").fetchall()}
    assert blank_in_sql == set(BLANK)
    assert "\x1c" in BLANK and "a" not in BLANK


def test_one_failing_stream_leaves_every_other_tenants_stream_queued(conn, writer_url, worker_url):
    """A tenant that poisons its own stream (an operation already holding the request id the sweep will use,
    with other content: MB021) fails that stream only: it stays pending, named, and every other stream is queued."""
    idle = {"generation_rule": {"idle_duration": "60s"}}
    event = {"event_id": "e1", "author": "user", "text": "I moved to Porto.", "timestamp": "2024-01-01T10:00:00Z"}
    with connect_as(writer_url) as writer:
        for i in range(5):
            writer.execute("select membank.ingest_events(scope => %s, stream_id => 's1', events => %s,"
                           " generation_trigger_config => %s)",
                           (Jsonb({"user_id": f"tenant-{i}"}), Jsonb([event]), Jsonb(idle)))
        seq = conn.execute("select append_seq from membank_private.events where scope_id = md5(%s::jsonb::text)::uuid",
                           (Jsonb({"user_id": "tenant-2"}),)).fetchone()["append_seq"]
        taken = f"ingest:{hashlib.md5(b's1').hexdigest()}:{seq}-{seq}"
        writer.execute("select membank.generate_memories(scope => %s, facts => %s, request_id => %s)",
                       (Jsonb({"user_id": "tenant-2"}), Jsonb(["The user likes tea"]), taken))
    arrived = conn.execute("select max(append_time) as t from membank_private.events").fetchone()["t"]
    with connect_as(worker_url) as worker:
        warnings = []
        worker.add_notice_handler(lambda d: warnings.append(d.message_primary))
        due = worker.execute("select * from membank.generate_due_streams(now => %s)",
                             (arrived + timedelta(minutes=5),)).fetchall()
    assert sorted(d["scope"]["user_id"] for d in due) == ["tenant-0", "tenant-1", "tenant-3", "tenant-4"]
    [warning] = [w for w in warnings if "left pending" in w]
    assert '"s1"' in warning and "tenant-2" in warning and "MB021" in warning
    pending = conn.execute("select scope, pending_events from membank_private.ingest_streams order by scope_id"
                           ).fetchall()
    assert {r["scope"]["user_id"]: r["pending_events"] for r in pending}["tenant-2"] == 1
    assert all(r["pending_events"] == 0 for r in pending if r["scope"]["user_id"] != "tenant-2")


def test_a_worker_role_cannot_be_made_to_embed_by_a_writer(writer_url):
    """The writer holds no claim: the per-item failure does not widen who may call the worker's functions."""
    with connect_as(writer_url) as writer, pytest.raises(psycopg.errors.InsufficientPrivilege):
        writer.execute("select * from membank.claim_embedding_jobs(1)")
