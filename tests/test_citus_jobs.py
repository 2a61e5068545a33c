"""Cross-scope work on a real Citus cluster: job queues, workers, purges, notifications (`pytest -m citus`).

The queues and the bank-wide maintenance go scope by scope on Citus
(db/functions/120_scope_by_scope_jobs.sql): candidates read over every shard
without locks, then locked one scope at a time by router queries FOR UPDATE
SKIP LOCKED. These tests run them through the coordinator, as the logins apps
and workers use, with scopes on both workers.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql

from conftest import wait_for_database_clock
from membank.generation.rules import RulesProvider
from membank.generation.worker import GenerationWorker
from membank.worker import EmbeddingWorker
from test_citus import distributed, scope_on, workers

pytestmark = pytest.mark.citus


@pytest.fixture(scope="module")
def jobs_database(citus_cluster):
    """One distributed database for this module's tests (distributing is the slow part); emptied per test."""
    from citus_cluster import CitusDatabase

    name = f"membank_citus_jobs_{uuid.uuid4().hex[:8]}"
    db = CitusDatabase(citus_cluster, name, citus_cluster.create_database(name))
    try:
        distributed(db)
        yield db
    finally:
        citus_cluster.drop_database(name)


def empty(db) -> None:
    """Each test starts from an empty bank, as on a fresh database: every scope's rows and the settings go."""
    from membank.distribute import DISTRIBUTED

    with db.connect() as c:
        c.execute(sql.SQL("truncate {} cascade").format(sql.SQL(", ").join(
            sql.Identifier("membank_private", t) for t in (*DISTRIBUTED, "embedding_config", "scope_bindings"))))
        c.execute("truncate membank_private.due_scopes")  # the coordinator's own table (121_due_work.sql)
        c.execute("update membank_private.retention_settings set deleted_revisions = default,"
                  " finished_operations = default, events = default")


@pytest.fixture
def cluster(jobs_database):
    """The module's distributed database, emptied; (db, make_login) where make_login(*roles) -> URL of a new login."""
    empty(jobs_database)
    created = []

    def make_login(*roles: str, bound_to: dict | None = None) -> str:
        name = f"membank_test_{uuid.uuid4().hex[:10]}"
        with jobs_database.connect() as c:
            c.execute(sql.SQL("create role {} login").format(sql.Identifier(name)))  # Citus creates it on every node
            for role in roles:
                c.execute(sql.SQL("grant {} to {}").format(sql.Identifier(role), sql.Identifier(name)))
            if bound_to is not None:
                c.execute("select membank.bind_role_to_scope(%s, %s)", (name, json.dumps(bound_to)))
        created.append(name)
        return jobs_database.cluster.coordinator.url(jobs_database.name, user=name)

    yield jobs_database, make_login
    with jobs_database.connect() as c:
        for name in created:
            c.execute(sql.SQL("drop owned by {}").format(sql.Identifier(name)))
            c.execute(sql.SQL("drop role {}").format(sql.Identifier(name)))


@contextmanager
def connect(url: str, autocommit: bool = True):
    """A connection to the coordinator in UTC with a statement_timeout, so a regression fails instead of hanging."""
    with psycopg.connect(url, autocommit=autocommit) as c:
        c.execute("set timezone to 'UTC'")
        c.execute("set statement_timeout = '60s'")
        if not autocommit:
            c.commit()
        yield c


def scopes_on_both_workers(db, per_worker: int) -> list[dict]:
    """per_worker scopes whose shards are on each of the two workers (2 * per_worker scopes)."""
    found: list[dict] = []
    with db.connect() as c:
        for w in workers(db):
            for _ in range(per_worker):
                found.append(scope_on(c, w.port, skip=tuple(s["user_id"] for s in found)))
    return found


def port_of(db, scope: dict) -> int:
    """The worker port holding the scope's shard of memories."""
    with db.connect() as c:
        return c.execute("select s.nodeport from citus_shards as s where s.table_name ="
                         " 'membank_private.memories'::regclass and s.shardid ="
                         " get_shard_id_for_distribution_column('membank_private.memories',"
                         " md5(%s::jsonb::text)::uuid)", (json.dumps(scope),)).fetchone()[0]


def create(url: str, scopes: list[dict], facts: int = 2, ttl: str | None = None) -> dict[str, dict]:
    """facts memories in each scope, as the writer at url; name -> scope."""
    names = {}
    with connect(url) as c:
        for scope in scopes:
            for n in range(facts):
                name = c.execute("select (membank.create_memory(scope => %s, fact => %s, ttl => %s::interval)).name",
                                 (json.dumps(scope), f"{scope['user_id']} fact {n}", ttl)).fetchone()[0]
                names[str(name)] = scope
    return names


def move_due_time(c: psycopg.Connection) -> None:
    """Every embedding job due now (a lease or a backoff ran out): the jobs' time moved, and the coordinator's index
    of due work with it (121_due_work.sql), not the clock."""
    c.execute("update membank_private.embedding_jobs set retry_time = statement_timestamp() - interval '1s'")
    c.execute("update membank_private.due_scopes set due_time = statement_timestamp() - interval '1s'")


def claim(c: psycopg.Connection, batch: int) -> list[tuple]:
    return c.execute("select memory_name::text, memory_fact, fact_md5::text from membank.claim_embedding_jobs(%s)",
                     (batch,)).fetchall()


