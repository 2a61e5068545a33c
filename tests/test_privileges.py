"""Roles: PUBLIC gets nothing; reader, writer and admin get EXECUTE on the API only."""

import psycopg
import pytest

CREATE = "select (membank.create_memory(scope => '{\"u\":\"1\"}', fact => 'f')).name::text as name"
LIST = "select count(*) from membank.list_memories(scope => '{\"u\":\"1\"}')"
PURGE = "select membank.purge_memories(scope => '{\"u\":\"1\"}', force => true)"
TABLE = "select count(*) from membank_private.memories"


def run_as(conn, role, statement):
    conn.execute(f"set role {role}")  # role names are constants of this test
    try:
        return conn.execute(statement).fetchone()
    finally:
        conn.execute("reset role")


def denied(conn, role, statement):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        run_as(conn, role, statement)


@pytest.fixture
def nobody(conn):
    conn.execute("drop role if exists membank_test_nobody")
    conn.execute("create role membank_test_nobody")
    yield "membank_test_nobody"
    conn.execute("drop role membank_test_nobody")


def test_reader(conn):
    conn.execute(CREATE)
    assert run_as(conn, "membank_reader", LIST)["count"] == 1
    denied(conn, "membank_reader", CREATE)
    denied(conn, "membank_reader", TABLE)


def test_writer(conn):
    assert run_as(conn, "membank_writer", CREATE)["name"]
    assert run_as(conn, "membank_writer", LIST)["count"] == 1
    denied(conn, "membank_writer", PURGE)
    denied(conn, "membank_writer", "update membank_private.memories set fact = 'x'")


def test_admin(conn):
    conn.execute(CREATE)
    assert run_as(conn, "membank_admin", PURGE)["purge_memories"] == 1
    conn.execute("set role membank_admin")
    try:
        conn.execute("call membank.purge_expired_memories()")
    finally:
        conn.execute("reset role")
    denied(conn, "membank_admin", TABLE)


def test_public_gets_nothing(conn, nobody):
    denied(conn, nobody, LIST)
    denied(conn, nobody, TABLE)
    denied(conn, nobody, "select membank_private.validate_scope('{\"u\":\"1\"}')")


GENERATE = "select membank.generate_memories(scope => '{\"u\":\"1\"}', facts => '[\"the user likes tea\"]')::text as name"


def test_generation_roles(conn, nobody):
    name = run_as(conn, "membank_writer", GENERATE)["name"]
    denied(conn, "membank_writer", "select count(*) from membank.claim_generation_jobs()")
    assert run_as(conn, "membank_worker", "select count(*) from membank.claim_generation_jobs()")["count"] == 1
    assert run_as(conn, "membank_reader", f"select done from membank.get_operation(name => '{name}')")["done"] is False
    assert run_as(conn, "membank_reader", "select pending_operations from membank.generation_backlog()"
                  )["pending_operations"] == 1
    denied(conn, "membank_reader", GENERATE)
    denied(conn, "membank_reader", "select * from membank.claim_generation_jobs()")
    denied(conn, nobody, f"select * from membank.get_operation(name => '{name}')")
    denied(conn, "membank_writer", "select count(*) from membank_private.operations")
