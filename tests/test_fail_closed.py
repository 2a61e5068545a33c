"""The trust boundary fails closed: restricted roles never widen, binding management is the unrestricted
admin's, bank-wide rows are the worker's and admin's with bounded waits, and ADK app: state blocks no other user.

Every call here runs as a login holding the membank role an application, a worker or an operator would use; the
superuser only creates and drops login roles.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import connect_as

X = {"app_name": "a", "user_id": "ux"}  # the tenant's own scope
B = {"app_name": "a", "user_id": "ub"}  # another tenant's


@pytest.fixture
def admin(login):
    """An unrestricted admin login's connection (binding management, bank-wide settings)."""
    _, url = login("membank_admin")
    with connect_as(url) as c:
        yield c


@pytest.fixture
def seeded(login, admin):
    """Scopes X and B each with a memory, an operation, events, an ADK session, a profile field and a tool rule."""
    _, writer_url = login("membank_writer")
    admin.execute("select membank.create_profile_schema('p', '{\"properties\": {\"city\": {\"type\": \"string\"}}}')")
    names = {}
    with connect_as(writer_url) as w:
        for scope in (X, B):
            user = scope["user_id"]
            names[user] = str(w.execute("select (membank.create_memory(scope => %s, fact => %s)).name as n",
                                        (Jsonb(scope), f"{user} lives in Lisbon")).fetchone()["n"])
            names[user + "_op"] = str(w.execute(
                "select membank.generate_memories(scope => %s, facts => %s) as n",
                (Jsonb(scope), Jsonb([f"{user} likes tea"]))).fetchone()["n"])
            w.execute("select membank.create_session(app_name => 'a', user_id => %s, session_id => 's',"
                      " state => %s)", (user, Jsonb({"user:city": "Lisbon", "app:theme": "dark"})))
            w.execute("select membank.append_session_event(app_name => 'a', user_id => %s, session_id => 's',"
                      " event => %s)", (user, Jsonb({"id": "e1", "author": "user", "timestamp": 1700000000,
                                                     "content": {"parts": [{"text": f"I am {user}"}]}})))
        admin.execute("select membank.create_tool_rule(scope => %s, tool_name => 'sh', pattern => 'ls .*',"
                      " decision => 'ALLOW')", (Jsonb(B),))
    return names


def tenant_login(login, admin, *grants, scopes=(X,)):
    """A login bound (by the admin) to ``scopes``; returns (role name, URL)."""
    role, url = login(*grants)
    for scope in scopes:
        assert admin.execute("select membank.bind_role_to_scope(%s, %s) as b", (role, Jsonb(scope))).fetchone()["b"]
    return role, url


def refused(c, sql, args=()):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute(sql, args)


def assert_reaches_no_scope(c, names, scopes=(X, B)):
    """Every path to a memory, session, event, view, profile or tool rule of ``scopes`` is closed to connection c."""
    for scope in scopes:
        user = scope["user_id"]
        for sql in ("select * from membank.list_memories(scope => %s)",
                    "select * from membank.retrieve_memories(scope => %s, query_text => 'Lisbon')",
                    "select membank.retrieve_profiles(scope => %s)",
                    "select * from membank.list_events(scope => %s, session_id => 's')",
                    "select * from membank.list_operations(scope => %s)",
                    "select * from membank.list_tool_rules(scope => %s)",
                    "select * from membank.check_tool_permission(scope => %s, project_id => null, tool_name => 'sh',"
                    " command => 'ls')",
                    "select membank.create_memory(scope => %s, fact => 'planted')",
                    "select membank.set_scope(%s)"):
            refused(c, sql, (Jsonb(scope),))
        for sql in ("select membank.get_session(app_name => 'a', user_id => %s, session_id => 's')",
                    "select membank.get_user_state(app_name => 'a', user_id => %s)",
                    "select membank.create_session(app_name => 'a', user_id => %s, session_id => 'new')"):
            refused(c, sql, (user,))
        for sql in ("select membank.get_memory(name => %s)", "select * from membank.list_revisions(name => %s)",
                    "select membank.update_memory(name => %s, fact => 'hacked')"):
            with pytest.raises(psycopg.errors.NoDataFound):
                c.execute(sql, (names[user],))
        with pytest.raises(psycopg.errors.NoDataFound):
            c.execute("select * from membank.get_operation(name => %s)", (names[user + "_op"],))
        # The views, even when the setting is written directly.
        c.execute("select set_config('membank.scope', %s, false)", (json.dumps(scope),))
        for view in ("scoped_memories", "scoped_profiles", "scoped_revisions"):
            assert c.execute(f"select count(*) as n from membank.{view}").fetchone()["n"] == 0, view
    listed = {r["s"]["user_id"] for r in c.execute("select s from membank.list_sessions(app_name => 'a') as s")}
    assert not listed & {scope["user_id"] for scope in scopes}
    refused(c, "select * from membank.claim_embedding_jobs(1)")


