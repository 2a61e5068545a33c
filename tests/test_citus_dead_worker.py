"""A Citus worker killed with SIGKILL stops only its own scopes (`pytest -m citus`).

The killed worker is this module's own (test_citus_failures' ``failing``
fixture: a PgServer of its own beside one of the session's workers), so
killing it touches no other test's database. Jobs, claims and their
completion find their scopes in the coordinator's index of due work
(db/functions/121_due_work.sql) and go to each scope's worker alone: while
the worker is dead, calls and jobs in the live worker's scopes go on, calls
in its own scopes raise DatabaseUnavailableError naming it; after it is back
every acknowledged write is there once and every job gets done.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from conftest import wait_for_database_clock
from membank import MemoryBank
from membank.errors import DatabaseUnavailableError
from membank.generation.rules import RulesProvider
from membank.generation.worker import GenerationWorker
from membank.worker import EmbeddingWorker
from test_citus import RemoteCommands
from test_citus_failures import failing, scope_on, server_pids  # noqa: F401 (failing: the module's fixture)

pytestmark = pytest.mark.citus


def login(url: str, *roles: str) -> str:
    """A new login holding roles (Citus creates it on every node); its URL on the coordinator."""
    name = f"membank_dead_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(sql.SQL("create role {} login").format(sql.Identifier(name)))
        for role in roles:
            c.execute(sql.SQL("grant {} to {}").format(sql.Identifier(role), sql.Identifier(name)))
    return psycopg.conninfo.make_conninfo(url, user=name)


def kill_9(node) -> None:
    """SIGKILL every process of node (postmaster first): no shutdown, no checkpoint."""
    for pid in server_pids(node):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def postmaster_runs(node) -> bool:
    """Whether node's postmaster is alive: a killed one may linger as a zombie until init reaps it, and a
    signal 0 still reaches a zombie, so its state is read from /proc."""
    try:
        pid = int((node.data / "postmaster.pid").read_text().split()[0])
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ValueError, IndexError):
        return False
    return state not in ("Z", "X")


def start_if_dead(node) -> None:
    """Start node again if its postmaster is gone (a failure before the kill leaves it running).

    A zombie postmaster's pid still answers signal 0, so PostgreSQL would take its postmaster.pid for a running
    server's and refuse to start: its lock files go first, the data folder's and the socket's (the process is
    dead; kill_9 killed its children too)."""
    if not postmaster_runs(node):
        (node.data / "postmaster.pid").unlink(missing_ok=True)
        (Path(node.socket_dir) / f".s.PGSQL.{node.port}.lock").unlink(missing_ok=True)
        node.start()


def generate(url: str, scope: dict, text: str) -> str:
    event = {"event_id": uuid.uuid4().hex, "author": "user", "text": text, "timestamp": "2023-05-24T10:00:00Z"}
    with psycopg.connect(url, autocommit=True) as c:
        return str(c.execute("select membank.generate_memories(scope => %s, events => %s,"
                             " disable_consolidation => true)",
                             (json.dumps(scope), json.dumps([event]))).fetchone()[0])


def md5_uuid(scope: dict) -> str:
    """A scope's scope_id, md5 of its canonical jsonb text, as the database computes it."""
    import hashlib

    text = json.dumps(scope, separators=(", ", ": "))  # jsonb's text of a one-key object
    return str(uuid.UUID(hashlib.md5(text.encode()).hexdigest()))


def counts(url: str, scopes: list[dict]) -> dict[str, tuple]:
    """Per scope: (memories, distinct facts, vectors, embedding jobs, generation jobs, operations not done)."""
    out = {}
    with psycopg.connect(url, autocommit=True) as c:
        for s in scopes:
            sid = c.execute("select md5(%s::jsonb::text)::uuid", (json.dumps(s),)).fetchone()[0]
            out[s["user_id"]] = c.execute(
                "select (select count(*) from membank_private.memories where scope_id = %(s)s),"
                " (select count(distinct fact) from membank_private.memories where scope_id = %(s)s),"
                " (select count(*) from membank_private.memory_embeddings where scope_id = %(s)s),"
                " (select count(*) from membank_private.embedding_jobs where scope_id = %(s)s),"
                " (select count(*) from membank_private.generation_jobs where scope_id = %(s)s),"
                " (select count(*) from membank_private.operations where scope_id = %(s)s and not done)",
                {"s": sid}).fetchone()
    return out


