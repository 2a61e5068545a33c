"""`membank import mem0`: a mem0 pgvector collection, created as mem0 creates it, moved into membank once.

The source is a database of its own holding the table mem0's pgvector store
creates (``id uuid primary key, vector vector(1536), payload jsonb`` with its
HNSW index) and rows written as mem0 writes them (payload: data, hash,
created_at/updated_at with a zone, the ids, metadata flat beside them).
The bank is the test's database, reached as an admin login.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from click.testing import CliRunner

from membank import InvalidArgumentError, MemoryBank, PermissionDeniedError
from membank.cli import main
from membank.compat import Memory

PACIFIC = timezone(timedelta(hours=-7))
ALICE_TEA = "00000000-0000-4000-8000-00000000000a"
ALICE_AGENT = "00000000-0000-4000-8000-00000000000b"
BOB = "00000000-0000-4000-8000-00000000000c"
NO_IDS = "00000000-0000-4000-8000-00000000000d"
BAD_TIME = "00000000-0000-4000-8000-00000000000e"


def payload(data: str, created: datetime, updated: datetime | None = None, **rest) -> dict:
    """A payload as mem0's Memory._create_memory (and _update_memory) writes it."""
    out = {"data": data, "hash": hashlib.md5(data.encode()).hexdigest(), "created_at": created.isoformat(), **rest}
    if updated is not None:
        out["updated_at"] = updated.isoformat()
    return out


ROWS = [
    (ALICE_TEA, payload("Likes green tea", datetime(2024, 7, 20, 10, 0, tzinfo=PACIFIC),
                        datetime(2024, 8, 1, 9, 30, tzinfo=PACIFIC), user_id="alice", category="food")),
    (ALICE_AGENT, payload("Prefers short answers", datetime(2024, 7, 21, 8, 0, tzinfo=PACIFIC),
                          user_id="alice", agent_id="helper", actor_id="alice", role="user")),
    (BOB, payload("Lives in Lisbon", datetime(2024, 6, 1, 12, 0), user_id="bob", run_id="r7")),
    (NO_IDS, payload("Nobody's fact", datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc))),
    (BAD_TIME, {"data": "Has a broken time", "hash": "x", "created_at": "last Tuesday", "user_id": "carl"}),
]


@pytest.fixture
def mem0_url(empty_db_url):
    """A database holding a mem0 collection named ``mem0`` (mem0's default), created as mem0's create_col does."""
    rng = random.Random(7)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public")
        conn.execute("CREATE TABLE IF NOT EXISTS mem0 (id UUID PRIMARY KEY, vector vector(1536), payload JSONB)")
        conn.execute("CREATE INDEX IF NOT EXISTS mem0_hnsw_idx ON mem0 USING hnsw (vector vector_cosine_ops)")
        for row_id, data in ROWS:
            vector = "[" + ",".join(f"{rng.random():.4f}" for _ in range(1536)) + "]"
            conn.execute("INSERT INTO mem0 (id, vector, payload) VALUES (%s, %s, %s)",
                         (row_id, vector, json.dumps(data)))
    return empty_db_url


@pytest.fixture
def admin_url(login, monkeypatch):
    url = login("membank_admin")[1]
    monkeypatch.setenv("MEMBANK_DATABASE_URL", url)
    return url


def run(*args):
    return CliRunner().invoke(main, ["import", "mem0", *args])


