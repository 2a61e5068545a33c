"""Holes an attack on the trust boundary found, kept as regressions.

Each test states what the README promises, as the login roles apps use: a
role bound to scopes carries no job of another scope (generation jobs name
operations by a guessable id), bank-wide ingestion settings are the
unrestricted admin's with a bounded wait, and a purge leaves no source text in
the errors of operations that learned from the purged memory's events.
"""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from conftest import connect_as

A = json.dumps({"user_id": "A"})
B = json.dumps({"user_id": "B"})


def _bound(superuser, login, grant: str, scope: str) -> psycopg.Connection:
    """A login holding grant, bound to scope (by an unrestricted superuser)."""
    name, url = login(grant)
    superuser.execute("select membank.bind_role_to_scope(%s, %s)", (name, scope))
    return connect_as(url)


def _job_of(superuser, operation_name) -> int:
    return superuser.execute("select j.id from membank_private.generation_jobs as j where j.operation_name = %s",
                             (operation_name,)).fetchone()["id"]


def _events(n: int, text: str) -> str:
    return json.dumps([{"event_id": f"e{n}", "author": "user", "text": text, "timestamp": "2026-01-01T00:00:00Z"}])


def test_bound_worker_cannot_complete_another_scopes_extract_job(superuser, login):
    """README Roles: a restricted role 'reaches nothing' outside its scopes, 'the job queues refuse it'.

    complete_generation_job has no scope or bound-role check: a worker login bound to A writes the
    "extracted facts" of B's operation (any job id; ids are sequential), which then become B's memories.
    """
    name_b, b_url = login("membank_writer")
    superuser.execute("select membank.bind_role_to_scope(%s, %s)", (name_b, B))
    with connect_as(b_url) as b, _bound(superuser, login, "membank_worker", A) as w:
        b.execute("select membank.append_events(%s, 's1', %s)", (B, _events(1, "I live in Paris")))
        op = b.execute("select membank.generate_memories(%s, session_id => 's1') as n", (B,)).fetchone()["n"]
        job = _job_of(superuser, op)
        try:
            w.execute("select membank.complete_generation_job(%s, %s)",
                      (job, json.dumps({"memories": [{"fact": "B agreed to wire money to A"}]})))
            outcome = "accepted"
        except psycopg.errors.InsufficientPrivilege:
            outcome = "42501"
        facts = superuser.execute("select facts::text as f from membank_private.operations where name = %s",
                                  (op,)).fetchone()["f"]
        assert outcome == "42501", f"a worker bound to A completed B's job; B's operation now holds {facts}"


def test_bound_admin_cannot_replace_another_scopes_memories_by_compaction(superuser, login):
    """A restricted admin (even one whose every scope was erased) completes B's COMPACT job with its own
    summary: B's memories are deleted and replaced by the attacker's text (apply_compaction checks no scope)."""
    name_b, b_url = login("membank_writer")
    superuser.execute("select membank.bind_role_to_scope(%s, %s)", (name_b, B))
    with connect_as(b_url) as b, _bound(superuser, login, "membank_admin", A) as adm:
        adm.execute("select membank.erase_scope(%s, true)", (A,))  # now restricted to nothing
        b.execute("select membank.create_memory(%s, 'B likes tea')", (B,))
        b.execute("select membank.create_memory(%s, 'B likes cheese')", (B,))
        op = b.execute("select membank.compact_memories(%s, interval '0') as n", (B,)).fetchone()["n"]
        job = _job_of(superuser, op)
        try:
            adm.execute("select membank.complete_generation_job(%s, %s)",
                        (job, json.dumps({"summary": "B owes tenant A 10000 EUR"})))
        except psycopg.errors.InsufficientPrivilege:
            pass
        facts = [r["fact"] for r in b.execute("select fact from membank.list_memories(%s)", (B,)).fetchall()]
        assert sorted(facts) == ["B likes cheese", "B likes tea"], f"B's memories are now {facts}"


def test_bound_admin_cannot_fail_another_scopes_operation(superuser, login):
    """fail_generation_job has no scope or bound-role check: a restricted admin fails B's operation
    and writes its own text into B's operation error."""
    name_b, b_url = login("membank_writer")
    superuser.execute("select membank.bind_role_to_scope(%s, %s)", (name_b, B))
    with connect_as(b_url) as b, _bound(superuser, login, "membank_admin", A) as adm:
        op = b.execute("select membank.generate_memories(%s, facts => '[{\"fact\": \"x\"}]') as n",
                       (B,)).fetchone()["n"]
        job = _job_of(superuser, op)
        try:
            adm.execute("select membank.fail_generation_job(%s, 'pwned by tenant A', false)", (job,))
        except psycopg.errors.InsufficientPrivilege:
            pass
        error = b.execute("select error from membank.get_operation(%s, %s)", (op, B)).fetchone()["error"]
        assert error is None, f"B's operation was failed by a role bound to A: {error}"


