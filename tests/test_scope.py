"""Exact-scope isolation: a memory is visible only to its own scope."""

import uuid

import psycopg
import pytest

from membank import InvalidArgumentError, NotFoundError


def names(page):
    return {m.name for m in page.memories}


def test_scope_is_exact(bank):
    mine = bank.create_memory({"user_id": "u1"}, "User likes green tea")
    assert names(bank.list_memories({"user_id": "u1"})) == {mine.name}
    assert names(bank.list_memories({"user_id": "u2"})) == set()
    assert names(bank.list_memories({"user_id": "u1", "app": "x"})) == set()
    with pytest.raises(InvalidArgumentError, match="scope: must not be empty"):
        bank.list_memories({})
    with pytest.raises(NotFoundError):
        bank.get_memory(mine.name, scope={"user_id": "u2"})
    with pytest.raises(NotFoundError):
        bank.get_memory(mine.name, scope={"user_id": "u1", "app": "x"})
    assert bank.get_memory(mine.name, scope={"user_id": "u1"}).fact == "User likes green tea"


def test_scope_superset_memory_is_invisible_to_subset(bank):
    bank.create_memory({"user_id": "u1", "app": "x"}, "Project x uses Postgres")
    assert names(bank.list_memories({"user_id": "u1"})) == set()


def test_key_order_does_not_matter(bank):
    m = bank.create_memory({"a": "1", "b": "2"}, "fact")
    assert names(bank.list_memories({"b": "2", "a": "1"})) == {m.name}
    assert bank.get_memory(m.name, scope={"b": "2", "a": "1"}).name == m.name


def test_key_order_does_not_matter_in_sql(conn):
    conn.execute("""select membank.create_memory(scope => '{"a":"1","b":"2"}', fact => 'f')""")
    row = conn.execute("""select count(*) as n from membank.list_memories(scope => '{"b":"2","a":"1"}')""").fetchone()
    assert row["n"] == 1


def test_several_exact_scopes_in_one_list(bank):
    user = bank.create_memory({"user_id": "u1"}, "global")
    project = bank.create_memory({"user_id": "u1", "project_id": "p"}, "project")
    bank.create_memory({"user_id": "u1", "project_id": "q"}, "other project")
    page = bank.list_memories([{"user_id": "u1"}, {"user_id": "u1", "project_id": "p"}])
    assert names(page) == {user.name, project.name}


@pytest.mark.parametrize("value", ["o'brien", "100%", "acct-probe", "a\\b", "Анна", "太郎", 'say "hi"', "x--y"])
def test_special_scope_values_round_trip(bank, value):
    m = bank.create_memory({"user_id": value}, f"fact of {value}")
    assert bank.get_memory(m.name).scope == {"user_id": value}
    assert names(bank.list_memories({"user_id": value})) == {m.name}
    # Near misses of the same value never match.
    for other in {value + " ", value.upper() if value.upper() != value else value + "x", value[:-1] or "z"}:
        assert names(bank.list_memories({"user_id": other})) == set()


def test_special_scope_values_match_from_sql(conn):
    conn.execute("select membank.create_memory(scope => jsonb_build_object('user_id', %s::text), fact => 'x')",
                 ("o'brien",))
    n = conn.execute("select count(*) as n from membank.list_memories(scope => %s::jsonb)",
                     ('{"user_id":"o\'brien"}',)).fetchone()["n"]
    assert n == 1


def test_names_chain_as_uuids_in_sql(conn):
    """create_memory and generate_memories return uuid names; every function taking a name accepts them."""
    name = conn.execute("select (membank.create_memory(scope => '{\"u\":\"1\"}', fact => 'f')).name").fetchone()["name"]
    assert isinstance(name, uuid.UUID)  # psycopg passes it back typed uuid, as other drivers do
    calls = {
        "select (membank.get_memory(name => %s)).fact as v": "f",
        "select (membank.update_memory(name => %s, fact => 'g')).revision as v": 2,
        "select count(*) as v from membank.list_revisions(name => %s)": 2,
        "select (membank.get_revision(name => %s, revision => 1)).fact as v": "f",
        "select (membank.rollback_memory(name => %s, revision => 1)).fact as v": "f",
        "select (membank.delete_memory(name => %s)).fact as v": "f",
    }
    for statement, expected in calls.items():
        assert conn.execute(statement, (name,)).fetchone()["v"] == expected, statement
    operation = conn.execute("""select membank.generate_memories(scope => '{"u":"1"}', facts => '["x y"]',
        disable_consolidation => true) as name""").fetchone()["name"]
    assert conn.execute("select (membank.get_operation(%s)).done", (operation,)).fetchone() == {"done": True}
    with pytest.raises(psycopg.errors.InvalidTextRepresentation, match="name: \"nope\" is not a memory name"):
        conn.execute("select membank.get_memory(name => 'nope')")  # a literal still takes the text version


SCOPE_ID_CASES = [
    {"user_id": "u1"},
    {"user_id": "u1", "app_name": "shop"},
    {"b": "1", "a": "2", "aa": "3", "ä": "4", "z": "5"},
    {"quote\"key": "back\\slash", "tab": "a\tb\nc\r\x01\x1f\x7f"},
    {"emoji": "🦜 café ñ", "日本": "語"},
    {"k" * 128: "v" * 1024},
]


@pytest.mark.parametrize("scope", SCOPE_ID_CASES)
def test_client_scope_id_matches_the_database(conn, scope):
    from psycopg.types.json import Jsonb

    from membank.scopes import scope_id, scope_text

    row = conn.execute("select %(s)s::jsonb::text as t, md5(%(s)s::jsonb::text)::uuid::text as id",
                       {"s": Jsonb(scope)}).fetchone()
    assert scope_text(scope) == row["t"]
    assert scope_id(scope) == row["id"]


def test_a_scope_id_that_is_not_the_scopes_is_refused(conn):
    """scope_id is a plain column (the Citus distribution column); a check ties it to the scope."""
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("insert into membank_private.memories (scope_id, scope, fact)"
                     " values (md5('{\"u\": \"2\"}'::jsonb::text)::uuid, '{\"u\": \"1\"}', 'misplaced')")