# -- a restricted role never widens ---------------------------------------------------------------------------

def test_a_bound_role_whose_scopes_are_erased_or_unbound_reaches_nothing(login, admin, seeded):
    role, url = tenant_login(login, admin, "membank_writer", scopes=(X,))
    _, other_url = tenant_login(login, admin, "membank_writer", scopes=(X,))
    with connect_as(url) as t, connect_as(other_url) as u:
        assert [r["fact"] for r in t.execute("select fact from membank.list_memories(scope => %s)",
                                             (Jsonb(X),))] == ["ux lives in Lisbon"]
        assert_reaches_no_scope(t, seeded, scopes=(B,))
        # Purging X's memories and applying retention leave the binding and the restriction.
        assert admin.execute("select membank.purge_memories(scope => %s, force => true) as n",
                             (Jsonb(X),)).fetchone()["n"] == 1
        admin.execute("call membank.apply_retention()")
        admin.execute("call membank.purge_expired_memories()")
        assert t.execute("select count(*) as n from membank.list_memories(scope => %s)", (Jsonb(X),)).fetchone()[
            "n"] == 0
        assert_reaches_no_scope(t, seeded, scopes=(B,))
        # Erasing X removes both roles' last binding: they stay restricted, to nothing.
        erased = admin.execute("select membank.erase_scope(scope => %s, force => true) as e",
                               (Jsonb(X),)).fetchone()["e"]
        assert erased["counts"]["scope_bindings"] == 2
        assert_reaches_no_scope(t, seeded)
        # Listed as restricted with no scope left.
        assert [r["scope"] for r in admin.execute("select scope from membank.list_scope_bindings(role => %s)",
                                                  (role,))] == [None]
        # Unbinding: rebind the other role to B and X, then unbind both.
        other = u.execute("select session_user as r").fetchone()["r"]
        for scope in (B, X):
            admin.execute("select membank.bind_role_to_scope(%s, %s)", (other, Jsonb(scope)))
        assert u.execute("select count(*) as n from membank.list_memories(scope => %s)", (Jsonb(B),)).fetchone()[
            "n"] == 1
        for scope in (B, X):
            assert admin.execute("select membank.unbind_role_from_scope(%s, %s) as u",
                                 (other, Jsonb(scope))).fetchone()["u"]
        assert_reaches_no_scope(u, seeded)
    # Only the explicit call lifts the restriction.
    assert admin.execute("select membank.unrestrict_role(%s) as u", (role,)).fetchone()["u"]
    with connect_as(url) as t:
        assert t.execute("select count(*) as n from membank.list_memories(scope => %s)", (Jsonb(B),)).fetchone()[
            "n"] == 1


