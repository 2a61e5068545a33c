"""Holes an attack on the trust boundary found, kept as regressions.

Each test states what the README promises, as the login roles apps use: a
role bound to scopes carries no job of another scope (generation jobs name
operations by a guessable id), bank-wide ingestion settings are the
unrestricted admin's with a bounded wait, and a purge leaves no source text in
the errors of operations that learned from the purged memory's events.
"""

from __future__ import annotations

import json

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