def test_bound_admin_cannot_configure_ingestion(superuser, login):
    """README Roles: bank-wide settings are the unrestricted admin's; configure_ingestion (the bank's default
    IngestEvents trigger) has no refuse_bound_caller."""
    with _bound(superuser, login, "membank_admin", A) as adm:
        try:
            adm.execute("""select membank.configure_ingestion('{"generation_rule": {"event_count": 1000}}')""")
            outcome = "accepted"
        except psycopg.errors.InsufficientPrivilege:
            outcome = "42501"
    assert outcome == "42501"


def test_held_ingestion_settings_row_fails_others_with_mb040(superuser, login):
    """README Roles: 'a call that finds one of those [bank-wide] rows held by another open transaction fails
    with MB040 after membank.lock_timeout instead of waiting'. configure_ingestion sets no lock_timeout:
    the second admin waits until statement_timeout (57014)."""
    _, url = login("membank_admin")
    with connect_as(url) as holder, connect_as(url) as other:
        holder.execute("begin")
        holder.execute("select membank.configure_ingestion(null)")
        other.execute("set membank.lock_timeout = '1s'")
        other.execute("set statement_timeout = '20s'")
        try:
            other.execute("select membank.configure_ingestion(null)")
            state = "no wait"
        except psycopg.Error as e:
            state = e.sqlstate
        holder.execute("rollback")
    assert state == "MB040"


@pytest.mark.parametrize("how", ["invalid_output", "provider_error"])
def test_purge_leaves_no_source_text_in_operation_errors(superuser, login, how):
    """README Erasure: after purge_memories(force) 'any operation of the scope drops the rejected items that
    name it or repeat one of its texts'; 'operations keep no inputs'. An operation's error keeps up to 300
    characters of the model reply (INVALID_MODEL_OUTPUT) or 2000 of the provider's error (MODEL_CALL_FAILED),
    which quote the source event; both survive delete + purge(force) of the memory made from that event."""
    canary = "CANARY-7d1f"
    name_w, w_url = login("membank_writer")
    _, k_url = login("membank_worker")
    _, a_url = login("membank_admin")
    with connect_as(w_url) as app, connect_as(k_url) as wrk, connect_as(a_url) as adm:
        app.execute("select membank.append_events(%s, 's1', %s)", (A, _events(1, f"my pin is {canary}")))

        def run(request_id, reply=None, fail=None):
            op = app.execute("select membank.generate_memories(%s, session_id => 's1', request_id => %s) as n",
                             (A, request_id)).fetchone()["n"]
            job = wrk.execute("select job_id from membank.claim_generation_jobs(1)").fetchone()["job_id"]
            if fail:
                wrk.execute("select membank.fail_generation_job(%s, %s, false)", (job, fail))
                return
            r = wrk.execute("select membank.complete_generation_job(%s, %s) as r", (job, reply)).fetchone()["r"]
            while r == "next":
                wrk.execute("select * from membank.prepare_consolidation(%s)", (job,))
                r = wrk.execute("select membank.complete_generation_job(%s, %s) as r",
                                (job, '{"actions": [{"fact_index": 0, "action": "CREATE"}]}')).fetchone()["r"]
            return op

        run("r1", json.dumps({"memories": [{"fact": f"The user's pin is {canary}"}]}))
        if how == "invalid_output":
            run("r2", f"I will not repeat the pin {canary}")
        else:
            run("r2", fail=f"HTTP 400: input 'my pin is {canary}' rejected")
        for m in app.execute("select name from membank.list_memories(%s)", (A,)).fetchall():
            app.execute("select membank.delete_memory(%s, %s)", (m["name"], A))
        adm.execute("select membank.purge_memories(%s, force => true)", (A,))
        left = superuser.execute(
            "select name, error from membank_private.operations where error::text like %s",
            (f"%{canary}%",)).fetchall()
    assert left == [], f"the purged memory's source text survives in operation errors: {left}"


# -- maintenance procedures run with their caller's search_path -------------------------------------------