def test_a_recreated_role_of_the_same_name_is_neither_restricted_nor_widened(superuser, login, admin, seeded):
    role, url = tenant_login(login, admin, "membank_writer", scopes=(X,))
    superuser.execute(f'drop role "{role}"')
    # Re-created and not bound: a new role, not restricted by the dropped one's rows.
    superuser.execute(f'create role "{role}" login in role membank_writer')
    with connect_as(url) as t:
        assert t.execute("select count(*) as n from membank.list_memories(scope => %s)", (Jsonb(B),)).fetchone()[
            "n"] == 1
    assert admin.execute("select * from membank.list_scope_bindings(role => %s)", (role,)).fetchall() == []
    # Re-created again and bound to B: it reaches B only, never the dropped role's X.
    superuser.execute(f'drop role "{role}"')
    superuser.execute(f'create role "{role}" login in role membank_writer')
    admin.execute("select membank.bind_role_to_scope(%s, %s)", (role, Jsonb(B)))
    with connect_as(url) as t:
        assert t.execute("select count(*) as n from membank.list_memories(scope => %s)", (Jsonb(B),)).fetchone()[
            "n"] == 1
        assert_reaches_no_scope(t, seeded, scopes=(X,))
    assert [r["scope"] for r in admin.execute("select scope from membank.list_scope_bindings(role => %s)",
                                              (role,))] == [B]


def test_a_renamed_role_stays_restricted(superuser, login, admin, seeded):
    role, url = tenant_login(login, admin, "membank_writer", scopes=(X,))
    superuser.execute(f'alter role "{role}" rename to "{role}_r"')  # renamed back below, for the fixture's drop
    try:
        with connect_as(url.replace(role, f"{role}_r")) as t:
            assert_reaches_no_scope(t, seeded, scopes=(B,))
            assert t.execute("select count(*) as n from membank.list_memories(scope => %s)", (Jsonb(X),)).fetchone()[
                "n"] == 1
        assert [r["role_name"] for r in admin.execute("select role_name from membank.list_scope_bindings()")] == [
            f"{role}_r"]
    finally:
        superuser.execute(f'alter role "{role}_r" rename to "{role}"')


def test_a_bound_admin_changes_no_binding_and_sees_only_its_own(login, admin, seeded):
    role, url = tenant_login(login, admin, "membank_admin", scopes=(X,))
    other, _ = tenant_login(login, admin, "membank_writer", scopes=(B,))
    unbound, _ = login("membank_writer")
    with connect_as(url) as a:
        for target in (role, other, unbound):
            for scope in (X, B):
                refused(a, "select membank.bind_role_to_scope(%s, %s)", (target, Jsonb(scope)))
                refused(a, "select membank.unbind_role_from_scope(%s, %s)", (target, Jsonb(scope)))
            refused(a, "select membank.unrestrict_role(%s)", (target,))
        assert [(r["role_name"], r["scope"]) for r in a.execute("select * from membank.list_scope_bindings()")] == [
            (role, X)]
        assert a.execute("select * from membank.list_scope_bindings(role => %s)", (other,)).fetchall() == []
        # Bank-wide settings and every scope's maintenance are the unrestricted admin's too.
        for sql in ("select membank.configure_retention(events => interval '1 day')",
                    "select membank.configure_embedding(model_id => 'test/m', dimension => 3)",
                    "select membank.reembed(model_id => 'test/m', dimension => 3)",
                    "select membank.create_profile_schema('q', '{\"properties\": {\"x\": {\"type\": \"string\"}}}')",
                    "select membank.update_profile_schema('p', '{\"properties\": {\"x\": {\"type\": \"string\"}}}')",
                    "select membank.delete_profile_schema('p', force => true)",
                    "call membank.purge_expired_memories()",
                    "call membank.apply_retention()",
                    "select * from membank.scope_vector_index_plan()"):
            refused(a, sql)
        # Its own scope stays its to manage.
        assert a.execute("select membank.erase_scope(scope => %s) as e", (Jsonb(X),)).fetchone()["e"]["counts"][
            "memories"] == 1
    # Nothing changed: the unrestricted admin still sees both bindings.
    assert sorted((r["role_name"], r["scope"]["user_id"]) for r in admin.execute(
        "select * from membank.list_scope_bindings() where role_name in (%s, %s)", (role, other))) == sorted(
        [(role, "ux"), (other, "ub")])