class KillingProvider(RulesProvider):
    """The offline provider; its first call kills the node first (a worker dying while a job is in flight)."""

    def __init__(self, node) -> None:
        super().__init__()
        self.node = node

    def complete(self, *args, **kwargs):
        if self.node is not None:
            kill_9(self.node)
            self.node = None
        return super().complete(*args, **kwargs)


def test_a_killed_worker_stops_only_its_own_scopes_and_nothing_is_lost(failing, embedder):
    url, own, live_port = failing
    node = f"127.0.0.1:{own.port}"
    dead = [scope_on(url, own.port) for _ in range(2)]
    live = [scope_on(url, live_port) for _ in range(2)]
    writer, worker = login(url, "membank_writer"), login(url, "membank_worker")
    admin = login(url, "membank_admin")
    acked: dict[str, list[str]] = {s["user_id"]: [] for s in dead + live}
    with MemoryBank(writer, statement_timeout="5s") as bank:
        for s in dead + live:
            for n in range(3):
                acked[s["user_id"]].append(bank.create_memory(s, f"{s['user_id']} keeps fact {n}").fact)
        for s in live:  # to expire while the other worker is dead
            bank.create_memory(s, f"{s['user_id']} expiring", ttl=3600)
        ops = {s["user_id"]: generate(writer, s, "My name is Coco.") for s in dead + live}
        # A batch of embedding jobs claimed in every scope (a lease, committed), before the kill.
        embedding = EmbeddingWorker(worker, embedder, batch_size=1000)
        embedding.configure()  # the bank's model, a reference table's row: written while every node is up
        try:
            with psycopg.connect(worker, autocommit=True) as claimer:
                claimed = claimer.execute("select memory_name::text, memory_fact, fact_md5::text"
                                          " from membank.claim_embedding_jobs(1000)").fetchall()
                assert len(claimed) == 14
                # The worker dies while a generation job of its scope is in flight (the model is being asked).
                generation = GenerationWorker(worker, KillingProvider(own), embedder)
                try:
                    with pytest.raises(psycopg.Error):
                        generation.process_job(ops[dead[0]["user_id"]])
                finally:
                    generation.close()
                # The claimed batch is stored: the live worker's scopes' vectors, the dead one's skipped (WARNING).
                warnings = []
                claimer.add_notice_handler(lambda d: warnings.append(d.message_primary))
                vectors = embedder.embed_passages([r[1] for r in claimed])
                stored = claimer.execute(
                    "select membank.store_embeddings(model_id => %s, dimension => %s, memory_names => %s,"
                    " fact_md5s => %s, embeddings => %s)",
                    (embedder.model_id, embedder.dimension, [r[0] for r in claimed], [r[2] for r in claimed],
                     ["[" + ",".join(repr(float(x)) for x in v) + "]" for v in vectors])).fetchone()[0]
                assert stored == 8
                assert any(node in w for w in warnings), warnings
            # Dead: the live worker's scopes work, calls and jobs; the dead one's calls name the node.
            for s in live:
                acked[s["user_id"]].append(bank.create_memory(s, f"{s['user_id']} learnt while {node} was dead").fact)
                assert len(bank.retrieve_memories(s, "keeps fact")) == 3
                assert len(bank.list_memories(s).memories) == 5  # 3, the expiring one, the new one
            for s in dead:
                for call in (lambda: bank.create_memory(s, "while dead"), lambda: bank.retrieve_memories(s, "fact")):
                    with pytest.raises(DatabaseUnavailableError) as err:
                        call()
                    assert err.value.node == node
            generation = GenerationWorker(worker, RulesProvider(), embedder)
            try:
                assert generation.process_pending() == 2  # the live scopes' operations
            finally:
                generation.close()
            assert embedding.process_pending() == 2 + 2  # the facts they extracted, the memories created since
            # The purge goes on past the dead node, reporting it: the live scopes' expired memories go.
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 s'"
                          " where scope_id = any(%s) and fact like '%% expiring'",
                          ([md5_uuid(s) for s in live],))
                # The index of due work as the time moved: the live scopes' expiry due, and a hint that a dead
                # scope may have some (a row with nothing due is allowed; the purge corrects it once it is back).
                c.execute("update membank_private.due_scopes set due_time = statement_timestamp() - interval '1 s'"
                          " where kind = 'expiry'")
                c.execute("insert into membank_private.due_scopes values ('expiry', %s, statement_timestamp())",
                          (md5_uuid(dead[0]),))
            with psycopg.connect(admin, autocommit=True) as c:
                warnings = []
                c.add_notice_handler(lambda d: warnings.append(d.message_primary))
                assert c.execute("call membank.purge_expired_memories()").fetchone()[0] == 2
                assert any(node in w for w in warnings), warnings
                c.execute("call membank.apply_retention()")
            during = counts(url, live)
            for s in live:  # 3 + 1 memories and the extracted fact, every one embedded, nothing left
                assert during[s["user_id"]] == (5, 5, 5, 0, 0, 0), during
        finally:
            start_if_dead(own)
        # Back: the dead scopes' leases end (time moved, not waited for) and every job gets done.
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("update membank_private.embedding_jobs set retry_time = statement_timestamp() - interval '1 s'"
                      " where retry_time > statement_timestamp()")
            c.execute("update membank_private.due_scopes set due_time = statement_timestamp() - interval '1 s'")
        generation = GenerationWorker(worker, RulesProvider(), embedder)
        try:
            assert generation.process_pending() == 2
        finally:
            generation.close()
        assert embedding.process_pending() == 6 + 2  # the leased jobs again and the 2 facts extracted
        embedding.close()
        with psycopg.connect(admin, autocommit=True) as c:  # the dead scope's hint, visited and corrected
            assert c.execute("call membank.purge_expired_memories()").fetchone()[0] == 0
        after = counts(url, dead + live)
        assert after == {s["user_id"]: (5, 5, 5, 0, 0, 0) if s in live else (4, 4, 4, 0, 0, 0)
                         for s in dead + live}, after
        for s in dead + live:  # every acknowledged write once, nothing unacknowledged
            facts = [m.fact for m in bank.list_memories(s).memories]
            assert all(facts.count(f) == 1 for f in acked[s["user_id"]]), (facts, acked[s["user_id"]])
            assert "while dead" not in facts and not any(f.endswith("expiring") for f in facts)
        with psycopg.connect(url, autocommit=True) as c:
            assert c.execute("select count(*) from membank_private.due_scopes").fetchone()[0] == 0