# -- embedding jobs ---------------------------------------------------------------------------------------------------

def test_embedding_claims_are_at_most_once_between_two_concurrent_claimers(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 4)
    names = create(login("membank_writer"), scopes)
    worker = login("membank_worker")
    with connect(worker, autocommit=False) as first, connect(worker, autocommit=False) as second:
        held = claim(first, 5)  # not committed: its rows stay locked
        rest = claim(second, 100)  # skips them, takes the others
        second.commit()
        first.commit()
        assert len(held) == 5 and len(rest) == len(names) - 5
        assert {r[0] for r in held}.isdisjoint({r[0] for r in rest})
        assert {r[0] for r in held} | {r[0] for r in rest} == set(names)
        # Both workers' shards were claimed from.
        assert {port_of(db, names[r[0]]) for r in rest} == {w.port for w in workers(db)}
        # Leased: nobody gets them again while the lease runs.
        assert claim(first, 100) == []


def test_a_lease_hands_unfinished_embedding_jobs_out_again(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 1)
    names = create(login("membank_writer"), scopes)
    with connect(login("membank_worker")) as w:
        assert {r[0] for r in claim(w, 100)} == set(names)
        assert claim(w, 100) == []
        with db.connect() as c:  # the lease runs out: move the jobs' time, not the clock
            move_due_time(c)
        again = claim(w, 100)
        assert {r[0] for r in again} == set(names)
        assert {r[1] for r in again} == {f"{s['user_id']} fact {n}" for s in scopes for n in range(2)}
    with db.connect() as c:
        assert c.execute("select max(attempts) from membank_private.embedding_jobs").fetchone() == (0,)


def test_stored_embeddings_land_on_each_scopes_shard_and_the_jobs_go(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 2)
    names = create(login("membank_writer"), scopes)
    with connect(login("membank_worker")) as w:
        jobs = claim(w, 100)
        vectors = [f"[{i + 1},1,0]" for i in range(len(jobs))]
        stored = w.execute("select membank.store_embeddings(model_id => 'test/m', dimension => 3, memory_names => %s,"
                           " fact_md5s => %s, embeddings => %s)",
                           ([j[0] for j in jobs], [j[2] for j in jobs], vectors)).fetchone()[0]
        assert stored == len(names)
        backlog = w.execute("select pending, failed, embedded, model_id from membank.embedding_backlog()").fetchone()
        assert backlog == (0, 0, len(names), "test/m")
    with db.connect() as c:
        rows = dict(c.execute("select name::text, embedding::text from membank_private.memory_embeddings").fetchall())
        assert rows == {j[0]: v for j, v in zip(jobs, vectors)}
        # Each vector is in its memory's shard: the shards of each worker hold 4.
        counts = dict(c.execute("select nodeport, sum(result::bigint) from run_command_on_placements("
                                "'membank_private.memory_embeddings', 'select count(*) from %s') group by 1").fetchall())
        assert counts == {w.port: 4 for w in workers(db)}


def test_failed_embedding_jobs_back_off_and_a_changed_fact_drops_its_stale_job(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 1)
    writer = login("membank_writer")
    names = create(writer, scopes, facts=1)
    with connect(login("membank_worker")) as w:
        jobs = claim(w, 100)
        failed = w.execute("select membank.fail_embedding_jobs(%s, %s, 'model timed out')",
                           ([j[0] for j in jobs], [j[2] for j in jobs])).fetchone()[0]
        assert failed == 2
        with db.connect() as c:
            assert c.execute("select array_agg(distinct attempts), array_agg(distinct last_error),"
                             " bool_and(retry_time > statement_timestamp() + interval '1s')"
                             " from membank_private.embedding_jobs").fetchone() == ([1], ["model timed out"], True)
            move_due_time(c)
        changed, kept = sorted(names)
        with connect(writer) as c:  # a new fact queues a new job: the old one is stale
            c.execute("select membank.update_memory(name => %s, fact => 'changed', scope => %s)",
                      (changed, json.dumps(names[changed])))
        again = claim(w, 100)
        assert sorted((r[0], r[1]) for r in again) == sorted([(changed, "changed"), (kept, f"{names[kept]['user_id']} fact 0")])
    with db.connect() as c:  # the stale job is gone, the new one leased
        assert c.execute("select count(*) from membank_private.embedding_jobs").fetchone() == (2,)