# -- bank-wide rows -------------------------------------------------------------------------------------------

def test_a_writer_may_not_configure_the_embedding_model(login):
    _, writer_url = login("membank_writer")
    _, worker_url = login("membank_worker")
    with connect_as(writer_url) as w:
        refused(w, "select membank.configure_embedding(model_id => 'test/m', dimension => 3)")
    with connect_as(worker_url) as w:
        w.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 3)")


def _held(holder_url, victim_url, setup, hold, victims):
    with connect_as(holder_url) as holder, connect_as(victim_url) as victim:
        for sql in setup:
            holder.execute(sql)
        victim.execute("set membank.lock_timeout = '200ms'")
        holder.execute("begin")
        holder.execute(hold)
        try:
            for sql in victims:
                with pytest.raises(psycopg.Error) as caught:
                    victim.execute(sql)
                assert caught.value.sqlstate == "MB040", (sql, caught.value.sqlstate, str(caught.value))
                assert "membank.lock_timeout" in caught.value.diag.message_hint
        finally:
            holder.execute("rollback")
        for sql in victims:  # once the holder is gone, the same calls go through
            victim.execute(sql)


def test_a_held_embedding_configuration_fails_others_with_mb040(login):
    _, worker_url = login("membank_worker")
    _, admin_url = login("membank_admin")
    _held(worker_url, admin_url, [], "select membank.configure_embedding(model_id => 'test/m', dimension => 3)",
          ["select membank.configure_embedding(model_id => 'test/m', dimension => 3)",
           "select membank.reembed(model_id => 'test/m', dimension => 3)"])
    _held(admin_url, worker_url, [], "select membank.reembed(model_id => 'test/n', dimension => 2)",
          ["select membank.configure_embedding(model_id => 'test/n', dimension => 2)"])


def test_held_bank_settings_fail_others_with_mb040(login):
    _, admin_url = login("membank_admin")
    tenant, _ = login("membank_writer")
    _, other_admin_url = login("membank_admin")
    schema = "'{\"properties\": {\"x\": {\"type\": \"string\"}}}'"
    _held(admin_url, other_admin_url, [], "select membank.configure_retention(events => interval '9 days')",
          ["select membank.configure_retention(events => interval '8 days')"])
    _held(admin_url, other_admin_url, [f"select membank.create_profile_schema('p', {schema})"],
          f"select membank.update_profile_schema('p', {schema})",
          [f"select membank.update_profile_schema('p', {schema})", "select membank.delete_profile_schema('p')"])
    bind = f"select membank.bind_role_to_scope('{tenant}', '{{\"user_id\": \"ux\"}}')"
    unbind = f"select membank.unbind_role_from_scope('{tenant}', '{{\"user_id\": \"ux\"}}')"
    _held(admin_url, other_admin_url, [bind], unbind, [bind, unbind, f"select membank.unrestrict_role('{tenant}')"])


# -- ADK app: state -------------------------------------------------------------------------------------------

def _event(event_id, delta):
    return Jsonb({"id": event_id, "author": "user", "timestamp": 1700000000, "actions": {"state_delta": delta}})