# A tenant's plants in a schema on the admin's search_path: each logs that it ran (as whom) and, run as an
# unrestricted admin, lifts the tenant's restriction. They shadow what the procedures' bodies used unqualified:
# #>> with an untyped literal (pg_catalog has only #>>(jsonb, text[])), jsonb_object_agg over (text, bigint)
# (pg_catalog's takes "any"), and, with the schema before pg_catalog on the path, + and < of bigints.
TENANT_PLANTS = """
create table tenant_ns.ran (who text, what text);
grant insert, select on tenant_ns.ran to public;
create function tenant_ns.pwn(what text) returns void language plpgsql as $f$
begin
    insert into tenant_ns.ran values (current_user, what);
    if pg_catalog.pg_has_role(current_user, 'membank_admin', 'USAGE') then
        perform membank.unrestrict_role('{tenant}');
    end if;
end $f$;
create function tenant_ns.path_text(j jsonb, p text) returns text language plpgsql as $f$
begin perform tenant_ns.pwn('#>>'); return j operator(pg_catalog.#>>) pg_catalog.string_to_array(p, ','); end $f$;
create operator tenant_ns.#>> (leftarg = jsonb, rightarg = text, function = tenant_ns.path_text);
create function tenant_ns.plus(a bigint, b bigint) returns bigint language plpgsql as $f$
begin perform tenant_ns.pwn('+'); return a operator(pg_catalog.+) b; end $f$;
create operator tenant_ns.+ (leftarg = bigint, rightarg = bigint, function = tenant_ns.plus);
create function tenant_ns.lt(a bigint, b integer) returns boolean language plpgsql as $f$
begin perform tenant_ns.pwn('<'); return a operator(pg_catalog.<) b; end $f$;
create operator tenant_ns.< (leftarg = bigint, rightarg = integer, function = tenant_ns.lt);
create function tenant_ns.agg_step(s jsonb, k text, v bigint) returns jsonb language plpgsql as $f$
begin perform tenant_ns.pwn('jsonb_object_agg');
      return coalesce(s, '{{}}'::jsonb) operator(pg_catalog.||) pg_catalog.jsonb_build_object(k, v); end $f$;
create aggregate tenant_ns.jsonb_object_agg(text, bigint) (sfunc = tenant_ns.agg_step, stype = jsonb);
create function tenant_ns.set_config(a text, b text, c boolean) returns text language plpgsql as $f$
begin perform tenant_ns.pwn('set_config'); return pg_catalog.set_config(a, b, c); end $f$;
"""


@pytest.mark.parametrize("procedure", [
    "call membank.apply_retention()",
    "call membank.apply_retention(batch_size => 1)",
    "call membank.purge_expired_memories()",
    "call membank.purge_expired_memories(batch_size => 1)",
    "call membank.purge_memories_in_batches(scope => '{\"user_id\": \"B\"}', batch_size => 1)",
])
def test_tenant_plants_on_the_admins_path_never_run_in_maintenance(superuser, login, procedure):
    """apply_retention and the purge_* procedures were SECURITY INVOKER without a pinned search_path.
    A tenant (a writer bound to A) that may CREATE in a schema on the admin's path plants operators and an
    aggregate; when the admin runs the procedure, the tenant's code runs as the admin (it unrestricts the
    tenant, which then reads B). After: no plant runs, the tenant stays bound to A, and the admin's own session
    keeps its search_path."""
    tenant, tenant_url = login("membank_writer")
    superuser.execute("select membank.bind_role_to_scope(%s, %s)", (tenant, A))
    superuser.execute("create schema tenant_ns")
    superuser.execute("grant usage on schema tenant_ns to public")
    superuser.execute(f'grant create on schema tenant_ns to "{tenant}"')  # the DBA's mistake
    _, admin_url = login("membank_admin")
    superuser.execute("select membank.configure_retention(deleted_revisions => '0', finished_operations => '0',"
                      " events => '0')")
    # Something for each procedure to remove: expired and deleted memories, events.
    for scope in (A, B):
        superuser.execute("select membank.create_memory(%s, 'expires', ttl => '1 hour')", (scope,))
        superuser.execute("select membank.create_memory(%s, 'stays')", (scope,))
        superuser.execute("select membank.create_memory(%s, 'second')", (scope,))
        name = superuser.execute("select (membank.create_memory(%s, 'deleted')).name as n", (scope,)).fetchone()["n"]
        superuser.execute("select membank.delete_memory(%s, %s)", (name, scope))
        superuser.execute("select membank.append_events(%s, 's1', %s)", (scope, _events(1, "hello")))
    superuser.execute("update membank_private.memories set expire_time = now() - interval '1s'"
                      " where fact = 'expires'")  # time moved on: expired
    with connect_as(tenant_url) as t:
        t.execute(TENANT_PLANTS.replace("{tenant}", tenant).replace("{{}}", "{}"))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            t.execute("select fact from membank.list_memories(%s)", (B,))
    # The plants are live on that path: an unqualified #>> in a query of a login's own runs one.
    _, nobody_url = login()
    with connect_as(nobody_url) as nobody:
        nobody.execute("set search_path = tenant_ns, pg_catalog, public")
        nobody.execute("""select '{"a": 1}'::jsonb #>> '{a}'""")
    assert superuser.execute("select what from tenant_ns.ran").fetchall() == [{"what": "#>>"}]
    superuser.execute("delete from tenant_ns.ran")
    with connect_as(admin_url) as adm:
        adm.execute("set search_path = tenant_ns, pg_catalog, public")
        adm.execute(procedure)
        path = adm.execute("show search_path").fetchone()["search_path"]
    ran = superuser.execute("select who, what from tenant_ns.ran").fetchall()
    assert ran == [], f"the tenant's code ran inside {procedure}: {ran}"
    with connect_as(tenant_url) as t:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            t.execute("select fact from membank.list_memories(%s)", (B,))
    assert path == "tenant_ns, pg_catalog, public"
    if "apply_retention" in procedure:
        left = superuser.execute("select count(*) as n from membank_private.events").fetchone()["n"]
        assert left == 0  # it did its work
    elif "purge_expired" in procedure:
        left = superuser.execute("select count(*) as n from membank_private.memories"
                                 " where expire_time <= now()").fetchone()["n"]
        assert left == 0
    else:
        facts = superuser.execute("select fact from membank_private.memories where scope = %s"
                                  " and expire_time is null", (B,)).fetchall()
        assert facts == []