def test_a_role_bound_to_scopes_carries_no_jobs_on_the_cluster(cluster):
    db, login = cluster
    a, _ = scopes_on_both_workers(db, 1)
    create(login("membank_writer"), [a])
    bound = login("membank_worker", bound_to=a)
    with connect(bound) as w:
        for call in ("select * from membank.claim_embedding_jobs()", "select * from membank.claim_generation_jobs()",
                     "select membank.fail_generation_job(1, 'x')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                w.execute(call)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("call membank.purge_expired_memories()")
    with db.connect() as c:  # nothing was claimed
        assert c.execute("select count(*) from membank_private.embedding_jobs where retry_time > now()"
                         ).fetchone() == (0,)


# -- generation jobs --------------------------------------------------------------------------------------------------

def event(text: str, when: str = "2023-05-24T10:00:00Z") -> dict:
    return {"event_id": uuid.uuid4().hex, "author": "user", "text": text, "timestamp": when}


def generate(url: str, scope: dict, texts: list[str], **options) -> str:
    with connect(url) as c:
        return str(c.execute(
            "select membank.generate_memories(scope => %s, events => %s, disable_consolidation => %s)",
            (json.dumps(scope), json.dumps([event(t) for t in texts]),
             options.get("disable_consolidation", False))).fetchone()[0])


def test_generation_claims_are_at_most_once_between_two_concurrent_claimers(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 2)
    writer = login("membank_writer")
    operations = {generate(writer, s, [f"I live in city {s['user_id']}."]) for s in scopes}
    worker = login("membank_worker")
    with connect(worker, autocommit=False) as first, connect(worker, autocommit=False) as second, \
            connect(worker, autocommit=False) as third:
        held = first.execute("select operation_name::text, stage from membank.claim_generation_jobs(2)").fetchall()
        rest = second.execute("select operation_name::text, stage from membank.claim_generation_jobs(10)").fetchall()
        assert len(held) == 2 and len(rest) == 2 and {r[1] for r in held + rest} == {"EXTRACT"}
        assert {r[0] for r in held} | {r[0] for r in rest} == operations
        assert third.execute("select count(*) from membank.claim_generation_jobs(10)").fetchone() == (0,)
        third.rollback()
        second.rollback()  # a claim is the transaction's: released at once, the next claim takes them
        assert {r[0] for r in third.execute(
            "select operation_name::text from membank.claim_generation_jobs(10)").fetchall()} == {r[0] for r in rest}
        third.rollback()
        first.rollback()


def test_one_operation_run_in_process_sends_its_statements_to_its_scopes_worker_alone(cluster):
    """An in-process run (claims of one operation by name, as process_pending makes them) never reads every shard.

    The first claim finds the operation's scope in the coordinator's index of
    due work, asking each due scope's shard; a later claim, from this
    session's last claim of it (the claims looked the name up on all 32
    shards, on both workers, each time); the facts' vectors are stored for the
    memories created in the operation's scope, not in the scopes every shard
    says the names are in. Preparing a consolidation (the embedding
    configuration checked, each fact's vector checked) runs no exception
    block once the transaction has reached the worker, so it sends it no
    SAVEPOINT (each one sent SAVEPOINT and RELEASE).
    """
    from membank.distribute import DISTRIBUTED
    from test_citus import RemoteCommands

    db, login = cluster
    scopes = scopes_on_both_workers(db, 2)
    writer = login("membank_writer")
    for other in scopes[1:]:  # other scopes, on both workers, have jobs due too
        generate(writer, other, ["I like tea."])
    scope = scopes[0]
    operation = generate(writer, scope, ["I live in Oslo.", "I work as a nurse."])
    port = port_of(db, scope)
    provider = RulesProvider()
    worker = login("membank_worker")
    with connect(worker) as c:
        c.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 3)")
    with db.connect() as c:
        # A bank past its first 200 vectors: until then each store also asks every shard whether the centroid
        # can be set (050_embeddings.sql, store_vectors); set here instead of storing 200 vectors.
        schema = c.execute("select typnamespace::regnamespace::text from pg_type where typname = 'vector'"
                           ).fetchone()[0]
        c.execute(sql.SQL("update membank_private.embedding_config set centroid = '[0.01,0.01,0.01]'::{}.vector")
                  .format(sql.Identifier(schema)))
        # the shards of the scopes with jobs due
        due_shards = {r[0] for r in c.execute(
            "select get_shard_id_for_distribution_column(('membank_private.' || t)::regclass,"
            " md5(s::jsonb::text)::uuid) from unnest(%s::text[]) as t, unnest(%s::text[]) as s",
            (list(DISTRIBUTED), [json.dumps(x) for x in scopes]))}
    with connect(worker, autocommit=False) as c:
        log = RemoteCommands(c)
        stages, statuses, claims = [], [], 0
        while True:
            claims += 1
            rows, ports = log.during("select * from membank.claim_generation_jobs(1, %s::uuid)", (operation,))
            shards = {int(s) for s in re.findall(r"membank_private\.[a-z_]+_(\d+)", " ".join(log.commands))}
            if claims == 1:  # from the index of due work: the due scopes' shards
                assert shards and shards <= due_shards, log.commands
            else:  # this session's claim before: the operation's worker alone
                assert ports == {port}, log.commands
            if not rows:
                c.commit()
                break
            job = rows[0]
            stages.append(job[2])
            if job[2] == "CONSOLIDATE":
                vectors = [[1.0, float(n), 0.5] for n in range(len(job[4]))]
                rows, ports = log.during(
                    "select * from membank.prepare_consolidation(job_id => %s, embeddings => %s::real[],"
                    " embedding_model => 'test/m')", (job[0], vectors))
                assert ports == {port} and not [x for x in log.commands if "SAVEPOINT" in x], log.commands
                job = rows[0]
            reply = provider.complete(job[5], job[6], input=job[7])
            rows, ports = log.during("select membank.complete_generation_job(%s, %s)", (job[0], reply))
            statuses.append(rows[0][0])
            assert ports == {port}, "\n".join(log.commands)
            # The job read and locked from the claim's hint in one statement (its hint checked first was a
            # statement more); the operation's scope taken from the operation read (finish_operation, created_twice).
            assert not [x for x in log.commands if "IS NOT NULL) AND (EXISTS" in x], "\n".join(log.commands)
            if job[2] == "CONSOLIDATE":
                # Both facts' contexts set before their memories, cleared once at the end (after each, it was).
                resets = [x for x in log.commands if "membank.revision_context to ''" in x]
                assert len(resets) == 1, "\n".join(log.commands)
                # The vectors' store in one subtransaction (store_vectors' bounded wait): the write of the
                # operation's own scope's vectors runs without the node-down guard (a SAVEPOINT and RELEASE more).
                store = next(i for i, x in enumerate(log.commands) if "INSERT INTO membank_private.memory_embeddings" in x)
                assert len([x for x in log.commands[store:] if "RELEASE SAVEPOINT" in x]) == 1, "\n".join(log.commands)
            c.commit()
        assert stages == ["EXTRACT", "CONSOLIDATE"] and statuses == ["next", "done"] and claims == 3
        # The consolidation stored its facts' vectors last: no embedding work left due in the coordinator's
        # index, so the embedding claim that follows in process_pending sends the worker nothing (a profile
        # apply with no fields took the scope lock again, which marked it due).
        with db.connect() as a:
            assert a.execute("select count(*) from membank_private.due_scopes where kind = 'embedding'"
                             " and scope_id = md5(%s::jsonb::text)::uuid", (json.dumps(scope),)).fetchone() == (0,)
        rows, ports = log.during("select * from membank.claim_embedding_jobs(10)")
        c.commit()
        assert rows == [] and ports == set(), log.commands
    with connect(writer) as c:
        assert sorted(r[0] for r in c.execute("select fact from membank.list_memories(scope => %s)",
                                              (json.dumps(scope),))) == ["The user lives in Oslo.",
                                                                          "The user works as a nurse."]
    with db.connect() as c:  # each fact's vector stored for its memory, in the operation's scope
        assert c.execute("select count(*) from membank_private.memory_embeddings"
                         " where scope_id = md5(%s::jsonb::text)::uuid", (json.dumps(scope),)).fetchone() == (2,)