def test_claims_and_completions_touch_only_the_workers_of_their_scopes(failing, embedder):
    """citus.log_remote_commands: a claim, its store and a generation job send commands to the scopes' worker only."""
    url, own, live_port = failing
    scope = scope_on(url, live_port)
    writer, worker = login(url, "membank_writer"), login(url, "membank_worker")
    with MemoryBank(writer) as bank:
        bank.create_memory(scope, "a fact on the live worker")
    op = generate(writer, scope, "My name is Ada.")
    with psycopg.connect(url, autocommit=True) as c:
        # A bank past its first 200 vectors: until then each store also asks every shard whether the centroid
        # can be set (050_embeddings.sql, store_vectors); set here instead of storing 200 vectors.
        c.execute("select membank.configure_embedding(%s, %s)", (embedder.model_id, embedder.dimension))
        schema = c.execute("select typnamespace::regnamespace::text from pg_type where typname = 'vector'"
                           ).fetchone()[0]
        c.execute(sql.SQL("update membank_private.embedding_config"
                          " set centroid = array_fill(0.01::real, array[{}])::{}.vector")
                  .format(sql.Literal(embedder.dimension), sql.Identifier(schema)))
    with psycopg.connect(worker, autocommit=True) as c:
        log = RemoteCommands(c)
        claimed, ports = log.during("select memory_name::text, memory_fact, fact_md5::text"
                                    " from membank.claim_embedding_jobs(100)")
        assert len(claimed) == 1 and ports == {live_port}, log.commands
        vector = embedder.embed_passages([claimed[0][1]])[0]
        rows, ports = log.during(
            "select membank.store_embeddings(model_id => %s, dimension => %s, memory_names => %s,"
            " fact_md5s => %s, embeddings => %s)",
            (embedder.model_id, embedder.dimension, [claimed[0][0]], [claimed[0][2]],
             ["[" + ",".join(repr(float(x)) for x in vector) + "]"]))
        assert rows == [(1,)] and ports == {live_port}, log.commands
        # An empty claim reads no shard at all.
        rows, ports = log.during("select * from membank.claim_embedding_jobs(100)")
        assert rows == [] and ports == set(), log.commands
        # A generation job: claim, complete, in one transaction, on the scope's worker only.
        c.autocommit = False
        log.conn.execute("set citus.log_remote_commands to on")
        log.ports, log.commands = [], []
        job = c.execute("select * from membank.claim_generation_jobs(1)").fetchone()
        assert str(job[1]) == op
        reply = RulesProvider().complete(job[5], job[6], input=job[7])
        assert c.execute("select membank.complete_generation_job(%s, %s)", (job[0], reply)).fetchone()[0] == "done"
        c.commit()
        assert set(log.ports) == {live_port}, log.commands
        c.autocommit = True
        rows, ports = log.during("select * from membank.claim_generation_jobs(1)")
        assert rows == [] and ports == set(), log.commands
    # A backlog of a role bound to one scope: that scope's worker only.
    tenant = login(url, "membank_writer")
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("select membank.bind_role_to_scope(%s, %s)",
                  (psycopg.conninfo.conninfo_to_dict(tenant)["user"], json.dumps(scope)))
    with psycopg.connect(tenant, autocommit=True) as c:
        log = RemoteCommands(c)
        rows, ports = log.during("select pending, failed, embedded from membank.embedding_backlog()")
        assert rows == [(1, 0, 1)] and ports == {live_port}, log.commands  # the fact extracted, the one stored
        rows, ports = log.during("select pending_operations from membank.generation_backlog()")
        assert rows == [(0,)] and ports == {live_port}, log.commands