# -- side channels for a bound login ------------------------------------------------------------------------

def test_bound_login_sees_backlog_figures_of_its_own_scopes_only(superuser, login):
    """embedding_backlog() and generation_backlog() showed a role bound to A the bank-wide counts,
    the oldest times and B's last_error (another tenant's text and load)."""
    superuser.execute("select membank.create_memory(%s, 'A fact')", (A,))
    for n in range(3):
        superuser.execute("select membank.create_memory(%s, %s)", (B, f"B fact {n}"))
    superuser.execute("update membank_private.embedding_jobs set enqueue_time = enqueue_time - interval '1 day',"
                      " last_error = 'provider refused B secret text', retry_time = now()"
                      " where scope_id = membank.scope_id(%s)", (B,))
    superuser.execute("select membank.append_events(%s, 's1', %s)", (B, _events(1, "I live in Paris")))
    superuser.execute("select membank.generate_memories(%s, session_id => 's1')", (B,))
    a_oldest = superuser.execute("select min(enqueue_time) as t from membank_private.embedding_jobs"
                                 " where scope_id = membank.scope_id(%s)", (A,)).fetchone()["t"]
    for grant in ("membank_reader", "membank_writer", "membank_admin"):
        with _bound(superuser, login, grant, A) as a:
            emb = a.execute("select * from membank.embedding_backlog()").fetchone()
            gen = a.execute("select * from membank.generation_backlog()").fetchone()
        assert (emb["pending"], emb["failed"], emb["embedded"], emb["last_error"]) == (1, 0, 0, None), grant
        assert emb["oldest_enqueue_time"] == a_oldest
        assert (gen["pending_operations"], gen["due_jobs"], gen["oldest_create_time"]) == (0, 0, None), grant
    _, worker_url = login("membank_worker")  # an unbound worker still sees every scope's work
    with connect_as(worker_url) as w:
        emb = w.execute("select * from membank.embedding_backlog()").fetchone()
        gen = w.execute("select * from membank.generation_backlog()").fetchone()
    assert (emb["pending"], emb["last_error"]) == (4, "provider refused B secret text")
    assert emb["oldest_enqueue_time"] < a_oldest
    assert gen["pending_operations"] == 1