def test_a_consolidation_update_on_citus_merges_topics_and_labels_its_revision(cluster):
    """An UPDATE action applied on Citus: the memory's topics merged with the fact's in the UPDATE itself.

    Citus runs no sub-query over a column inside an UPDATE, so the merge is an
    immutable function of the column that the worker runs (a SELECT of the
    topics first was a statement more per fact). The revision carries the
    operation's context, set before the write and cleared once the facts are
    written: a memory written later in the same transaction carries none.
    """
    from test_citus import RemoteCommands

    db, login = cluster
    scope, _ = scopes_on_both_workers(db, 1)
    s = json.dumps(scope)
    writer = login("membank_writer")
    with connect(writer) as c:
        name = str(c.execute("select (membank.create_memory(scope => %s, fact => 'The user lives in Oslo.',"
                             " topics => '{USER_PREFERENCES}')).name", (s,)).fetchone()[0])
    operation = generate(writer, scope, ["I live in Lisbon."])
    provider = RulesProvider()
    with connect(login("membank_worker"), autocommit=False) as c:
        log = RemoteCommands(c)
        c.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 3)")
        job = c.execute("select * from membank.claim_generation_jobs(1, %s::uuid)", (operation,)).fetchone()
        c.execute("select membank.complete_generation_job(%s, %s)",
                  (job[0], provider.complete(job[5], job[6], input=job[7])))
        c.commit()
        job = c.execute("select * from membank.claim_generation_jobs(1, %s::uuid)", (operation,)).fetchone()
        assert job[2] == "CONSOLIDATE"
        job = c.execute("select * from membank.prepare_consolidation(job_id => %s, embeddings => %s::real[],"
                        " embedding_model => 'test/m')", (job[0], [[1.0, 0.0, 0.5]])).fetchone()
        assert name in json.dumps(job[7]), job[7]  # a candidate of the fact: the model may name it
        reply = json.dumps({"actions": [{"fact_index": 0, "action": "UPDATE", "memory_name": name,
                                         "fact": "The user lives in Lisbon."}]})
        rows, _ = log.during("select membank.complete_generation_job(%s, %s)", (job[0], reply))
        assert rows == [("done",)]
        assert not [x for x in log.commands if "SELECT ARRAY(SELECT DISTINCT" in x], "\n".join(log.commands)
        # Cleared once the fact was written, here and on the worker: later writes inherit no context.
        assert c.execute("select current_setting('membank.revision_context', true)").fetchone() == ("",)
        update = next(i for i, x in enumerate(log.commands) if "UPDATE membank_private.memories_" in x)
        resets = [i for i, x in enumerate(log.commands) if "membank.revision_context to ''" in x]
        assert len(resets) == 1 and resets[0] > update, "\n".join(log.commands)
        c.commit()
    with connect(writer) as c:
        fact, topics, revision = c.execute("select fact, topics, revision from membank.get_memory(name => %s,"
                                           " scope => %s)", (name, s)).fetchone()
        assert (fact, sorted(topics), revision) == ("The user lives in Lisbon.",
                                                    ["USER_PERSONAL_INFO", "USER_PREFERENCES"], 2)
        labels = c.execute("select labels from membank.list_revisions(name => %s, scope => %s)"
                           " order by revision desc limit 1", (name, s)).fetchone()[0]
        assert labels == {"action": "UPDATE", "operation": operation}


