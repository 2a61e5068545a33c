"""Scoped views for plain-SQL readers, and tenant roles bound to scopes, tested with real login roles."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from conftest import url_for

U1 = {"user_id": "u1"}
U2 = {"user_id": "u2"}


@pytest.fixture
def admin(login):
    """An unrestricted admin login (binding management), as an operator would run it."""
    _, url = login("membank_admin")
    c = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    yield c
    c.close()


@pytest.fixture
def seeded(superuser):
    """Two scopes, each with a fact, a profile field (and revisions of both); the field is planted as the superuser."""
    conn = superuser
    conn.execute("select membank.create_profile_schema('p', '{\"properties\": {\"city\": {\"type\": \"string\"}}}')")
    names = {}
    for scope, city in ((U1, "Lisbon"), (U2, "Oslo")):
        m = conn.execute("select (membank.create_memory(scope => %s, fact => %s)).name", (Jsonb(scope),
                         f"{scope['user_id']} lives in {city}")).fetchone()["name"]
        conn.execute("select membank.update_memory(name => %s, fact => %s)", (str(m), f"{scope['user_id']} moved to {city}"))
        conn.execute("""insert into membank_private.memories (scope_id, scope, memory_type, structured_content)
                        values (md5(%s::jsonb::text)::uuid, %s, 'STRUCTURED_PROFILE', %s)""",
                     (Jsonb(scope), Jsonb(scope), Jsonb({"schema_id": "p", "field": "city", "value": city})))
        names[scope["user_id"]] = str(m)
    return names


@pytest.fixture
def tenant(login, admin, seeded):
    """A real login role, bound to U1 by an admin login, with membank_writer (so it can try everything)."""
    role, url = login("membank_writer")
    assert admin.execute("select membank.bind_role_to_scope(%s, %s) as b", (role, Jsonb(U1))).fetchone()["b"]
    c = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    yield c
    c.close()


@pytest.mark.role("membank_reader")
def test_views_show_exactly_the_set_scope_and_nothing_when_unset(conn, seeded):
    assert conn.execute("select count(*) from membank.scoped_memories").fetchone()["count"] == 0
    assert conn.execute("select count(*) from membank.scoped_revisions").fetchone()["count"] == 0
    with conn.transaction():
        conn.execute("select membank.set_scope(%s, is_local => true)", (Jsonb(U1),))
        assert [r["fact"] for r in conn.execute(
            "select fact from membank.scoped_memories where memory_type = 'NATURAL_LANGUAGE'")] == ["u1 moved to Lisbon"]
        assert [(r["schema_id"], r["field"], r["value"]) for r in conn.execute(
            "select * from membank.scoped_profiles")] == [("p", "city", "Lisbon")]
        assert {r["fact"] for r in conn.execute("select fact from membank.scoped_revisions")} == {
            "u1 lives in Lisbon", "u1 moved to Lisbon", None}
    # Transaction-local: gone after commit.
    assert conn.execute("select count(*) from membank.scoped_memories").fetchone()["count"] == 0
    conn.execute("select membank.set_scope(%s)", (Jsonb(U2),))
    assert {r["scope"]["user_id"] for r in conn.execute("select scope from membank.scoped_memories")} == {"u2"}
    conn.execute("select membank.set_scope(null)")
    assert conn.execute("select count(*) from membank.scoped_memories").fetchone()["count"] == 0


def test_a_bound_role_sees_no_row_of_another_scope_whatever_it_sets(tenant, seeded):
    c = tenant
    c.execute("select membank.set_scope(%s)", (Jsonb(U1),))
    assert {r["scope"]["user_id"] for r in c.execute("select scope from membank.scoped_memories")} == {"u1"}
    assert [r["value"] for r in c.execute("select value from membank.scoped_profiles")] == ["Lisbon"]
    assert c.execute("select membank.retrieve_profiles(%s) as p", (Jsonb(U1),)).fetchone()["p"] == {
        "p": {"city": "Lisbon"}}
    # Another scope through set_scope: refused; through the setting itself: the views show nothing.
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="bound to other scopes"):
        c.execute("select membank.set_scope(%s)", (Jsonb(U2),))
    c.execute("select set_config('membank.scope', %s, false)", ('{"user_id": "u2"}',))
    for view in ("scoped_memories", "scoped_profiles", "scoped_revisions"):
        assert c.execute(f"select count(*) from membank.{view}").fetchone()["count"] == 0, view
    assert c.execute("select membank.current_scope() as s").fetchone()["s"] is None
    # The API: every function that takes a scope refuses u2; those that take a name do not find u2's.
    for sql, args in [
        ("select * from membank.list_memories(scope => %s)", (Jsonb(U2),)),
        ("select * from membank.list_memories(scope => %s)", (Jsonb([U1, U2]),)),
        ("select * from membank.retrieve_memories(scope => %s, query_text => 'Oslo')", (Jsonb(U2),)),
        ("select membank.retrieve_profiles(%s)", (Jsonb(U2),)),
        ("select * from membank.list_operations(scope => %s)", (Jsonb(U2),)),
        ("select * from membank.list_events(scope => %s, session_id => 's')", (Jsonb(U2),)),
        ("select membank.create_memory(scope => %s, fact => 'x')", (Jsonb(U2),)),
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute(sql, args)
    for sql in ("select membank.get_memory(name => %s)", "select * from membank.list_revisions(name => %s)",
                "select membank.get_revision(name => %s, revision => 1)",
                "select membank.update_memory(name => %s, fact => 'hacked')",
                "select membank.delete_memory(name => %s)"):
        with pytest.raises(psycopg.errors.NoDataFound):
            c.execute(sql, (seeded["u2"],))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("select * from membank.claim_generation_jobs(1)")
    # Its own scope works through the API.
    assert c.execute("select (membank.get_memory(name => %s)).fact", (seeded["u1"],)).fetchone()["fact"] == \
        "u1 moved to Lisbon"
    assert [r["fact"] for r in c.execute("select fact from membank.list_memories(scope => %s)", (Jsonb(U1),))] == [
        "u1 moved to Lisbon"]


def test_a_member_of_a_bound_group_role_is_bound_too(postgresql, conn, admin, seeded):
    group, login = f"grp_{uuid.uuid4().hex[:8]}", f"lg_{uuid.uuid4().hex[:8]}"
    conn.execute(f'create role "{group}"')
    conn.execute(f'create role "{login}" login in role "{group}"')
    conn.execute(f'grant membank_reader to "{group}"')
    admin.execute("select membank.bind_role_to_scope(%s, %s)", (group, Jsonb(U2)))
    info = postgresql.info
    with psycopg.connect(url_for(info.host, info.port, login, info.dbname), autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("select * from membank.list_memories(scope => %s)", (Jsonb(U1),))
        assert c.execute("select count(*) from membank.list_memories(scope => %s)", (Jsonb(U2),)).fetchone()[0] == 1
    for role in (login, group):
        conn.execute(f'drop owned by "{role}"')
        conn.execute(f'drop role "{role}"')


@pytest.mark.role("membank_admin")
def test_binding_arguments_are_checked(conn):
    with pytest.raises(psycopg.errors.UndefinedObject):
        conn.execute("select membank.bind_role_to_scope('no_such_role_x', %s)", (Jsonb(U1),))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="^role"):
        conn.execute("select membank.bind_role_to_scope('membank_writer', %s)", (Jsonb(U1),))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="^scope"):
        conn.execute("select membank.set_scope('[]')")


def test_a_role_bound_to_one_user_cannot_reach_another_users_adk_sessions(postgresql, conn, admin):
    mine, theirs = {"app_name": "a", "user_id": "u1"}, {"app_name": "a", "user_id": "u2"}
    for scope in (mine, theirs):
        admin.execute("select membank.create_session(app_name => 'a', user_id => %s, session_id => 's',"
                     " state => %s)", (scope["user_id"], Jsonb({"user:city": scope["user_id"] + "-city"})))
    role = f"tenant_{uuid.uuid4().hex[:8]}"
    conn.execute(f'create role "{role}" login')
    conn.execute(f'grant membank_writer to "{role}"')
    admin.execute("select membank.bind_role_to_scope(%s, %s)", (role, Jsonb(mine)))
    info = postgresql.info
    try:
        with psycopg.connect(url_for(info.host, info.port, role, info.dbname), autocommit=True,
                             row_factory=dict_row) as c:
            for sql in ("select membank.get_session(app_name => 'a', user_id => 'u2', session_id => 's')",
                        "select * from membank.list_sessions(app_name => 'a', user_id => 'u2')",
                        "select membank.get_user_state(app_name => 'a', user_id => 'u2')",
                        "select membank.create_session(app_name => 'a', user_id => 'u2', session_id => 'x')",
                        "select membank.delete_session(app_name => 'a', user_id => 'u2', session_id => 's')"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute(sql)
            # Listing every user of the app shows only the bound user's session.
            listed = [r["list_sessions"] for r in c.execute("select * from membank.list_sessions(app_name => 'a')")]
            assert [s["user_id"] for s in listed] == ["u1"]
            own = c.execute("select membank.get_session(app_name => 'a', user_id => 'u1', session_id => 's') as s")
            assert own.fetchone()["s"]["user_id"] == "u1"
    finally:
        conn.execute(f'drop owned by "{role}"')
        conn.execute(f'drop role "{role}"')