# -- expiry and backlogs from the coordinator's index of due work (121_due_work.sql, migration 0026) ----------------

def due_rows(url: str, kind: str, scope: dict) -> list[tuple]:
    """The index's due_time of ``scope`` for ``kind`` ([] when the scope has no row)."""
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute("select due_time from membank_private.due_scopes where kind = %s and scope_id = %s",
                         (kind, md5_uuid(scope))).fetchall()


def test_every_write_that_sets_an_expiry_marks_the_index_and_a_purge_corrects_it(failing):
    url, own, live_port = failing
    scope = scope_on(url, live_port)
    writer = login(url, "membank_writer")
    with MemoryBank(writer) as bank:
        plain = bank.create_memory(scope, "never expires")
        assert due_rows(url, "expiry", scope) == []  # no expire_time, no row
        far = bank.create_memory(scope, "expires in two hours", ttl=7200)
        assert due_rows(url, "expiry", scope) == [(far.expire_time,)]
        soon = bank.update_memory(plain.name, scope=scope, ttl=2).expire_time  # an earlier expiry lowers it
        assert due_rows(url, "expiry", scope) == [(soon,)]
        bank.update_memory(far.name, scope=scope, ttl=3600 * 24)  # a later one leaves it
        assert due_rows(url, "expiry", scope) == [(soon,)]
        wait_for_database_clock(url, soon)
        with psycopg.connect(login(url, "membank_admin"), autocommit=True) as c:
            assert c.execute("call membank.purge_expired_memories()").fetchone()[0] == 1
        # Purged: the row moves to the scope's next expiry.
        (later,) = [m.expire_time for m in bank.list_memories(scope).memories]
        assert due_rows(url, "expiry", scope) == [(later,)]
        # A memory deleted before its expiry keeps the row (its text is forgotten once that passes); brought back
        # by a rollback, its expiry is marked again.
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("delete from membank_private.due_scopes where kind = 'expiry'")  # as if never marked
        bank.delete_memory(far.name, scope=scope)
        revision = bank.list_revisions(far.name, scope=scope)[0].revision  # CREATED
        bank.rollback_memory(far.name, revision, scope=scope)
        assert due_rows(url, "expiry", scope) == [(later,)]