def test_a_held_scope_lock_bounds_completing_a_job_with_mb040(cluster):
    """complete_generation_job waits for the scope's write lock at most membank.lock_timeout, on the worker too."""
    db, login = cluster
    scope, _ = scopes_on_both_workers(db, 1)
    writer = login("membank_writer")
    create(writer, [scope], facts=3)
    with connect(writer) as c:
        c.execute("select membank.compact_memories(scope => %s, older_than => interval '0', in_database => false)",
                  (json.dumps(scope),))
    with connect(writer, autocommit=False) as holder, connect(login("membank_worker"), autocommit=False) as w:
        holder.execute("select membank.create_memory(scope => %s, fact => 'holds the lock')", (json.dumps(scope),))
        w.execute("set membank.lock_timeout = '300ms'")
        (job_id,) = w.execute("select job_id from membank.claim_generation_jobs(1)").fetchone()
        with pytest.raises(psycopg.Error) as busy:
            w.execute("select membank.complete_generation_job(%s, '{\"summary\": \"all facts\"}')", (job_id,))
        assert busy.value.sqlstate == "MB040", busy.value
        w.rollback()
        holder.commit()
        (job_id,) = w.execute("select job_id from membank.claim_generation_jobs(1)").fetchone()
        assert w.execute("select membank.complete_generation_job(%s, '{\"summary\": \"all facts\"}')",
                         (job_id,)).fetchone() == ("done",)
        w.commit()


def test_failed_generation_jobs_back_off_on_the_cluster(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 1)
    writer = login("membank_writer")
    for s in scopes:
        generate(writer, s, ["I like tea."])
    with connect(login("membank_worker"), autocommit=False) as w:
        jobs = w.execute("select job_id from membank.claim_generation_jobs(10)").fetchall()
        assert len(jobs) == 2
        assert [w.execute("select membank.fail_generation_job(%s, 'HTTP 503')", j).fetchone()[0] for j in jobs] == [
            False, False]
        w.commit()
        assert w.execute("select count(*) from membank.claim_generation_jobs(10)").fetchone() == (0,)  # backing off
        w.commit()
        (failed,) = w.execute("select membank.fail_generation_job(%s, 'HTTP 401', retryable => false)",
                              jobs[0]).fetchone()
        w.commit()
    assert failed is True
    with db.connect() as c:
        assert c.execute("select count(*) filter (where done and error ->> 'code' = 'MODEL_CALL_FAILED'),"
                         " count(*) filter (where not done) from membank_private.operations").fetchone() == (1, 1)
        assert c.execute("select attempts, last_error from membank_private.generation_jobs").fetchone() == (
            1, "HTTP 503")


def facts_by_scope(url: str, scopes: list[dict]) -> dict[str, list[str]]:
    with connect(url) as c:
        return {s["user_id"]: sorted(r[0] for r in c.execute(
            "select (l).fact from membank.list_memories(scope => %s) as l", (json.dumps(s),)).fetchall())
            for s in scopes}


CONVERSATIONS = [
    ["My name is Coco.", "I live in Oslo."],
    ["I work as a pilot.", "I love jazz music."],
    ["My sister is called Mia.", "I am allergic to peanuts."],
]


def run_workers(url: str, embedder, count: int = 2) -> int:
    """count generation workers in threads until the queue is empty, then an embedding worker; jobs run."""
    done, errors = [], []

    def run() -> None:
        worker = GenerationWorker(url, RulesProvider(), embedder)
        try:
            done.append(worker.process_pending())
        except Exception as err:  # a thread's failure fails the test below
            errors.append(err)
        finally:
            worker.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    embedding = EmbeddingWorker(url, embedder)
    try:
        embedding.process_pending()
    finally:
        embedding.close()
    return sum(done)


def test_two_workers_generate_memories_for_scopes_on_both_workers_as_on_one_server(cluster, embedder, db_url):
    """GenerateMemories (extraction, facts created) by two concurrent workers; the same memories as single-node."""
    db, login = cluster
    scopes = scopes_on_both_workers(db, 3)
    writer, worker = login("membank_writer"), login("membank_worker")
    for n, scope in enumerate(scopes):
        generate(writer, scope, CONVERSATIONS[n % 3], disable_consolidation=True)
    assert run_workers(worker, embedder) == len(scopes)
    on_cluster = facts_by_scope(writer, scopes)
    for scope in scopes:  # the same input on one server
        generate(db_url, scope, CONVERSATIONS[scopes.index(scope) % 3], disable_consolidation=True)
    GenerationWorker(db_url, RulesProvider(), embedder).process_pending()
    assert on_cluster == facts_by_scope(db_url, scopes)
    assert all(len(f) == 2 for f in on_cluster.values()), on_cluster  # a fact per sentence
    with db.connect() as c:
        assert c.execute("select count(*) filter (where done and error is null), count(*)"
                         " from membank_private.operations").fetchone() == (6, 6)
        assert c.execute("select (select count(*) from membank_private.memory_embeddings),"
                         " (select count(*) from membank_private.memories),"
                         " (select count(*) from membank_private.embedding_jobs)").fetchone() == (12, 12, 0)