def test_import_moves_scope_metadata_and_times_once(mem0_url, admin_url, embedder):
    dry = run("--url", mem0_url, "--dry-run")
    assert dry.exit_code == 1  # the broken row is refused, also in a dry run
    assert dry.stdout.strip() == ("read 5, would import 3, already imported 0, without user_id/agent_id/run_id 1, "
                                  "refused 1 (dry run: nothing written)")
    assert dry.stderr.strip() == (f"refused {BAD_TIME}: payload.created_at: is not ISO 8601: 'last Tuesday' "
                                  "(hint: mem0 writes datetime.isoformat() text; fix or remove it in the payload)")
    with MemoryBank(admin_url) as bank:
        assert bank.list_memories({"user_id": "alice"}).memories == []

    first = run("--url", mem0_url)
    assert first.exit_code == 1
    assert first.stdout.strip() == ("read 5, imported 3, already imported 0, without user_id/agent_id/run_id 1, "
                                    "refused 1 (facts queued for embedding: `membank worker`, or --embed)")
    with MemoryBank(admin_url) as bank:
        tea = bank.get_memory(ALICE_TEA, scope={"user_id": "alice"})
        assert (tea.fact, tea.metadata) == ("Likes green tea", {"category": "food"})
        assert tea.create_time == datetime(2024, 7, 20, 17, 0, tzinfo=timezone.utc)
        assert tea.update_time == datetime(2024, 8, 1, 16, 30, tzinfo=timezone.utc)
        helper = bank.get_memory(ALICE_AGENT, scope={"user_id": "alice", "agent_id": "helper"})
        assert helper.metadata == {"actor_id": "alice", "role": "user"}
        assert helper.update_time == helper.create_time
        lisbon = bank.get_memory(BOB, scope={"user_id": "bob", "run_id": "r7"})
        assert lisbon.create_time == datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)  # no zone: read as UTC
        assert [m.fact for m in bank.iter_memories({"user_id": "alice"})] == ["Likes green tea"]  # exact scopes
        assert [(r.action, r.labels) for r in bank.list_revisions(ALICE_TEA)] == [
            ("CREATED", {"imported_from": "mem0"})]
        bank.delete_memory(BOB)

    again = run("--url", mem0_url, "--embed")
    assert again.stdout.strip() == ("read 5, imported 0, already imported 3, without user_id/agent_id/run_id 1, "
                                    "refused 1, embedded 2")
    with Memory(admin_url, embedder=embedder) as m:
        assert m.get(BOB) is None  # deleted after the first run: not revived
        found = m.search("what does alice drink?", user_id="alice")["results"]
        assert [(f["id"], f["memory"], f["metadata"]) for f in found] == [(ALICE_TEA, "Likes green tea",
                                                                          {"category": "food"})]
        assert found[0]["score"] > 0.5 and found[0]["created_at"] == "2024-07-20T17:00:00+00:00"
        short = m.get(ALICE_AGENT)
        assert (short["agent_id"], short["actor_id"], short["role"], short["metadata"]) == (
            "helper", "alice", "user", None)