def test_purge_and_generation_backlog_go_only_to_the_workers_of_due_scopes(failing):
    """citus.log_remote_commands: the purge visits its due scopes' worker only; nothing due, no shard command."""
    url, own, live_port = failing
    scope, other = scope_on(url, live_port), scope_on(url, own.port)
    writer, admin, worker = (login(url, r) for r in ("membank_writer", "membank_admin", "membank_worker"))
    with MemoryBank(writer) as bank:
        bank.create_memory(scope, "stays")
        gone = bank.create_memory(scope, "goes", ttl=2)
        bank.create_memory(other, "expires next week on the other worker", ttl=7 * 86400)
    wait_for_database_clock(url, gone.expire_time)
    with psycopg.connect(admin, autocommit=True) as c:
        log = RemoteCommands(c)
        rows, ports = log.during("call membank.purge_expired_memories()")
        assert rows == [(1,)] and ports == {live_port}, log.commands
        assert due_rows(url, "expiry", scope) == []  # nothing left to expire there
        rows, ports = log.during("call membank.purge_expired_memories()")
        assert rows == [(0,)] and ports == set(), log.commands
    generate(writer, scope, "My name is Ada.")
    with psycopg.connect(url, autocommit=True) as c:
        others = c.execute("select count(*) from membank_private.due_scopes where kind = 'generation'"
                           " and scope_id <> %s", (md5_uuid(scope),)).fetchone()[0]
    assert others == 0  # the module's earlier tests did their generation jobs
    with psycopg.connect(worker, autocommit=True) as c:
        log = RemoteCommands(c)
        rows, ports = log.during("select pending_operations, due_jobs from membank.generation_backlog()")
        assert rows == [(1, 1)] and ports == {live_port}, log.commands


def pending_on(url: str, port: int) -> int:
    """Embedding jobs still to run (fewer than 5 attempts) in the scopes on the worker at ``port``."""
    with psycopg.connect(url, autocommit=True) as c:
        jobs = c.execute("select scope_id, count(*) from membank_private.embedding_jobs where attempts < 5"
                         " group by scope_id").fetchall()
        return sum(n for scope_id, n in jobs if c.execute(
            "select nodeport from citus_shards where table_name = 'membank_private.embedding_jobs'::regclass"
            " and shardid = get_shard_id_for_distribution_column('membank_private.embedding_jobs', %s::uuid)",
            (scope_id,)).fetchone()[0] == port)