def test_two_workers_consolidate_memories_on_the_cluster_as_on_one_server(cluster, embedder, db_url):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 2)
    writer, worker = login("membank_writer"), login("membank_worker")
    for scope in scopes:
        generate(writer, scope, ["My name is Coco."])
    run_workers(worker, embedder)
    for scope in scopes:
        generate(writer, scope, ["My name is Joy."])
    run_workers(worker, embedder)
    for scope in scopes:
        generate(db_url, scope, ["My name is Coco."])
        GenerationWorker(db_url, RulesProvider(), embedder).process_pending()
        generate(db_url, scope, ["My name is Joy."])
        GenerationWorker(db_url, RulesProvider(), embedder).process_pending()
    assert facts_by_scope(writer, scopes) == facts_by_scope(db_url, scopes) == {
        s["user_id"]: ["The user's name is Joy."] for s in scopes}


@pytest.mark.parametrize("size", [230, 450])
def test_a_consolidation_batch_in_a_scope_of_hundreds_gets_the_lists_of_retrieve_memories(cluster, size):
    """Consolidation's search for a batch of facts in a scope of more than 200 memories (every vector ranked
    exactly up to rerank_depth; above it the Hamming preselection and exact rerank) runs on the cluster, each read
    a router query on the scope's shard, and gives each fact the top 5 retrieve_memories gives it there."""
    import random

    db, _ = cluster
    scope = scopes_on_both_workers(db, 1)[1]
    rng = random.Random(size)
    words = ["cats", "dogs", "Lisbon", "hiking", "pottery", "guitar", "painting", "coffee"]
    texts = [f"The user likes {rng.choice(words)} and {rng.choice(words)}." for _ in range(size)]
    with db.connect() as c:
        c.execute("select membank.configure_embedding('test/citus', 16)")
        names = [str(c.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                               (json.dumps(scope), t)).fetchone()[0]) for t in texts]
        vectors = [str([rng.uniform(-1, 1) for _ in range(16)]).replace(" ", "") for _ in texts]
        c.execute("select membank.store_embeddings('test/citus', 16, %s::text[], array(select md5(f) from"
                  " unnest(%s::text[]) as f), %s::text[])", (names, texts, vectors))
        facts = [{"fact": f"The user loves {rng.choice(words)}."} for _ in range(12)]
        args = {"scope": json.dumps(scope), "facts": json.dumps(facts),
                "vectors": [[rng.uniform(-1, 1) for _ in range(16)] for _ in facts]}
        operation = ("jsonb_populate_record(null::membank_private.operations, jsonb_build_object('name',"
                     " gen_random_uuid(), 'scope', %(scope)s::jsonb, 'scope_id', md5(%(scope)s::jsonb::text)::uuid,"
                     " 'facts', %(facts)s::jsonb))")
        batch = c.execute(f"select membank_private.scope_memory_candidates({operation},"
                          " membank_private.fact_vectors(%(vectors)s::real[]), 'test/citus', 0, 11)", args).fetchone()[0]
        assert batch is not None
        compared = 0
        for i in range(len(facts)):
            each = c.execute(f"select membank_private.fact_candidates({operation}, %(i)s,"
                             " membank_private.fact_vectors(%(vectors)s::real[]), 'test/citus', 0)",
                             {**args, "i": i}).fetchone()[0]
            if batch.get(str(i), []) is not None:  # null: left to retrieve_memories (vectors tied at the cut)
                assert batch.get(str(i), []) == [m for m in each["candidates"] if not m["name"].startswith("fact:")]
                compared += 1
        assert compared >= 6


def test_compaction_of_many_scopes_runs_on_the_cluster(cluster, embedder):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 2)
    admin = login("membank_writer", "membank_admin")
    names = create(admin, scopes, facts=3)
    with connect(admin) as c:
        started = c.execute("select scope ->> 'user_id' from membank.compact_scopes('{}', interval '0')").fetchall()
        assert sorted(r[0] for r in started) == sorted(s["user_id"] for s in scopes)
    assert run_workers(login("membank_worker"), embedder) == 4
    facts = facts_by_scope(admin, scopes)
    assert all(len(f) == 1 and f[0].count("\n") == 2 for f in facts.values()), facts
    with db.connect() as c:
        deleted = c.execute("select memory_name::text, labels ->> 'compacted_into' from membank_private.memory_revisions"
                            " where action = 'DELETED'").fetchall()
        assert {n for n, _ in deleted} == set(names) and all(into for _, into in deleted)


# -- maintenance ------------------------------------------------------------------------------------------------------

def expire(db) -> None:
    """Wait (on the database clock) until every memory with a ttl has expired."""
    with db.connect() as c:
        latest = c.execute("select max(expire_time) from membank_private.memories").fetchone()[0]
    wait_for_database_clock(db.url, latest)


def test_expired_memories_are_purged_scope_by_scope_with_their_reason(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 2)
    writer = login("membank_writer")
    expiring = create(writer, scopes, ttl="2 seconds")
    kept = create(writer, scopes[:1])
    expire(db)
    with connect(login("membank_admin")) as c:
        assert c.execute("call membank.purge_expired_memories(batch_size => 3)").fetchone() == (len(expiring),)
    with db.connect() as c:
        assert {r[0] for r in c.execute("select name::text from membank_private.memories").fetchall()} == set(kept)
        deleted = c.execute("select memory_name::text, labels, fact from membank_private.memory_revisions"
                            " where action = 'DELETED'").fetchall()
        assert {r[0] for r in deleted} == set(expiring)
        assert all(r[1] == {"reason": "expired"} and r[2] is None for r in deleted)  # labelled, text forgotten
        assert c.execute("select count(*) from membank_private.memory_revisions where fact like '%%fact%%'"
                         " and memory_name = any(%s::uuid[])", (list(expiring),)).fetchone() == (0,)