def test_import_needs_the_admin_role_and_names_a_missing_table(mem0_url, login, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", login("membank_writer", "membank_worker")[1])
    refused = run("--url", mem0_url)
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error [42501]: permission denied for function import_memory")
    missing = run("--url", mem0_url, "--collection", "memories")
    assert missing.exit_code == 2
    assert missing.stderr.splitlines()[0] == (
        f"error [22023]: --collection: no table public.memories in {_where(mem0_url)}")


def _where(url: str) -> str:
    from membank import database

    return database.describe(url)


def test_import_memory_checks_its_times_and_writes_nothing_on_error(login):
    with MemoryBank(login("membank_admin")[1]) as bank:
        scope = {"user_id": "u"}
        soon = datetime.now(timezone.utc) + timedelta(days=1)
        with pytest.raises(InvalidArgumentError) as err:
            bank.import_memory(scope, "f", ALICE_TEA, create_time=soon)
        assert err.value.argument == "create_time"
        with pytest.raises(InvalidArgumentError) as err:
            bank.import_memory(scope, "f", ALICE_TEA, create_time="2024-01-02T00:00:00Z",
                               update_time="2024-01-01T00:00:00Z")
        assert err.value.argument == "update_time"
        with pytest.raises(InvalidArgumentError) as err:
            bank.import_memory(scope, "f", "not-a-uuid")
        assert err.value.argument == "name"
        assert bank.list_memories(scope).memories == []
        made = bank.import_memory(scope, "f", ALICE_TEA, create_time="2024-01-01T00:00:00Z")
        assert (str(made.name), made.create_time, made.update_time) == (
            ALICE_TEA, datetime(2024, 1, 1, tzinfo=timezone.utc), datetime(2024, 1, 1, tzinfo=timezone.utc))
        # the name is held: in another scope too, nothing is written
        assert bank.import_memory({"user_id": "v"}, "g", ALICE_TEA) is None
        assert bank.list_memories({"user_id": "v"}).memories == []
    with MemoryBank(login("membank_writer")[1]) as writer, pytest.raises(PermissionDeniedError):
        writer.import_memory(scope, "f", BOB)


def test_two_imports_of_one_id_into_two_scopes_write_it_once(login, superuser):
    """Each import locks only its own scope: the old id itself must be locked too, or two imports of one id
    into two scopes both see it free and both write it (a name held twice)."""
    _, url = login("membank_admin")
    with psycopg.connect(url, autocommit=True) as first, psycopg.connect(url, autocommit=True) as second:
        first.execute("begin")
        assert first.execute("select (membank.import_memory('{\"user_id\": \"v\"}', 'f', %s)).name",
                             (BOB,)).fetchone()[0] is not None
        pid = second.info.backend_pid
        result: list = []
        racer = threading.Thread(target=lambda: result.append(second.execute(
            "select membank.import_memory('{\"user_id\": \"w\"}', 'g', %s) is null", (BOB,)).fetchone()[0]))
        racer.start()
        # the second import is either done (no lock on the id: the defect) or waits on the first one's lock
        while racer.is_alive() and not superuser.execute(
                "select exists (select from pg_locks where pid = %s and not granted) as waits", (pid,)).fetchone()["waits"]:
            racer.join(0.05)
        first.execute("commit")
        racer.join()
        assert result == [True]
    rows = superuser.execute("select scope from membank_private.memories where name = %s", (BOB,)).fetchall()
    assert rows == [{"scope": {"user_id": "v"}}]


def test_a_dry_run_refuses_what_the_import_refuses(empty_db_url, admin_url):
    """A row mem0 kept with empty data: the dry run counts it refused, as the import does, not as would-import."""
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public")
        conn.execute("CREATE TABLE mem0 (id UUID PRIMARY KEY, vector vector(3), payload JSONB)")
        conn.execute("INSERT INTO mem0 VALUES (%s, '[1,0,0]', %s), (%s, '[0,1,0]', %s)",
                     (ALICE_TEA, json.dumps(payload("", datetime(2024, 6, 1, tzinfo=timezone.utc), user_id="alice")),
                      BOB, json.dumps(payload("Lives in Lisbon", datetime(2024, 6, 1, tzinfo=timezone.utc),
                                              user_id="bob"))))
    dry, real = run("--url", empty_db_url, "--dry-run"), run("--url", empty_db_url)
    assert dry.stdout.strip() == ("read 2, would import 1, already imported 0, without user_id/agent_id/run_id 0, "
                                  "refused 1 (dry run: nothing written)")
    assert real.stdout.strip().startswith("read 2, imported 1, already imported 0, without user_id/agent_id/run_id 0,"
                                          " refused 1")
    assert dry.stderr == real.stderr and dry.stderr.startswith(f"refused {ALICE_TEA}: fact:")


def test_an_unreachable_mem0_database_hints_at_url(admin_url):
    """The hint named MEMBANK_DATABASE_URL and the embedded server, though the URL that failed was --url."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ran = run("--url", f"postgresql://mem0@127.0.0.1:{port}/mem0", "--dry-run")  # nobody listens there
    assert ran.exit_code != 0
    assert ran.stderr.strip().endswith(
        "(hint: is the server running there? check --url (postgresql://USER:PASSWORD@HOST:PORT/DBNAME))")