def test_with_a_worker_killed_purge_and_backlogs_go_on_for_the_live_workers_scopes(failing):
    url, own, live_port = failing
    node = f"127.0.0.1:{own.port}"
    live, dead = scope_on(url, live_port), scope_on(url, own.port)
    writer, admin, worker = (login(url, r) for r in ("membank_writer", "membank_admin", "membank_worker"))
    with MemoryBank(writer) as bank:
        for s in (live, dead):
            bank.create_memory(s, f"{s['user_id']} stays")
            last = bank.create_memory(s, f"{s['user_id']} goes", ttl=2)
    for s in (live, dead):
        generate(writer, s, "My name is Coco.")
    wait_for_database_clock(url, last.expire_time)
    with psycopg.connect(worker, autocommit=True) as c:
        (operations,) = c.execute("select pending_operations from membank.generation_backlog()").fetchone()
        (pending,) = c.execute("select pending from membank.embedding_backlog()").fetchone()
    on_dead = pending_on(url, own.port)
    assert on_dead >= 2  # its 2 memories, and what the module's earlier tests left there
    kill_9(own)
    try:
        with psycopg.connect(worker, autocommit=True) as c:
            warnings = []
            c.add_notice_handler(lambda d: warnings.append(d.message_primary))
            # The dead worker's scopes are left out of the figures: its operation, its embedding jobs.
            assert c.execute("select pending_operations from membank.generation_backlog()").fetchone() \
                == (operations - 1,)
            assert any(w.startswith("generation_backlog") and node in w for w in warnings), warnings
            assert c.execute("select pending from membank.embedding_backlog()").fetchone() == (pending - on_dead,)
            assert any(w.startswith("embedding_backlog") and node in w for w in warnings), warnings
        with psycopg.connect(admin, autocommit=True) as c:
            warnings = []
            c.add_notice_handler(lambda d: warnings.append(d.message_primary))
            assert c.execute("call membank.purge_expired_memories()").fetchone() == (1,)  # the live scope's
            assert any(w.startswith("purge_expired_memories") and node in w for w in warnings), warnings
        with psycopg.connect(url, autocommit=True) as c:
            warnings = []
            c.add_notice_handler(lambda d: warnings.append(d.message_primary))
            c.execute("select membank_private.rebuild_due_scopes()")
            assert any(w.startswith("rebuild_due_scopes") and node in w for w in warnings), warnings
        with MemoryBank(writer) as bank:
            assert [m.fact for m in bank.list_memories(live).memories] == [f"{live['user_id']} stays"]
        assert due_rows(url, "expiry", live) == [] and due_rows(url, "expiry", dead) != []
    finally:
        start_if_dead(own)
    # Back: nothing stuck; the dead scope's expired memory goes, the figures count it again, no warning.
    with psycopg.connect(admin, autocommit=True) as c:
        warnings = []
        c.add_notice_handler(lambda d: warnings.append(d.message_primary))
        assert c.execute("call membank.purge_expired_memories()").fetchone() == (1,)
        with psycopg.connect(worker, autocommit=True) as w:
            w.add_notice_handler(lambda d: warnings.append(d.message_primary))
            assert w.execute("select pending_operations from membank.generation_backlog()").fetchone() \
                == (operations,)
            assert w.execute("select pending from membank.embedding_backlog()").fetchone() == (pending - 2,)
        assert warnings == []
    assert due_rows(url, "expiry", live) == due_rows(url, "expiry", dead) == []
    with MemoryBank(writer) as bank:
        assert [m.fact for m in bank.list_memories(dead).memories] == [f"{dead['user_id']} stays"]


def test_the_job_worker_finds_work_written_through_a_worker_nodes_own_connection(failing, embedder):
    """A write on a worker node marks nothing on the coordinator; the client's job worker rebuilds the index."""
    url, own, live_port = failing
    scope = scope_on(url, live_port)
    writer = login(url, "membank_writer")
    with MemoryBank(psycopg.conninfo.make_conninfo(writer, host="127.0.0.1", port=live_port)) as bank:  # the node
        written = bank.create_memory(scope, "written on the worker node", ttl=7200)
    assert due_rows(url, "expiry", scope) == due_rows(url, "embedding", scope) == []
    # A worker role without membank_admin may not: skipped, and not tried again.
    plain = EmbeddingWorker(login(url, "membank_worker"), embedder)
    assert plain.due_rebuild_interval == 600.0  # the default
    assert plain.rebuild_due_work() is None and plain.due_rebuild_interval is None
    admin = EmbeddingWorker(login(url, "membank_admin"), embedder)
    try:
        admin._maybe_rebuild_due()  # the run loop's first pass: due at once
        assert due_rows(url, "expiry", scope) == [(written.expire_time,)]
        assert len(due_rows(url, "embedding", scope)) == 1
        assert admin.process_pending() >= 1  # its embedding job is claimed from the index
    finally:
        admin.close()
        plain.close()
    with psycopg.connect(url, autocommit=True) as c:
        assert c.execute("select count(*) from membank_private.memory_embeddings where scope_id = %s",
                         (md5_uuid(scope),)).fetchone() == (1,)
