"""The trust boundary: job queues belong to the worker role, scope locks no outsider can hold, bounded lock waits,
compare-and-set edits, and definer functions that no planted overload can hijack."""

from __future__ import annotations

import threading

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.rows import dict_row

from membank import MemoryBank, errors, migrate
from membank.cli import main
from membank.worker import CHANNEL, EmbeddingWorker

JOB_FUNCTIONS = [
    "select * from membank.claim_embedding_jobs(batch_size => 10)",
    "select membank.store_embeddings(model_id => 'm', dimension => 3, memory_names => '{}', fact_md5s => '{}',"
    " embeddings => '{}')",
    "select membank.fail_embedding_jobs(memory_names => '{}', fact_md5s => '{}', error => 'x')",
    "select * from membank.claim_generation_jobs(batch_size => 1)",
    "select * from membank.prepare_consolidation(job_id => 1, embeddings => '{{1,0,0}}', embedding_model => 'm')",
    "select membank.complete_generation_job(job_id => 1, reply => '{}')",
    "select membank.fail_generation_job(job_id => 1, error => 'x')",
]


def connect(url: str) -> psycopg.Connection:
    c = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    c.execute("set statement_timeout = '20s'")  # a regression shows as a failure, never as a hung suite
    return c


# -- roles ----------------------------------------------------------------------------------------------------

def test_writer_gets_42501_on_every_job_function(login):
    _, url = login("membank_writer")
    with connect(url) as writer:
        for statement in JOB_FUNCTIONS:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                writer.execute(statement)