def test_the_purge_skips_a_scope_whose_lock_is_held_and_waits_for_nothing(cluster):
    db, login = cluster
    held_scope, free_scope = scopes_on_both_workers(db, 1)
    writer = login("membank_writer")
    expiring = create(writer, [held_scope, free_scope], ttl="2 seconds")
    expire(db)
    admin = login("membank_admin")
    with connect(writer, autocommit=False) as holder:
        holder.execute("select membank.create_memory(scope => %s, fact => 'holds the lock')", (json.dumps(held_scope),))
        with connect(admin) as c:
            c.execute("set statement_timeout = '20s'")
            assert c.execute("call membank.purge_expired_memories()").fetchone() == (2,)
        holder.commit()
    with connect(admin) as c:
        assert c.execute("call membank.purge_expired_memories()").fetchone() == (2,)
    with db.connect() as c:
        assert c.execute("select count(*) from membank_private.memories").fetchone() == (1,)


def test_retention_removes_what_is_past_its_window_scope_by_scope(cluster):
    db, login = cluster
    scopes = scopes_on_both_workers(db, 2)
    writer, admin = login("membank_writer"), login("membank_writer", "membank_admin")
    names = create(writer, scopes)
    gone = sorted(names)[:4]
    with connect(writer) as c:
        for name in gone:
            c.execute("select membank.delete_memory(name => %s, scope => %s)", (name, json.dumps(names[name])))
        for scope in scopes:  # a done no-op operation in each scope (a blank event: nothing to learn from)
            c.execute("select membank.generate_memories(scope => %s, events => '[{\"event_id\": \"e\","
                      " \"author\": \"user\", \"text\": \" \", \"timestamp\": \"2023-05-24T10:00:00Z\"}]')",
                      (json.dumps(scope),))
    with connect(admin) as c:
        c.execute("select membank.configure_retention(deleted_revisions => interval '0',"
                  " finished_operations => interval '0')")
        (removed,) = c.execute("call membank.apply_retention(batch_size => 3)").fetchone()
    assert removed == {"revisions": 8, "operations": 4, "events": 0, "sessions": 0}
    with db.connect() as c:
        assert {r[0] for r in c.execute("select distinct memory_name::text from membank_private.memory_revisions"
                                        ).fetchall()} == set(names) - set(gone)
        assert c.execute("select count(*) from membank_private.operations").fetchone() == (0,)


# -- notifications ----------------------------------------------------------------------------------------------------

def test_a_transaction_writing_to_both_workers_commits_and_the_coordinator_hears_queued_work(cluster):
    """No NOTIFY rides a shard's prepared transaction; the coordinator-side call notifies where listeners are."""
    db, login = cluster
    a, b = scopes_on_both_workers(db, 1)
    writer = login("membank_writer", "membank_admin")
    with connect(login("membank_worker")) as listener:
        listener.execute("listen membank_generation_jobs")
        with connect(writer, autocommit=False) as c:  # two workers, one transaction: two-phase commit
            for scope in (a, b):
                for n in range(2):
                    c.execute("select membank.create_memory(scope => %s, fact => %s)", (json.dumps(scope), f"f{n}"))
            c.commit()
            started = c.execute("select count(*) from membank.compact_scopes('{}', interval '0')").fetchone()
            c.commit()
        assert started == (2,)
        heard = list(listener.notifies(timeout=10, stop_after=2))  # one per operation started
        assert [n.channel for n in heard] == ["membank_generation_jobs"] * 2
    with db.connect() as c:
        assert c.execute("select count(*) from membank_private.memories").fetchone() == (4,)
        assert c.execute("select count(*) from membank_private.embedding_jobs").fetchone() == (4,)


# -- per-scope HNSW indexes -------------------------------------------------------------------------------------------

def index_placements(c: psycopg.Connection) -> dict[int, list[str]]:
    """The per-scope HNSW indexes on memory_embeddings' shards: worker port -> index names."""
    found: dict[int, list[str]] = {}
    for port, ok, result in c.execute(
            "select nodeport, success, result from run_command_on_placements('membank_private.memory_embeddings',"
            " $$select coalesce(string_agg(c.relname, ',' order by c.relname), '') from pg_index as i"
            " join pg_class as c on c.oid = i.indexrelid where i.indrelid = '%s'::regclass"
            " and c.relname ~ '^scope_hnsw_'$$)").fetchall():
        assert ok, result
        if result:
            found.setdefault(port, []).extend(result.split(","))
    return found


