"""Bad input: a SQLSTATE, a message naming the argument, a hint; nothing written."""

import uuid

import psycopg
import pytest

from conftest import count_rows
from membank import InvalidArgumentError, MembankError, NotFoundError

U1 = {"user_id": "u1"}
BIG_FACT = "x" * (2 * 1024 * 1024)

# (case, SQL call, params, client call, SQLSTATE, argument named in the message)
CASES = [
    ("empty scope", "select membank.create_memory(scope => %s::jsonb, fact => 'f')", ["{}"],
     lambda b: b.create_memory({}, "f"), "22023", "scope"),
    ("non-string scope value", "select membank.create_memory(scope => %s::jsonb, fact => 'f')", ['{"user_id": 1}'],
     lambda b: b.create_memory({"user_id": 1}, "f"), "22023", "scope"),
    ("nested scope object", "select membank.create_memory(scope => %s::jsonb, fact => 'f')",
     ['{"user": {"id": "u1"}}'], lambda b: b.create_memory({"user": {"id": "u1"}}, "f"), "22023", "scope"),
    ("scope not an object", "select membank.create_memory(scope => %s::jsonb, fact => 'f')", ['["u1"]'],
     lambda b: b.create_memory(["u1"], "f"), "22023", "scope"),
    ("2 MB fact", "select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => %s)", [BIG_FACT],
     lambda b: b.create_memory(U1, BIG_FACT), "22023", "fact"),
    ("blank fact", "select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => %s)", ["  \n "],
     lambda b: b.create_memory(U1, "  \n "), "22023", "fact"),
    ("page_size 0", "select * from membank.list_memories(scope => '{\"user_id\":\"u1\"}', page_size => %s)", [0],
     lambda b: b.list_memories(U1, page_size=0), "22023", "page_size"),
    ("page_size negative", "select * from membank.list_memories(scope => '{\"user_id\":\"u1\"}', page_size => %s)",
     [-5], lambda b: b.list_memories(U1, page_size=-5), "22023", "page_size"),
    ("malformed uuid", "select membank.get_memory(name => %s)", ["not-a-uuid"],
     lambda b: b.get_memory("not-a-uuid"), "22P02", "name"),
    ("malformed uuid on update", "select membank.update_memory(name => %s, fact => 'x')", ["1234"],
     lambda b: b.update_memory("1234", fact="x"), "22P02", "name"),
    ("unknown memory name", "select membank.delete_memory(name => %s)", [str(uuid.UUID(int=7))],
     lambda b: b.delete_memory(uuid.UUID(int=7)), "P0002", "name"),
    ("filter not an object",
     "select * from membank.list_memories(scope => '{\"user_id\":\"u1\"}', metadata_filter => %s::jsonb)",
     ['["source"]'], lambda b: b.list_memories(U1, metadata_filter=["source"]), "22023", "metadata_filter"),
    ("purge filter not an object",
     "select membank.purge_memories(scope => '{\"user_id\":\"u1\"}', metadata_filter => %s::jsonb, force => true)",
     ['"chat"'], lambda b: b.purge_memories(U1, metadata_filter="chat", force=True), "22023", "metadata_filter"),
    ("metadata not an object", "select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => 'f', "
     "metadata => %s::jsonb)", ["[1]"], lambda b: b.create_memory(U1, "f", metadata=[1]), "22023", "metadata"),
    ("unknown memory type", "select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => 'f', "
     "memory_type => %s)", ["EPISODE"], lambda b: b.create_memory(U1, "f", memory_type="EPISODE"), "22023",
     "memory_type"),
]

CLASS_FOR = {"22023": InvalidArgumentError, "22P02": InvalidArgumentError, "P0002": NotFoundError}


@pytest.fixture
def seeded(bank, conn):
    bank.create_memory(U1, "existing fact")
    return count_rows(conn)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_sql_error_names_argument_and_writes_nothing(conn, seeded, case):
    _, statement, params, _, sqlstate, argument = case
    with pytest.raises(psycopg.Error) as err:
        conn.execute(statement, params)
    diag = err.value.diag
    assert err.value.sqlstate == sqlstate
    assert diag.message_primary.startswith(f"{argument}: ")
    assert diag.message_hint
    assert count_rows(conn) == seeded


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_client_maps_error_with_same_message(bank, conn, seeded, case):
    _, statement, params, call, sqlstate, argument = case
    with pytest.raises(psycopg.Error) as sql_err:
        conn.execute(statement, params)
    with pytest.raises(CLASS_FOR[sqlstate]) as client_err:
        call(bank)
    assert client_err.value.message == sql_err.value.diag.message_primary
    assert (client_err.value.sqlstate, client_err.value.argument) == (sqlstate, argument)
    assert client_err.value.hint == sql_err.value.diag.message_hint
    assert count_rows(conn) == seeded


@pytest.mark.parametrize("call, argument", [
    (lambda b: b.create_memory(U1, "peanut\x00allergy"), "fact"),
    (lambda b: b.create_memory({"user_id": "u\x001"}, "fact"), "scope"),
    (lambda b: b.list_memories({"user_id": "u\x001"}), "scope"),
])
def test_nul_is_rejected_by_client_naming_argument(bank, conn, seeded, call, argument):
    with pytest.raises(InvalidArgumentError) as err:
        call(bank)
    assert err.value.message == f"{argument}: must not contain NUL characters"
    assert err.value.hint and err.value.sqlstate == "22023"
    assert count_rows(conn) == seeded


@pytest.mark.parametrize("statement, sqlstate", [
    # PostgreSQL itself refuses U+0000 in jsonb and text before membank runs.
    ("select membank.create_memory(scope => '{\"user_id\":\"u\\u0000\"}', fact => 'f')", "22P05"),
    ("select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => 'a' || chr(0))", "54000"),
])
def test_nul_is_rejected_by_sql_and_writes_nothing(conn, seeded, statement, sqlstate):
    with pytest.raises(psycopg.Error) as err:
        conn.execute(statement)
    assert err.value.sqlstate == sqlstate
    assert count_rows(conn) == seeded


def test_every_client_error_is_a_membank_error(bank):
    with pytest.raises(MembankError):
        bank.get_memory(uuid.uuid4())