def test_worker_role_runs_membank_worker_end_to_end(conn, login, monkeypatch):
    _, writer_url = login("membank_writer")
    _, worker_url = login("membank_worker")
    scope = {"user_id": "w1"}
    with MemoryBank(writer_url, max_size=1) as bank:
        op = bank.generate_memories(scope, facts=["The user likes green tea."])
    monkeypatch.setenv("MEMBANK_DATABASE_URL", worker_url)
    result = CliRunner().invoke(main, ["worker", "--once"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "ran 1 generation jobs" in result.output
    with MemoryBank(writer_url, max_size=1) as bank:
        done = bank.get_operation(op.name)
        assert done.done and done.error is None
        assert [g.memory.fact for g in done.generated_memories] == ["The user likes green tea."]
        assert bank.embedding_backlog().pending == 0
        assert [r.memory.fact for r in bank.retrieve_memories(scope, "green tea")] == ["The user likes green tea."]


def test_admin_runs_reembed(conn, login, monkeypatch):
    _, admin_url = login("membank_admin")
    _, writer_url = login("membank_writer")
    with MemoryBank(writer_url, max_size=1) as bank:
        bank.create_memory({"user_id": "a1"}, "The user plays the cello.")
    with connect(writer_url) as writer, pytest.raises(psycopg.errors.InsufficientPrivilege):
        writer.execute("select membank.reembed(model_id => 'm', dimension => 3)")
    monkeypatch.setenv("MEMBANK_DATABASE_URL", admin_url)
    result = CliRunner().invoke(main, ["reembed", "--yes"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "embedded 1 memories" in result.output and "0 pending" in result.output


def test_notify_payloads_carry_no_scope_data(conn, login):
    _, writer_url = login("membank_writer")
    _, nobody_url = login()
    with connect(nobody_url) as listener:  # any role may LISTEN
        listener.execute(f"listen {CHANNEL}")
        listener.execute("listen membank_generation_jobs")
        with MemoryBank(writer_url, max_size=1) as bank:
            bank.create_memory({"user_id": "secret-user"}, "The user's PIN is 4711.")
            bank.generate_memories({"user_id": "secret-user"}, facts=["The user's PIN is 4711."])
        seen = list(listener.notifies(timeout=2, stop_after=2))
    assert sorted(n.channel for n in seen) == sorted([CHANNEL, "membank_generation_jobs"])
    assert [n.payload for n in seen] == ["", ""]


class _CountingWorker(EmbeddingWorker):
    """An embedding worker that counts how often it woke to claim jobs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.wakes = 0
        self.claimed = []
        self.passed = threading.Condition()

    def process_pending(self, **kwargs):
        n = super().process_pending(**kwargs)
        self.wakes += 1
        self.claimed.append(n)
        with self.passed:
            self.passed.notify_all()
        return n

    def wait_for_passes(self, n: int, timeout: float = 60) -> bool:
        """Wait until the worker has finished ``n`` passes; False if it has not within ``timeout`` seconds."""
        with self.passed:
            return self.passed.wait_for(lambda: len(self.claimed) >= n, timeout)


def test_spoofed_notify_only_wakes_a_worker_that_claims_through_sql(conn, login, embedder):
    _, worker_url = login("membank_worker")
    _, nobody_url = login()
    conn.execute("select membank.create_memory(scope => '{\"user_id\": \"v\"}', fact => 'The user owns a boat.')")
    worker = _CountingWorker(worker_url, embedder)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"poll_interval": 60, "stop": stop})
    thread.start()
    try:
        # The real job, claimed through SQL at start; having done work, the
        # worker passes once more, finds nothing and only then waits for a
        # notification (a busy worker does not sleep).
        assert worker.wait_for_passes(2)
        assert worker.claimed == [1, 0]
        with connect(nobody_url) as spoofer:
            # A payload that names a scope and a job: the worker never reads it.
            spoofer.execute("select pg_notify(%s, %s)", (CHANNEL, '{"scope": {"user_id": "v"}, "memory_name": "x"}'))
        assert worker.wait_for_passes(3)
        assert worker.claimed == [1, 0, 0]  # woke, claimed through SQL, found nothing due
    finally:
        stop.set()
        with connect(nobody_url) as waker:
            waker.execute("select pg_notify(%s, '')", (CHANNEL,))
        thread.join(30)
        worker.close()
    assert not thread.is_alive()
    assert conn.execute("select pending from membank.embedding_backlog()").fetchone()["pending"] == 0


# -- scope locks ----------------------------------------------------------------------------------------------

VICTIM = '{"user_id": "victim"}'


def test_outsider_cannot_make_a_membank_write_wait(conn, login):
    _, nobody_url = login()
    _, writer_url = login("membank_writer")
    _, admin_url = login("membank_admin")
    tables = [r["t"] for r in conn.execute(
        "select c.oid::regclass::text as t from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('membank', 'membank_private') and c.relkind in ('r', 'p')")]
    assert "membank_private.scope_locks" in tables and len(tables) > 5
    conn.execute("select membank.create_memory(scope => %s::jsonb, fact => 'expiring', ttl => '1 hour')", (VICTIM,))
    with connect(nobody_url) as outsider:
        outsider.execute("begin")
        # The old scheme's key for the victim's scope, and a spread of others over the key space.
        outsider.execute("select pg_advisory_lock(hashtextextended(md5(%s::jsonb::text)::uuid::text, 1836016206))",
                         (VICTIM,))
        outsider.execute("select pg_advisory_lock(k) from generate_series(-9000000000000000000,"
                         " 9000000000000000000, 18000000000000000) as k")
        for table in tables:
            for statement in (f"lock table {table} in access exclusive mode",
                              f"select 1 from {table} for update",
                              f"select 1 from {table} for key share"):
                outsider.execute("savepoint s")
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    outsider.execute(statement)
                outsider.execute("rollback to savepoint s")
        # Holding all of that, the victim's writes and the expiry purge run without waiting.
        with connect(writer_url) as writer:
            writer.execute("set lock_timeout = '2s'")
            name = writer.execute("select (membank.create_memory(scope => %s::jsonb, fact => 'still writable')).name",
                                  (VICTIM,)).fetchone()["name"]
            writer.execute("select membank.update_memory(name => %s::text, fact => 'updated')", (str(name),))
        conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 s'"
                     " where fact = 'expiring'")
        with connect(admin_url) as admin:
            admin.execute("set lock_timeout = '2s'")
            assert admin.execute("call membank.purge_expired_memories()").fetchone()["purged"] == 1
        outsider.execute("rollback")


@pytest.mark.role("membank_writer")
def test_blocked_write_fails_with_mb020_then_retry_succeeds(conn, role_url):
    with MemoryBank(role_url, max_size=1, lock_timeout="200ms") as bank:
        m = bank.create_memory({"user_id": "busy"}, "first")
        other = bank.create_memory({"user_id": "busy"}, "second")
        holder = connect(role_url)
        try:
            holder.execute("begin")
            holder.execute("select membank.update_memory(name => %s::text, fact => 'held')", (str(m.name),))
            with pytest.raises(errors.LockTimeoutError) as caught:
                bank.update_memory(other.name, fact="blocked")
            assert caught.value.sqlstate == "MB040" and caught.value.retryable
            assert "membank.lock_timeout" in caught.value.hint
            assert bank.get_memory(other.name).fact == "second"  # nothing written
            holder.execute("commit")
        finally:
            holder.close()
        assert bank.update_memory(other.name, fact="after the holder committed").revision == 2


@pytest.mark.role("membank_admin")
def test_every_write_path_waits_a_bounded_time(conn, role_url):
    conn.execute("set membank.lock_timeout = '100ms'")
    name = conn.execute("select (membank.create_memory(scope => %s::jsonb, fact => 'x')).name::text as n",
                        (VICTIM,)).fetchone()["n"]
    holder = connect(role_url)
    try:
        holder.execute("begin")
        holder.execute("select membank.update_memory(name => %s::text, fact => 'held')", (name,))
        for statement, args in [
            ("select membank.create_memory(scope => %s::jsonb, fact => 'y')", (VICTIM,)),
            ("select membank.update_memory(name => %s::text, fact => 'z')", (name,)),
            ("select membank.delete_memory(name => %s::text)", (name,)),
            ("select membank.rollback_memory(name => %s::text, revision => 1)", (name,)),
            ("select membank.purge_memories(scope => %s::jsonb, force => true)", (VICTIM,)),
            ("call membank.purge_memories_in_batches(scope => %s::jsonb)", (VICTIM,)),
            ("select membank.generate_memories(scope => %s::jsonb, facts => '[\"f\"]',"
             " disable_consolidation => true)", (VICTIM,)),
        ]:
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(statement, args)
            assert caught.value.sqlstate == "MB040", statement
        holder.execute("rollback")
    finally:
        holder.close()
    conn.execute("set membank.lock_timeout = '0'")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("select membank.create_memory(scope => %s::jsonb, fact => 'y')", (VICTIM,))


def test_purge_expired_skips_a_locked_scope_instead_of_waiting(conn, db_url):
    for scope in ('{"u": "locked"}', '{"u": "free"}'):
        conn.execute("select membank.create_memory(scope => %s::jsonb, fact => 'x', ttl => '1 hour')", (scope,))
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 s'")
    live = conn.execute("select (membank.create_memory(scope => '{\"u\": \"locked\"}', fact => 'live')).name::text"
                        " as n").fetchone()["n"]
    holder = connect(db_url)
    try:
        holder.execute("begin")
        holder.execute("select membank.update_memory(name => %s::text, fact => 'held')", (live,))
        conn.execute("set lock_timeout = '5s'")
        assert conn.execute("call membank.purge_expired_memories()").fetchone()["purged"] == 1
        holder.execute("commit")
    finally:
        holder.close()
    assert conn.execute("call membank.purge_expired_memories()").fetchone()["purged"] == 1


def test_purge_in_batches_commits_each_batch(conn, bank):
    scope = {"user_id": "big"}
    for i in range(25):
        bank.create_memory(scope, f"fact {i}")
    bank.create_memory({"user_id": "other"}, "stays")
    assert bank.purge_memories(scope) == 25
    assert bank.purge_memories(scope, force=True, batch_size=10) == 25
    assert bank.list_memories(scope).memories == []
    assert [m.fact for m in bank.list_memories({"user_id": "other"}).memories] == ["stays"]
    labels = conn.execute("select distinct labels from membank_private.memory_revisions"
                          " where action = 'DELETED'").fetchall()
    assert [r["labels"] for r in labels] == [{"reason": "purge"}]
    with pytest.raises(errors.InvalidArgumentError) as caught:
        bank.purge_memories(scope, force=True, batch_size=0)
    assert caught.value.argument == "batch_size"


@pytest.mark.role("membank_reader")
def test_client_sets_statement_timeout(role_url):
    with MemoryBank(role_url, max_size=1, statement_timeout="1234ms") as bank, bank._pool.connection() as c:
        assert c.execute("show statement_timeout").fetchone()["statement_timeout"] == "1234ms"
        assert c.execute("select current_setting('membank.lock_timeout') as t").fetchone()["t"] == "5s"


# -- compare-and-set ------------------------------------------------------------------------------------------

@pytest.mark.role("membank_writer")
def test_two_updates_with_the_same_expected_revision_one_wins(bank):
    m = bank.create_memory({"user_id": "cas"}, "v1")
    barrier = threading.Barrier(2)
    outcomes = []

    def edit(text):
        barrier.wait()
        try:
            outcomes.append(bank.update_memory(m.name, fact=text, expected_revision=1).fact)
        except errors.ConflictError as err:
            outcomes.append(err.sqlstate)

    threads = [threading.Thread(target=edit, args=(t,)) for t in ("edit A", "edit B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes)[0] == "MB003" and sorted(outcomes)[1] in ("edit A", "edit B")
    now = bank.get_memory(m.name)
    assert now.revision == 2 and now.fact == sorted(outcomes)[1]
    assert len(bank.list_revisions(m.name)) == 2  # the loser wrote nothing


@pytest.mark.role("membank_writer")
def test_delete_and_rollback_check_expected_revision(bank):
    m = bank.create_memory({"user_id": "cas"}, "v1")
    bank.update_memory(m.name, fact="v2", expected_revision=1)
    with pytest.raises(errors.ConflictError) as caught:
        bank.delete_memory(m.name, expected_revision=1)
    assert caught.value.sqlstate == "MB003" and caught.value.argument == "expected_revision"
    with pytest.raises(errors.ConflictError):
        bank.rollback_memory(m.name, 1, expected_revision=1)
    assert bank.rollback_memory(m.name, 1, expected_revision=2).fact == "v1"
    bank.delete_memory(m.name, expected_revision=3)
    with pytest.raises(errors.ConflictError):
        bank.rollback_memory(m.name, 1, expected_revision=3)
    assert bank.rollback_memory(m.name, 1, expected_revision=4).revision == 5


def test_cli_expected_revision(db_url, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    runner = CliRunner()
    with MemoryBank(db_url, max_size=1) as bank:
        name = str(bank.create_memory({"user_id": "cli"}, "v1").name)
    ok = runner.invoke(main, ["memories", "update", name, "--fact", "v2", "--expected-revision", "1"])
    assert ok.exit_code == 0, ok.output
    lost = runner.invoke(main, ["memories", "update", name, "--fact", "v3", "--expected-revision", "1"])
    assert lost.exit_code == 2 and "MB003" in lost.output
    lost = runner.invoke(main, ["memories", "delete", name, "--expected-revision", "1"])
    assert lost.exit_code == 2 and "MB003" in lost.output


# -- definer functions cannot be hijacked ------------------------------------------------------------------

PLANTS = """
create table public.hijack_log (who text, what text);
grant insert, select on public.hijack_log to public;
create function public.array_remove(a text[], e text) returns text[] language plpgsql as $f$
begin insert into public.hijack_log values (current_user, 'array_remove');
      return pg_catalog.array_remove(a::anyarray, e::anyelement); end $f$;
create function public.unnest(a text[]) returns setof text language plpgsql as $f$
begin insert into public.hijack_log values (current_user, 'unnest');
      return query select pg_catalog.unnest(a::anyarray); end $f$;
create function public.jsonb_typeof(j jsonb) returns text language plpgsql as $f$
begin insert into public.hijack_log values (current_user, 'jsonb_typeof'); return pg_catalog.jsonb_typeof(j); end $f$;
create function public.to_tsvector(c regconfig, t text) returns tsvector language plpgsql as $f$
begin insert into public.hijack_log values (current_user, 'to_tsvector');
      return pg_catalog.to_tsvector(c, t); end $f$;
create function public.to_tsvector(t text) returns tsvector language plpgsql as $f$
begin insert into public.hijack_log values (current_user, 'to_tsvector');
      return pg_catalog.to_tsvector(t); end $f$;
create function public.lower(t text) returns text language plpgsql as $f$
begin insert into public.hijack_log values (current_user, 'lower'); return pg_catalog.lower(t); end $f$;
create function public.md5(t text) returns text language plpgsql as $f$
begin insert into public.hijack_log values (current_user, 'md5'); return pg_catalog.md5(t); end $f$;
create function public.hijack_eq(a jsonb, b jsonb) returns boolean language plpgsql as $f$
begin insert into public.hijack_log values (current_user, '='); return a operator(pg_catalog.=) b; end $f$;
create operator public.= (leftarg = jsonb, rightarg = jsonb, function = public.hijack_eq);
create function public.hijack_eq_uuid(a uuid, b uuid) returns boolean language plpgsql as $f$
begin insert into public.hijack_log values (current_user, '='); return a operator(pg_catalog.=) b; end $f$;
create operator public.= (leftarg = uuid, rightarg = uuid, function = public.hijack_eq_uuid);
create function public.hijack_dist(a real[], b real[]) returns double precision language plpgsql as $f$
begin insert into public.hijack_log values (current_user, '<=>'); return 0; end $f$;
create operator public.<=> (leftarg = real[], rightarg = real[], function = public.hijack_dist);
"""


def test_planted_overloads_never_run(conn, login):
    from test_schema import test_every_public_function_is_called

    conn.execute("grant create on schema public to public")
    attacker, attacker_url = login("membank_writer")
    with connect(attacker_url) as a:
        a.execute(PLANTS)
    _, reader_url = login("membank_reader")
    # Every API function, as the owner-equivalent superuser (definer bodies run the same either way) ...
    test_every_public_function_is_called(conn)
    # ... and the application's calls as the attacker itself, with its own search_path leading to public.
    with connect(attacker_url) as a:
        a.execute("set search_path = public, pg_catalog")
        name = a.execute("select (membank.create_memory(scope => '{\"user_id\": \"x\"}', fact => 'I like tea',"
                         " topics => '{A,B}')).name::text as n").fetchone()["n"]
        a.execute("select membank.update_memory(name => %s, fact => 'I like coffee', topics => '{B}')", (name,))
        a.execute("select * from membank.retrieve_memories(scope => '{\"user_id\": \"x\"}', query_text => 'coffee',"
                  " query_embedding => '{1,0,0}', top_k => 3)")
        a.execute("select * from membank.list_memories(scope => '[{\"user_id\": \"x\"}, {\"user_id\": \"y\"}]')")
        a.execute("select membank.append_events(scope => '{\"user_id\": \"x\"}', session_id => 's', events =>"
                  " '[{\"event_id\":\"e\",\"author\":\"user\",\"text\":\"I like tea\","
                  " \"timestamp\":\"2023-05-24T10:00:00Z\"}]')")
        a.execute("select membank.generate_memories(scope => '{\"user_id\": \"x\"}', session_id => 's')")
        a.execute("select membank.delete_memory(name => %s)", (name,))
        a.execute("select membank.rollback_memory(name => %s, revision => 1)", (name,))
    with connect(reader_url) as r:
        r.execute("set search_path = public, pg_catalog")
        r.execute("select * from membank.list_revisions(name => %s)", (name,))
    assert conn.execute("select * from public.hijack_log").fetchall() == []
    assert conn.execute("select rolsuper from pg_roles where rolname = %s", (attacker,)).fetchone() == {
        "rolsuper": False}


def test_install_refuses_a_vector_schema_others_can_create_in(empty_db_url):
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        c.execute("create extension vector schema public")
        c.execute("grant create on schema public to public")
    with pytest.raises(Exception) as caught:
        migrate.upgrade(empty_db_url)
    err = caught.value.orig if hasattr(caught.value, "orig") else caught.value
    assert err.sqlstate == "MB030"
    assert "PUBLIC" in err.diag.message_primary and "membank db upgrade" in err.diag.message_hint
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        c.execute("revoke create on schema public from public")
    migrate.upgrade(empty_db_url)  # the hint's way out works
    assert migrate.current(empty_db_url) == migrate.head()