@pytest.mark.parametrize("call", [
    "select membank.update_memory(%s, fact => 'overwritten')",
    "select membank.delete_memory(%s)",
    "select membank.update_memory(%s::uuid, fact => 'overwritten')",
    "select membank.delete_memory(%s::uuid)",
])
def test_name_only_write_to_a_busy_scope_of_another_tenant_answers_like_a_missing_name(superuser, login, call):
    """A name-only write (no scope) to a memory of B by a role bound to A took B's write lock first:
    with B busy it answered MB040 after lock_timeout, where a missing name answers P0002 at once, so the
    answer told the tenant that the name exists and that B was writing. Now the bindings are checked before the
    lock: P0002, without waiting (lock_timeout is long and statement_timeout shorter: a wait would be 57014)."""
    name_b = superuser.execute("select (membank.create_memory(%s, 'B private')).name as n", (B,)).fetchone()["n"]
    _, holder_url = login("membank_writer")
    with connect_as(holder_url) as holder, _bound(superuser, login, "membank_writer", A) as a:
        holder.execute("begin")
        holder.execute("select membank.create_memory(%s, 'B is busy')", (B,))  # holds B's write lock
        a.execute("set membank.lock_timeout = '30s'")
        a.execute("set statement_timeout = '3s'")
        answers = []
        for name in (str(name_b), "0b6c9a4e-3f1d-4a57-9a0e-6f2c1d7b8e90"):  # B's memory, a missing name
            try:
                a.execute(call, (name,))
                answers.append("written")
            except psycopg.Error as e:
                answers.append((e.sqlstate, e.diag.message_primary.replace(name, "<name>"), e.diag.message_hint))
        holder.execute("rollback")
    assert answers[0] == answers[1] and answers[0][0] == "P0002", answers
    fact = superuser.execute("select fact from membank_private.memories where name = %s", (name_b,)).fetchone()
    assert fact == {"fact": "B private"}


# -- bounds a caller could slip under ------------------------------------------------------------------------

@pytest.mark.parametrize("setting", ["0.1ms", "0.5", "0.0009s", "0.00001min", "0.999 ms"])
def test_lock_timeout_below_one_millisecond_is_refused(login, setting):
    """membank.lock_timeout = '0.1ms' passed the positive-duration check, and PostgreSQL rounds a
    lock_timeout below 1 ms to 0: no limit at all, so a write waited on a busy scope until statement_timeout.
    It is refused (22023 naming membank.lock_timeout), as 0 is; 1 ms and more is taken as given."""
    _, url = login("membank_writer")
    with connect_as(url) as w:
        w.execute("set membank.lock_timeout = %s" % psycopg.sql.quote(setting))
        with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
            w.execute("select membank.create_memory(%s, 'x')", (A,))
        assert caught.value.diag.message_primary.startswith("membank.lock_timeout: ")
        assert "less than 1 ms" in caught.value.diag.message_primary
        assert caught.value.diag.message_detail == "argument: membank.lock_timeout"
        for fine in ("1ms", "0.001s", "1", "0.5s"):
            w.execute("set membank.lock_timeout = %s" % psycopg.sql.quote(fine))
            w.execute("select membank.create_memory(%s, %s)", (A, f"with {fine}"))
        assert w.execute("select count(*) as n from membank.list_memories(%s)", (A,)).fetchone()["n"] == 4


def test_decompose_query_bounds_its_input_like_retrieve_memories(login):
    """decompose_query (reader-callable) took a query of any length: 3.8 MB cost 4.4 s of CPU.
    It is bounded like retrieve_memories' query: more than 4000 characters is 22023 naming query_text."""
    _, url = login("membank_reader")
    long_question = "where do I live and when did I move? " * 100_000  # 3.7 MB
    with connect_as(url) as r:
        answers = []
        for call, args in [("select membank.decompose_query(%s)", (long_question,)),
                           ("select * from membank.retrieve_memories(%s, %s)", (A, long_question))]:
            with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
                r.execute(call, args)
            answers.append((caught.value.diag.message_primary, caught.value.diag.message_hint))
        assert answers[0] == answers[1]
        assert answers[0][0] == f"query_text: has {len(long_question)} characters"
        at_limit = ("where do I live? when did I move? " * 200)[:4000]
        assert len(r.execute("select membank.decompose_query(%s) as q", (at_limit,)).fetchone()["q"]) >= 1