def test_an_open_app_state_change_blocks_no_other_user(login, admin):
    _, url1 = login("membank_writer")
    _, url2 = login("membank_writer")
    with connect_as(url1) as u1, connect_as(url2) as u2:
        u1.execute("select membank.create_session(app_name => 'shop', user_id => 'u1', session_id => 's',"
                   " state => '{\"app:banner\": \"spring\"}')")
        u2.execute("set membank.lock_timeout = '200ms'")
        u1.execute("begin")
        u1.execute("select membank.append_session_event(app_name => 'shop', user_id => 'u1', session_id => 's',"
                   " event => %s)", (_event("e1", {"app:banner": "summer", "app:from_u1": 1}),))
        # u1 holds its app: change open; u2's session calls with app: state go through.
        u2.execute("select membank.create_session(app_name => 'shop', user_id => 'u2', session_id => 's',"
                   " state => '{\"app:banner\": \"winter\", \"app:from_u2\": 2}')")
        for i in range(3):
            u2.execute("select membank.append_session_event(app_name => 'shop', user_id => 'u2', session_id => 's',"
                       " event => %s)", (_event(f"e{i}", {"app:banner": f"autumn {i}", "app:count": i}),))
        state = u2.execute("select membank.get_session(app_name => 'shop', user_id => 'u2', session_id => 's')"
                           " -> 'state' as s").fetchone()["s"]
        assert state == {"app:banner": "autumn 2", "app:count": 2, "app:from_u2": 2}
        u1.execute("commit")
        state = u2.execute("select membank.get_session(app_name => 'shop', user_id => 'u2', session_id => 's')"
                           " -> 'state' as s").fetchone()["s"]
        # Both users' keys merged; of the two writes of app:banner, the one begun later wins.
        assert state == {"app:banner": "autumn 2", "app:count": 2, "app:from_u1": 1, "app:from_u2": 2}
    # Superseded entries are cleaned up by later writers: one entry per key is left.
    assert admin.execute("select membank.erase_scope(scope => '{\"app_name\": \"shop\", \"user_id\": \"u1\"}',"
                         " force => true) -> 'kept' as k").fetchone()["k"] == {"app_state_keys": 1}
    with connect_as(url2) as u2:
        # Erasing u1 leaves the app's keys (every user reads them), unlinked from u1's scope.
        assert u2.execute("select membank.get_session(app_name => 'shop', user_id => 'u2', session_id => 's')"
                          " -> 'state' ->> 'app:from_u1' as v").fetchone()["v"] == "1"


def test_the_worker_retries_while_an_admin_holds_the_embedding_configuration(superuser, login, embedder):
    import threading

    from membank.worker import EmbeddingWorker

    _, writer_url = login("membank_writer")
    worker_role, worker_url = login("membank_worker")
    _, admin_url = login("membank_admin")
    with connect_as(writer_url) as w:
        w.execute("select membank.create_memory(scope => '{\"user_id\": \"w\"}', fact => 'The user rows boats.')")
    worker = EmbeddingWorker(worker_url + "&options=-c%20membank.lock_timeout%3D100ms", embedder)
    stop, failed = threading.Event(), []

    def run():
        try:
            worker.run(poll_interval=0.2, stop=stop, max_backoff=0.5)
        except Exception as err:  # the thread's outcome, checked below
            failed.append(err)

    with connect_as(admin_url) as admin:
        admin.execute("begin")
        admin.execute("select membank.configure_embedding(model_id => %s, dimension => %s)",
                      (embedder.model_id, embedder.dimension))
        thread = threading.Thread(target=run)
        thread.start()
        try:
            # Until the worker has waited on the held row at least once (it then fails with MB040 and retries).
            waited = False
            for _ in range(600):
                waited = superuser.execute("select count(*) as n from pg_stat_activity where usename = %s"
                                           " and wait_event_type = 'Lock'", (worker_role,)).fetchone()["n"] > 0
                if failed or waited:
                    break
                stop.wait(0.05)
            assert waited
        finally:
            admin.execute("commit")
    try:
        with connect_as(writer_url) as w:
            for _ in range(1200):
                if failed or w.execute("select pending from membank.embedding_backlog()").fetchone()["pending"] == 0:
                    break
                stop.wait(0.05)
            assert failed == []
            assert w.execute("select pending from membank.embedding_backlog()").fetchone()["pending"] == 0
    finally:
        stop.set()
        thread.join(30)
        worker.close()