def test_a_scopes_hnsw_index_lives_on_its_shard_only_and_retrieval_on_the_worker_uses_it(cluster):
    db, login = cluster
    a, b = scopes_on_both_workers(db, 1)
    names = create(login("membank_writer"), [a, b], facts=12)
    with connect(login("membank_worker")) as w:
        jobs = claim(w, 100)
        w.execute("select membank.store_embeddings(model_id => 'test/m', dimension => 3, memory_names => %s,"
                  " fact_md5s => %s, embeddings => %s)",
                  ([j[0] for j in jobs], [j[2] for j in jobs], [f"[1,{i},{i % 3}]" for i in range(len(jobs))]))
    with db.connect() as c:  # the admin's plan, run as the tables' owner (membank scope-indexes)
        plan = c.execute("select action, scope_id::text, statement from membank.scope_vector_index_plan(10)").fetchall()
        ids = {json.dumps(s): c.execute("select md5(%s::jsonb::text)::uuid::text", (json.dumps(s),)).fetchone()[0]
               for s in (a, b)}
        assert sorted((r[0], r[1]) for r in plan) == sorted(("create", i) for i in ids.values())
        for _, _, statement in plan:
            c.execute(statement)
        w1, w2 = workers(db)
        index = {s: "scope_hnsw_" + i.replace("-", "") + "_3" for s, i in ids.items()}
        # One index per scope, on one of the 32 shards each, on the worker holding the scope.
        assert index_placements(c) == {w1.port: [index[json.dumps(a)]], w2.port: [index[json.dumps(b)]]}
        assert c.execute("select count(*) from membank.scope_vector_index_plan(10)").fetchone() == (0,)
        shard = c.execute("select shard_name('membank_private.memory_embeddings'::regclass,"
                          " get_shard_id_for_distribution_column('membank_private.memory_embeddings', %s::uuid))",
                          (ids[json.dumps(a)],)).fetchone()[0]
    with psycopg.connect(w1.url(db.name), autocommit=True) as on_worker:  # where a's delegated calls run
        scope_id = ids[json.dumps(a)]
        assert on_worker.execute("select membank_private.scope_hnsw_ready(%s, 3)", (scope_id,)).fetchone() == (True,)
        on_worker.execute("set enable_seqscan = off")  # 12 rows: the planner would scan them
        on_worker.execute("set search_path to pg_catalog, membank_extensions")
        plan_text = "\n".join(r[0] for r in on_worker.execute(
            f"explain (costs off) select e.name from {shard} as e"  # the shard the worker plans a's query on
            f" where e.scope_id = '{scope_id}'::uuid and vector_dims(e.embedding) = 3"
            " order by e.embedding::vector(3) <=> '[1,0,0]'::vector(3) limit 5").fetchall())
        assert f"Index Scan using {index[json.dumps(a)]}" in plan_text, plan_text
        nearest = on_worker.execute("select name::text from membank_private.hnsw_candidates(%s, '[1,0,0]', 5)",
                                    (scope_id,)).fetchall()
        assert len(nearest) == 5 and {r[0] for r in nearest} <= {n for n, s in names.items() if s == a}
    # Through the coordinator, as an app login: the check reads the worker's catalog (the coordinator's has no
    # such index), and the scope is probed through its index on the worker, inside the one statement routed to the
    # scope's shard (retrieve_on_shard): no probe goes through Citus.
    with db.connect() as c:
        assert c.execute("select membank_private.scope_hnsw_ready_here(%s, 3), membank_private.scope_hnsw_ready(%s, 3)",
                         (ids[json.dumps(a)], ids[json.dumps(a)])).fetchone() == (False, True)
    sent: list[tuple[str, str]] = []
    with connect(login("membank_reader")) as r:
        r.add_notice_handler(lambda d: sent.append((d.message_primary or "", d.message_detail or "")))
        r.execute("set citus.log_remote_commands to on")
        found = r.execute("select name::text from membank.retrieve_memories(scope => %s, query_embedding =>"
                          " '{1,0,0}'::real[], top_k => 5, rerank_depth => 4)", (json.dumps(a),)).fetchall()
        r.execute("reset citus.log_remote_commands")
    assert [n for (n,) in found] == [n for (n,) in nearest]
    statements = [m for m, d in sent if m.startswith("issuing ") and f":{w1.port}" in d
                  and not m.removeprefix("issuing ").upper().startswith(("BEGIN", "COMMIT"))]
    assert len(statements) == 1 and "retrieve_on_shard" in statements[0], sent
    with psycopg.connect(w1.url(db.name), autocommit=True) as on_worker:
        # the probe retrieve_on_shard runs on the worker (hnsw_statement on the scope's shard), planned there
        on_worker.execute("set enable_seqscan = off")
        on_worker.execute("set search_path to pg_catalog, membank_extensions")
        probe = on_worker.execute("select membank_private.hnsw_statement(%s, 3, %s)", (scope_id, shard)).fetchone()[0]
        on_worker.execute("prepare probe (membank_extensions.vector, integer) as " + probe)
        plan_text = "\n".join(row[0] for row in on_worker.execute(
            "explain (costs off) execute probe('[1,0,0]', 5)").fetchall())
        assert f"Index Scan using {index[json.dumps(a)]}" in plan_text, (probe, plan_text)
    with db.connect() as c:  # the scopes shrink below half the threshold: the plan drops each where it is
        plan = c.execute("select action, statement from membank.scope_vector_index_plan(1000)").fetchall()
        assert [r[0] for r in plan] == ["drop", "drop"]
        for _, statement in plan:
            c.execute(statement)
        assert index_placements(c) == {}