def test_a_bound_admin_cannot_probe_other_scopes_names_through_import(superuser, login):
    """import_memory checks an old id in every scope (a re-run imports nothing twice); an admin bound to A that
    could call it learned whether a name existed in B (null) or not (a row). Imports are the unrestricted admin's."""
    name_b = superuser.execute("select (membank.create_memory(%s, 'B''s fact')).name", (B,)).fetchone()["name"]
    with _bound(superuser, login, "membank_admin", A) as admin:
        for probe in (str(name_b), "99999999-9999-4999-8999-999999999999"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="import_memory: a role bound to scopes"):
                admin.execute("select membank.import_memory(%s, 'probe', %s)", (A, probe))
            admin.rollback()
    probes = superuser.execute("select count(*) from membank_private.memories where fact = 'probe'").fetchone()
    assert probes["count"] == 0


def test_lock_timeout_past_what_postgresql_takes_is_refused_naming_ours(login):
    """'99999999999min' passed every check, and the first write that had to wait got PostgreSQL's own
    'invalid value for parameter lock_timeout' instead of an error naming membank.lock_timeout."""
    _, url = login("membank_writer")
    with connect_as(url) as w:
        w.execute("set membank.lock_timeout = '99999999999min'")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
            w.execute("select membank.create_memory(%s, 'x')", (A,))
        assert caught.value.diag.message_primary == (
            'membank.lock_timeout: "99999999999min" is more than 2147483647 ms, the most PostgreSQL takes')
        w.execute("set membank.lock_timeout = '2147483647ms'")
        w.execute("select membank.create_memory(%s, 'y')", (A,))


def _wait_until_blocked(observer, pid: int, racer: threading.Thread) -> None:
    # until the racer's call waits on a lock (or is done, which the caller's assertions then catch)
    while racer.is_alive() and not observer.execute(
            "select exists (select from pg_locks where pid = %s and not granted) as waits", (pid,)).fetchone()["waits"]:
        racer.join(0.05)


def test_a_wait_for_a_scope_lock_leaves_the_callers_lock_timeout_as_it_was(login, superuser):
    """lock_scope_waiting set lock_timeout to membank.lock_timeout for its wait and left it so for the rest
    of the caller's transaction: a caller with lock_timeout = 0 (no limit) found it 5s afterwards."""
    _, url = login("membank_writer")
    with connect_as(url) as holder, connect_as(url) as waiter:
        holder.execute("begin")
        holder.execute("select membank.create_memory(%s, 'held')", (A,))
        waiter.execute("set lock_timeout = 0")
        waiter.execute("begin")
        shown: list = []

        def write():
            waiter.execute("select membank.create_memory(%s, 'waited')", (A,))
            shown.append(waiter.execute("show lock_timeout").fetchone()["lock_timeout"])

        racer = threading.Thread(target=write)
        racer.start()
        _wait_until_blocked(superuser, waiter.info.backend_pid, racer)
        holder.execute("commit")
        racer.join()
        waiter.execute("commit")
        assert shown == ["0"]


def test_an_import_waits_for_an_ids_lock_only_as_long_as_a_scope_lock(login, superuser):
    """import_memory's lock on the old id is an advisory lock, which any login can take: an import waited for
    it without limit (until statement_timeout) while holding the scope's write lock, so the scope's writes
    failed meanwhile. The wait is bounded by membank.lock_timeout (MB040) and comes before the scope lock."""
    _, reader = login("membank_reader")
    _, admin = login("membank_admin")
    _, writer = login("membank_writer")
    name = "0b6c9a4e-3f1d-4a57-9a0e-6f2c1d7b8e91"
    with connect_as(reader) as squatter, connect_as(admin) as importer, connect_as(writer) as w:
        squatter.execute("select pg_advisory_lock(hashtextextended('membank.import_memory:' || %s, 0))", (name,))
        importer.execute("set membank.lock_timeout = '200ms'")
        importer.execute("begin")
        with pytest.raises(psycopg.Error) as caught:
            importer.execute("select membank.import_memory(%s, 'imported', %s)", (A, name))
        assert caught.value.sqlstate == "MB040"
        assert caught.value.diag.message_primary == "name: another import of this id held it for longer than 200ms"
        importer.execute("rollback")
        importer.execute("begin")
        with pytest.raises(psycopg.Error):
            importer.execute("select membank.import_memory(%s, 'imported', %s)", (A, name))
        # the failed import holds no scope lock while its transaction is still open: the scope takes writes
        w.execute("set membank.lock_timeout = '200ms'")
        w.execute("select membank.create_memory(%s, 'written meanwhile')", (A,))
        importer.execute("rollback")
        squatter.execute("select pg_advisory_unlock_all()")
        assert importer.execute("select (membank.import_memory(%s, 'imported', %s)).fact",
                                (A, name)).fetchone()["fact"] == "imported"
