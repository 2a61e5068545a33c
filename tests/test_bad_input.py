"""Bad input: a SQLSTATE, a message naming the argument, a hint; nothing written."""

import json
import uuid
from datetime import datetime, timedelta

import psycopg
import pytest
from psycopg.rows import dict_row
from pytest_postgresql.janitor import DatabaseJanitor

from conftest import connect_as, count_all_rows, url_for
from membank import ConflictError, InvalidArgumentError, MembankError, MemoryBank, NotFoundError

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

U = '{"user_id":"u1"}'
EV = '[{{"event_id": "{id}", "author": "user", "text": "{text}", "timestamp": "2023-05-24T10:00:00Z"}}]'
BLANKS = ["\u00a0", "\u3000", "\u2007", "\u200b", "\ufeff", "\v", "\f", " \u3000\u200b\n"]
MILLION_IDS = [f"e{i}" for i in range(1001)]
ZERO = [0.0] * 384
NAN = [float("nan")] + [0.1] * 383

CASES += [
    # The bound of retrieve_memories' query: decompose_query's rules split is linear in it (3.8 MB: 4.4 s of CPU).
    ("4001-character query to decompose", "select membank.decompose_query(query_text => %s)", ["x" * 4001],
     lambda b: b.decompose_query("x" * 4001), "22023", "query_text"),
    # Values SQL would store but a client cannot read back.
    ("ttl past year 9999", f"select membank.create_memory(scope => '{U}', fact => 'x', ttl => %s::interval)",
     ["3000000 days"], lambda b: b.create_memory(U1, "x", ttl=timedelta(days=3_000_000)), "22023", "ttl"),
    ("ttl overflowing", f"select membank.create_memory(scope => '{U}', fact => 'x', ttl => %s::interval)",
     ["1000000000 days"], lambda b: b.create_memory(U1, "x", ttl="1000000000 days"), "22023", "ttl"),
    ("expire_time past year 9999",
     f"select membank.create_memory(scope => '{U}', fact => 'x', expire_time => %s::timestamptz)",
     ["12000-01-01T00:00:00Z"], None, "22023", "expire_time"),
    ("expire_time -infinity",
     f"select membank.create_memory(scope => '{U}', fact => 'x', expire_time => %s::timestamptz)",
     ["-infinity"], lambda b: b.create_memory(U1, "x", expire_time="-infinity"), "22023", "expire_time"),
    ("update ttl past year 9999", "select membank.update_memory(name => %s, ttl => '3000000 days')", ["{existing}"],
     lambda b, n: b.update_memory(n, ttl=timedelta(days=3_000_000)), "22023", "ttl"),
    ("generate ttl past year 9999",
     f"select membank.generate_memories(scope => '{U}', facts => '[\"f\"]', ttl => %s::interval)",
     ["3000000 days"], lambda b: b.generate_memories(U1, facts=["f"], ttl=timedelta(days=3_000_000)), "22023", "ttl"),
    ("event time past year 9999 in UTC",
     f"select membank.append_events(scope => '{U}', session_id => 's', events => %s::jsonb)",
     ['[{"event_id": "e", "author": "u", "text": "t", "timestamp": "9999-12-31T23:00:00-05:00"}]'],
     lambda b: b.append_events(U1, "s", [{"event_id": "e", "author": "u", "text": "t",
                                          "timestamp": "9999-12-31T23:00:00-05:00"}]), "22023", "events[0].timestamp"),
    ("metadata nested 200 deep",
     f"select membank.create_memory(scope => '{U}', fact => 'x', metadata => %s::jsonb)",
     ['{"a": ' + "[" * 200 + "]" * 200 + "}"], None, "22023", "metadata"),
    # Degenerate vectors.
    ("zero query vector",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', query_embedding => %s::real[])",
     [ZERO], None, "22023", "query_embedding"),
    ("NaN query vector",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', query_embedding => %s::real[])",
     [NAN], None, "22023", "query_embedding"),
    ("infinite query vector",
     f"select * from membank.retrieve_memories(scope => '{U}', query_embedding => %s::real[])",
     [[float("inf")] + [0.1] * 383], None, "22023", "query_embedding"),
    ("query vector with a null entry",
     f"select * from membank.retrieve_memories(scope => '{U}', query_embedding => %s::real[])",
     [[None] + [0.1] * 383], None, "22023", "query_embedding"),
    ("empty query vector",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', query_embedding => %s::real[])",
     [[]], None, "22023", "query_embedding"),
    # Blank in every script.
    *[(f"blank fact {ascii(t)}", f"select membank.create_memory(scope => '{U}', fact => %s)", [t],
       (lambda t: lambda b: b.create_memory(U1, t))(t), "22023", "fact") for t in BLANKS],
    *[(f"blank direct fact {ascii(t)}", f"select membank.generate_memories(scope => '{U}', facts => %s::jsonb)",
       [f'["{t}"]'], (lambda t: lambda b: b.generate_memories(U1, facts=[t]))(t), "22023", "facts[0]")
      for t in BLANKS[:3]],
    # Fuzzing.
    ("generate with duplicate inline event ids",
     f"select membank.generate_memories(scope => '{U}', events => %s::jsonb)",
     ['[' + EV.format(id="e1", text="I like tea")[1:-1] + ', ' + EV.format(id="e1", text="I like coffee")[1:-1] + ']'],
     lambda b: b.generate_memories(U1, events=[
         {"event_id": "e1", "author": "user", "text": "I like tea", "timestamp": "2023-05-24T10:00:00Z"},
         {"event_id": "e1", "author": "user", "text": "I like coffee", "timestamp": "2023-05-24T10:00:00Z"}]),
     "22023", "events"),
    ("rrf_k too large",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', rrf_k => %s)", [2147483647],
     lambda b: b.retrieve_memories(U1, "x", rrf_k=2147483647, use_embedding=False), "22023", "rrf_k"),
    ("null revision", "select membank.get_revision(name => %s, revision => null)", ["{existing}"],
     lambda b, n: b.get_revision(n, None), "22023", "revision"),
    ("null revision on rollback", "select membank.rollback_memory(name => %s, revision => null)", ["{existing}"],
     lambda b, n: b.rollback_memory(n, None), "22023", "revision"),
    ("unknown memory_type filter", f"select * from membank.list_memories(scope => '{U}', memory_type => %s)",
     ["BOGUS"], lambda b: b.list_memories(U1, memory_type="BOGUS"), "22023", "memory_type"),
    ("unknown memory_type in retrieve",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', memory_type => %s)", ["BOGUS"],
     lambda b: b.retrieve_memories(U1, "x", memory_type="BOGUS", use_embedding=False), "22023", "memory_type"),
    ("1001 source_event_ids",
     f"select membank.create_memory(scope => '{U}', fact => 'x', source_event_ids => %s)", [MILLION_IDS],
     lambda b: b.create_memory(U1, "x", source_event_ids=MILLION_IDS), "22023", "source_event_ids"),
    ("1001 source_event_ids on update",
     "select membank.update_memory(name => %s, fact => 'y', source_event_ids => %s)", ["{existing}", MILLION_IDS],
     lambda b, n: b.update_memory(n, fact="y", source_event_ids=MILLION_IDS), "22023", "source_event_ids"),
    ("query_text over 4000 characters",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => %s)", ["peanut " * 1000],
     lambda b: b.retrieve_memories(U1, "peanut " * 1000), "22023", "query_text"),
    ("top_k 0 without a query", f"select * from membank.retrieve_memories(scope => '{U}', top_k => %s)", [0],
     lambda b: b.retrieve_memories(U1, top_k=0), "22023", "top_k"),
    # Inputs that must be refused too.
    ("empty direct facts", f"select membank.generate_memories(scope => '{U}', facts => %s::jsonb)", ["[]"],
     lambda b: b.generate_memories(U1, facts=[]), "22023", "facts"),
    ("empty direct facts with a profile schema",
     f"select membank.generate_memories(scope => '{U}', facts => %s::jsonb, profile_schemas => '[\"diet\"]')",
     ["[]"], None, "22023", "facts"),
    ("numeric topic in direct facts", f"select membank.generate_memories(scope => '{U}', facts => %s::jsonb)",
     ['[{"fact": "The user likes tea", "topics": [1]}]'],
     lambda b: b.generate_memories(U1, facts=[{"fact": "The user likes tea", "topics": [1]}]), "22023",
     "facts[0].topics"),
    ("retrieve page_size 0 with a query",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', page_size => %s)", [0], None,
     "22023", "page_size"),
    ("retrieve garbage page_token with a query",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', page_token => %s)", ["garbage"],
     None, "22023", "page_token"),
    ("retrieve garbage page_token without a query",
     f"select * from membank.retrieve_memories(scope => '{U}', page_token => %s)", ["garbage"], None,
     "22023", "page_token"),
    ("vector_weight NaN",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', vector_weight => %s::float8)",
     ["NaN"], lambda b: b.retrieve_memories(U1, "x", vector_weight=float("nan"), use_embedding=False), "22023",
     "vector_weight"),
    ("text_weight Infinity",
     f"select * from membank.retrieve_memories(scope => '{U}', query_text => 'x', text_weight => %s::float8)",
     ["Infinity"], lambda b: b.retrieve_memories(U1, "x", text_weight=float("inf"), use_embedding=False), "22023",
     "text_weight"),
    ("empty structured profile",
     f"select membank.create_memory(scope => '{U}', memory_type => 'STRUCTURED_PROFILE',"
     " structured_content => %s::jsonb)", ["{}"],
     lambda b: b.create_memory(U1, memory_type="STRUCTURED_PROFILE", structured_content={}), "22023",
     "structured_content"),
    ("2-D topics", f"select membank.create_memory(scope => '{U}', fact => 'x', topics => %s::text[])",
     ["{{a,b},{c,d}}"], lambda b: b.create_memory(U1, "x", topics=[["a", "b"], ["c", "d"]]), "22023", "topics"),
    ("2-D topics filter", f"select * from membank.list_memories(scope => '{U}', topics => %s::text[])",
     ["{{a,b},{c,d}}"], None, "22023", "topics"),
    ("ADK app: state key with an empty name",
     "select membank.create_session(app_name => 'a', user_id => 'u', state => %s::jsonb)", ['{"app:": 1}'],
     lambda b: b.create_session("a", "u", state={"app:": 1}), "22023", "state"),
    ("ADK user: state delta key with an empty name",
     "select membank.append_session_event(app_name => 'a', user_id => 'u', session_id => 's0', event => %s::jsonb)",
     ['{"id": "e", "author": "user", "timestamp": 1, "actions": {"state_delta": {"user:": 1}}}'], None, "22023",
     "event.actions.state_delta"),
    ("ADK event actions not an object",
     "select membank.append_session_event(app_name => 'a', user_id => 'u', session_id => 's0', event => %s::jsonb)",
     ['{"id": "e", "author": "user", "timestamp": 1, "actions": "state_delta"}'], None, "22023", "event.actions"),
]

# Inputs the API took without a word (or refused unnamed): each named now.
IMAGE = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]
EV1 = {"event_id": "e1", "author": "user", "text": "I like tea", "timestamp": "2023-05-24T10:00:00Z"}
BIG_VALUE = "x" * 70_000  # a state key's value over size_limit('state_value') (65536 bytes)
CASES += [
    ("list_memories created_after > created_before",
     f"select * from membank.list_memories(scope => '{U}', created_after => %s::timestamptz,"
     " created_before => '2024-01-01T00:00:00Z')", ["2025-01-01T00:00:00Z"],
     lambda b: b.list_memories(U1, created_after="2025-01-01T00:00:00Z", created_before="2024-01-01T00:00:00Z"),
     "22023", "created_after"),
    ("list_memories updated_after > updated_before",
     f"select * from membank.list_memories(scope => '{U}', updated_after => %s::timestamptz,"
     " updated_before => '2024-01-01T00:00:00Z')", ["2025-01-01T00:00:00Z"], None, "22023", "updated_after"),
    ("append_events of []", f"select membank.append_events(scope => '{U}', session_id => 's', events => %s::jsonb)",
     ["[]"], lambda b: b.append_events(U1, "s", []), "22023", "events"),
    ("generate_memories from events []", f"select membank.generate_memories(scope => '{U}', events => %s::jsonb)",
     ["[]"], lambda b: b.generate_memories(U1, events=[]), "22023", "events"),
    ("generate_memories from events [] into a session",
     f"select membank.generate_memories(scope => '{U}', events => %s::jsonb, session_id => 's')", ["[]"],
     lambda b: b.generate_memories(U1, events=[], session_id="s"), "22023", "events"),
    ("unknown key in an appended event",
     f"select membank.append_events(scope => '{U}', session_id => 's', events => %s::jsonb)",
     ['[{"event_id": "e1", "author": "user", "txt": "I like tea", "timestamp": "2023-05-24T10:00:00Z"}]'],
     lambda b: b.append_events(U1, "s", [{"event_id": "e1", "author": "user", "txt": "I like tea",
                                          "timestamp": "2023-05-24T10:00:00Z"}]), "22023", "events[0]"),
    ("unknown key in an inline event",
     f"select membank.generate_memories(scope => '{U}', events => %s::jsonb)",
     ['[{"event_id": "e1", "author": "user", "text": "I like tea", "timestamp": "2023-05-24T10:00:00Z",'
      ' "role": "user"}]'],
     lambda b: b.generate_memories(U1, events=[{**EV1, "role": "user"}]), "22023", "events[0]"),
    ("unknown key in a fact object", f"select membank.generate_memories(scope => '{U}', facts => %s::jsonb)",
     ['[{"fact": "The user likes tea", "topic": ["USER_PREFERENCES"]}]'],
     lambda b: b.generate_memories(U1, facts=[{"fact": "The user likes tea", "topic": ["USER_PREFERENCES"]}]),
     "22023", "facts[0]"),
    ("add_messages whose only part is an image",
     f"select membank.add_messages(scope => '{U}', messages => %s::jsonb)", [json.dumps(IMAGE)],
     lambda b: b.add(IMAGE, scope=U1), "22023", "messages[0].content"),
    ("ADK session state key with an empty name",
     "select membank.create_session(app_name => 'a', user_id => 'u', state => %s::jsonb)", ['{"": 1}'],
     lambda b: b.create_session("a", "u", state={"": 1}), "22023", "state"),
    ("ADK session state delta key with an empty name",
     "select membank.append_session_event(app_name => 'a', user_id => 'u', session_id => 's0', event => %s::jsonb)",
     ['{"id": "e", "author": "user", "timestamp": 1, "actions": {"state_delta": {"": 1}}}'], None, "22023",
     "event.actions.state_delta"),
    ("retrieve_profiles of schema id \"\"",
     f"select membank.retrieve_profiles(scope => '{U}', schema_ids => %s::text[])", ['{""}'],
     lambda b: b.retrieve_profiles(U1, schema_ids=[""]), "22023", "schema_ids"),
    # Size limits (membank_private.size_limit).
    ("ADK state value over its limit",
     "select membank.create_session(app_name => 'a', user_id => 'u', state => %s::jsonb)",
     [json.dumps({"app:big": BIG_VALUE})], lambda b: b.create_session("a", "u", state={"app:big": BIG_VALUE}),
     "22023", "state"),
    ("ADK state delta value over its limit",
     "select membank.append_session_event(app_name => 'a', user_id => 'u', session_id => 's0', event => %s::jsonb)",
     [json.dumps({"id": "e", "author": "user", "timestamp": 1, "actions": {"state_delta": {"user:big": BIG_VALUE}}})],
     None, "22023", "event.actions.state_delta"),
    ("ADK event over its limit",
     "select membank.append_session_event(app_name => 'a', user_id => 'u', session_id => 's0', event => %s::jsonb)",
     [json.dumps({"id": "e", "author": "user", "timestamp": 1, "content": {"parts": [{"text": "x" * 1_100_000}]}})],
     None, "22023", "event"),
    ("labels over 64 KiB", f"select membank.create_memory(scope => '{U}', fact => 'x', labels => %s::jsonb)",
     [json.dumps({"l": BIG_VALUE})], lambda b: b.create_memory(U1, "x", labels={"l": BIG_VALUE}), "22023", "labels"),
    ("metadata over 64 KiB", f"select membank.create_memory(scope => '{U}', fact => 'x', metadata => %s::jsonb)",
     [json.dumps({"m": BIG_VALUE})], lambda b: b.create_memory(U1, "x", metadata={"m": BIG_VALUE}), "22023",
     "metadata"),
    ("event text over its limit",
     f"select membank.append_events(scope => '{U}', session_id => 's', events => %s::jsonb)",
     [json.dumps([{**EV1, "text": "x" * 200_001}])],
     lambda b: b.append_events(U1, "s", [{**EV1, "text": "x" * 200_001}]),
     "22023", "events[0].text"),
]

CLASS_FOR = {"22023": InvalidArgumentError, "22P02": InvalidArgumentError, "P0002": NotFoundError}


@pytest.fixture
def existing(bank):
    return bank.create_memory(U1, "existing fact")


def seed(conn) -> None:
    """What the refusals run against, beside the existing memory."""
    # A bank with one vector, so that query vectors are checked against its model.
    conn.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 384)")
    # A profile schema (facts feed profiles too) and an ADK session to append to.
    conn.execute("select membank.create_profile_schema(schema_id => 'diet',"
                 " memory_schema => '{\"properties\": {\"diet\": {\"type\": \"string\"}}}')")
    conn.execute("select membank.create_session(app_name => 'a', user_id => 'u', session_id => 's0')")


@pytest.fixture
def seeded(existing, conn):
    seed(conn)
    return count_all_rows(conn)


def bind(params, existing):
    return [str(existing.name) if p == "{existing}" else p for p in params]


def client_call(call, bank, existing):
    return call(bank, existing.name) if call.__code__.co_argcount == 2 else call(bank)


@pytest.fixture(scope="module")
def refusals_database(membank_proc):
    """One database for TestRefusalsOnOneDatabase (the superuser's autocommit connection, dict rows, UTC)."""
    name = f"membank_refusals_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(user=membank_proc.user, host=membank_proc.host, port=membank_proc.port,
                              dbname=name, template_dbname=membank_proc.template_dbname,
                              password=membank_proc.password)
    janitor.init()
    try:
        with psycopg.connect(url_for(membank_proc.host, membank_proc.port, membank_proc.user, name,
                                     membank_proc.password), autocommit=True, row_factory=dict_row) as c:
            c.execute("set timezone to 'UTC'")
            yield c
    finally:
        janitor.drop()


@pytest.fixture(scope="module")
def refusals_bank(refusals_database):
    """A MemoryBank client on that database (as the superuser, as the conftest's ``bank`` is without a role)."""
    info = refusals_database.info
    with MemoryBank(url_for(info.host, info.port, info.user, info.dbname), max_size=8) as client:
        yield client


@pytest.fixture(scope="module")
def refusals_existing(refusals_bank, refusals_database):
    """The memory the refusals name, made once with the seed that ``seeded`` makes on a fresh database."""
    memory = refusals_bank.create_memory(U1, "existing fact")
    seed(refusals_database)
    return memory


class TestRefusalsOnOneDatabase:
    """The refusals case by case, all on one database (cloned from the template once).

    A fresh database for each of these ~170 cases was nearly all of their time: cloning it, then cold caches in
    each new connection cost about 15 times the refused call itself. The cases are refusals that must write
    nothing, and each still proves it: ``seeded`` counts every table's rows anew before each case, and the case
    compares them after its call; the database holds the same seed that ``seeded`` makes on a fresh one.
    """

    @pytest.fixture
    def postgresql(self, refusals_database):
        return refusals_database

    @pytest.fixture
    def bank(self, refusals_bank):
        return refusals_bank

    @pytest.fixture
    def existing(self, refusals_existing):
        return refusals_existing

    @pytest.fixture
    def seeded(self, existing, conn):
        """Every table's row counts just before this case."""
        return count_all_rows(conn)

    @pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
    def test_sql_error_names_argument_and_writes_nothing(self, conn, existing, seeded, case):
        _, statement, params, _, sqlstate, argument = case
        with pytest.raises(psycopg.Error) as err:
            conn.execute(statement, bind(params, existing))
        diag = err.value.diag
        assert err.value.sqlstate == sqlstate
        assert diag.message_primary.startswith(f"{argument}: ")
        assert diag.message_hint
        assert count_all_rows(conn) == seeded

    @pytest.mark.parametrize("case", [c for c in CASES if c[3] is not None], ids=[c[0] for c in CASES if c[3]])
    def test_client_maps_error_with_same_message(self, bank, conn, existing, seeded, case):
        _, statement, params, call, sqlstate, argument = case
        with pytest.raises(psycopg.Error) as sql_err:
            conn.execute(statement, bind(params, existing))
        with pytest.raises(CLASS_FOR[sqlstate]) as client_err:
            client_call(call, bank, existing)
        assert client_err.value.message == sql_err.value.diag.message_primary
        assert (client_err.value.sqlstate, client_err.value.argument) == (sqlstate, argument)
        assert client_err.value.hint == sql_err.value.diag.message_hint
        assert count_all_rows(conn) == seeded

    @pytest.mark.parametrize("call, argument", [
        (lambda b: b.create_memory(U1, "peanut\x00allergy"), "fact"),
        (lambda b: b.create_memory({"user_id": "u\x001"}, "fact"), "scope"),
        (lambda b: b.list_memories({"user_id": "u\x001"}), "scope"),
    ])
    def test_nul_is_rejected_by_client_naming_argument(self, bank, conn, seeded, call, argument):
        with pytest.raises(InvalidArgumentError) as err:
            call(bank)
        assert err.value.message == f"{argument}: must not contain NUL characters"
        assert err.value.hint and err.value.sqlstate == "22023"
        assert count_all_rows(conn) == seeded

    @pytest.mark.parametrize("statement, sqlstate", [
        # PostgreSQL itself refuses U+0000 in jsonb and text before membank runs.
        ("select membank.create_memory(scope => '{\"user_id\":\"u\\u0000\"}', fact => 'f')", "22P05"),
        ("select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => 'a' || chr(0))", "54000"),
    ])
    def test_nul_is_rejected_by_sql_and_writes_nothing(self, conn, seeded, statement, sqlstate):
        with pytest.raises(psycopg.Error) as err:
            conn.execute(statement)
        assert err.value.sqlstate == sqlstate
        assert count_all_rows(conn) == seeded


def test_every_client_error_is_a_membank_error(bank):
    with pytest.raises(MembankError):
        bank.get_memory(uuid.uuid4())


# -- what is accepted must read back: one row never breaks its scope -----------------------------
@pytest.mark.min_postgresql(17, reason="interval 'infinity' exists from PostgreSQL 17 on")
def test_infinite_ttl_means_no_expiry(conn, seeded):
    a = conn.execute("select (membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => 'a',"
                     " ttl => 'infinity')).expire_time as e").fetchone()["e"]
    assert a is None


def test_infinity_means_no_expiry_and_the_scope_stays_readable(bank, conn, seeded):
    b = conn.execute("select (membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => 'b',"
                     " expire_time => 'infinity')).expire_time as e").fetchone()["e"]
    assert b is None
    m = bank.create_memory(U1, "c", ttl=timedelta(days=365 * 7000))  # year ~9000: fine
    assert m.expire_time.year > 9000
    assert len(bank.list_memories(U1).memories) == 3
    assert len(bank.retrieve_memories(U1, "c", use_embedding=False)) >= 1
    assert all(r.expire_time is None or r.expire_time.year < 10000 for r in bank.list_revisions(m.name))


def test_degenerate_vectors_are_refused_when_stored(bank, conn, seeded, existing):
    with conn.transaction(force_rollback=True):
        jobs = conn.execute("select * from membank.claim_embedding_jobs(batch_size => 10)").fetchall()
        for vector, argument in (("[" + ",".join(["0"] * 384) + "]", "embeddings[1]"),
                                 ("[" + ",".join(["NaN"] + ["0.1"] * 383) + "]", "embeddings[1]")):
            with pytest.raises(psycopg.Error) as err, conn.transaction():
                conn.execute("select membank.store_embeddings(model_id => 'test/m', dimension => 384,"
                             " memory_names => %s, fact_md5s => %s, embeddings => %s)",
                             ([str(jobs[0]["memory_name"])], [str(jobs[0]["fact_md5"])], [vector]))
            assert err.value.sqlstate == "22023"
            assert err.value.diag.message_primary.startswith(f"{argument}: ")
    assert count_all_rows(conn) == seeded


def _claimed_as_worker(login, bank, facts):
    """A worker login's connection and its claimed jobs (name, md5) for new memories of facts, in facts order."""
    for fact in facts:
        bank.create_memory(U1, fact)
    worker = connect_as(login("membank_worker")[1])
    jobs = {j["memory_fact"]: j for j in worker.execute("select * from membank.claim_embedding_jobs(batch_size => 10)")}
    return worker, [str(jobs[f]["memory_name"]) for f in facts], [str(jobs[f]["fact_md5"]) for f in facts]


STORE = ("select membank.store_embeddings(model_id => %s, dimension => 3, memory_names => %s, fact_md5s => %s,"
         " embeddings => %s)")


@pytest.mark.parametrize("second", ["[1,2", "[NaN,1,1]"])
def test_store_embeddings_names_the_first_bad_vector(login, bank, conn, second):
    # A zero vector before a malformed one: the error names the first (as each was checked in turn).
    worker, names, md5s = _claimed_as_worker(login, bank, ["alpha likes tea", "beta likes coffee"])
    before = count_all_rows(conn)
    with worker, pytest.raises(psycopg.Error) as err:
        worker.execute(STORE, ("test/m", names, md5s, ["[0,0,0]", second]))
    assert err.value.sqlstate == "22023"
    assert err.value.diag.message_primary == "embeddings[1]: has zero norm"
    assert err.value.diag.message_hint == "a zero vector has no direction: cosine similarity to it is undefined"
    assert count_all_rows(conn) == before


def test_store_embeddings_of_another_model_is_mb010_whatever_its_vectors(login, bank, conn):
    # The bank holds test/m vectors; a worker still on test/other (the bank was re-embedded) is told so (MB010,
    # the worker stops), not 22023 for a vector its model returned (the worker would count it against the jobs).
    worker, names, md5s = _claimed_as_worker(login, bank, ["alpha likes tea", "beta likes coffee", "gamma has a cat"])
    with worker:
        worker.execute(STORE, ("test/m", names[:1], md5s[:1], ["[0.6,0.8,0]"]))
        before = count_all_rows(conn)
        for vectors in (["[NaN,1,1]", "[0,0.6,0.8]"], ["[0,0.6,0.8]", "not a vector"]):
            with pytest.raises(psycopg.Error) as err:
                worker.execute(STORE, ("test/other", names[1:], md5s[1:], vectors))
            assert err.value.sqlstate == "MB010"
            assert err.value.diag.message_primary.startswith("model_id: this bank holds vectors of test/m")
            assert count_all_rows(conn) == before


@pytest.mark.parametrize("case, argument, message", [
    ("not a uuid", "memory_names", "memory_names: holds a value that is not a uuid"),
    ("md5 not a uuid", "fact_md5s", "fact_md5s: holds a value that is not a uuid"),
    ("a name twice", "memory_names", "memory_names: holds a name twice"),
    ("16001 dimensions", "embeddings[1]", "embeddings[1]: has more dimensions than a vector can hold (16000)"),
])
def test_store_embeddings_names_a_bad_name_or_an_oversized_vector(login, bank, conn, case, argument, message):
    worker, names, md5s = _claimed_as_worker(login, bank, ["alpha likes tea", "beta likes coffee"])
    vectors = ["[0.6,0.8,0]", "[0,0.6,0.8]"]
    if case == "not a uuid":
        names = [names[0], "x"]
    elif case == "md5 not a uuid":
        md5s = [md5s[0], "x"]
    elif case == "a name twice":
        names, md5s = [names[0], names[0]], [md5s[0], md5s[0]]
    else:
        vectors = ["[" + ",".join(["0.1"] * 16001) + "]", vectors[1]]
    before = count_all_rows(conn)
    with worker, pytest.raises(psycopg.Error) as err:
        worker.execute(STORE, ("test/m", names, md5s, vectors))
    assert err.value.sqlstate == "22023"
    assert err.value.diag.message_primary == message and err.value.diag.message_detail == f"argument: {argument}"
    assert err.value.diag.message_hint
    assert count_all_rows(conn) == before


def test_embedder_returning_a_zero_vector_fails_its_job_visibly(db_url, bank, conn, existing):
    from membank.worker import EmbeddingWorker

    class ZeroEmbedder:
        model_id, dimension = "test/zero", 3

        def embed_passages(self, texts):
            return [[0.0, 0.0, 0.0] for _ in texts]

    worker = EmbeddingWorker(db_url, ZeroEmbedder())
    try:
        assert worker.process_batch() == 1
    finally:
        worker.close()
    job = conn.execute("select attempts, last_error from membank_private.embedding_jobs").fetchone()
    assert job["attempts"] == 1 and job["last_error"].startswith("embeddings[1]: has zero norm")
    assert conn.execute("select count(*) as n from membank_private.memory_embeddings").fetchone()["n"] == 0


@pytest.mark.parametrize("blank", ["\u3000", "\u00a0", "\u200b", "\ufeff", "\v", "\f", "\u2007"])
def test_blank_events_make_no_model_call_and_no_memory(bank, blank):
    op = bank.generate_memories(U1, events=[{"event_id": "e1", "author": "user", "text": blank,
                                             "timestamp": "2023-05-24T10:00:00Z"}])
    got = op.get()
    assert got.done and got.model_calls == 0 and got.generated_memories == []


def test_reused_request_id_with_another_request_is_a_conflict(bank, conn):
    first = bank.generate_memories(U1, facts=["The user likes tea"], request_id="r1", disable_consolidation=True)
    again = bank.generate_memories(U1, facts=["The user likes tea"], request_id="r1", disable_consolidation=True)
    assert again.name == first.name
    before = count_all_rows(conn)
    with pytest.raises(ConflictError) as err:
        bank.generate_memories(U1, facts=["The user likes coffee"], request_id="r1", disable_consolidation=True)
    assert (err.value.sqlstate, err.value.argument) == ("MB021", "request_id") and err.value.hint
    with pytest.raises(psycopg.Error) as sql_err:
        conn.execute("select membank.generate_memories(scope => '{\"user_id\":\"u1\"}', facts => '[\"x\"]',"
                     " request_id => 'r1', disable_consolidation => true)")
    assert sql_err.value.sqlstate == "MB021" and sql_err.value.diag.message_primary.startswith("request_id: ")
    assert count_all_rows(conn) == before


def test_top_k_bounds_a_retrieve_without_query(bank):
    for i in range(6):
        bank.create_memory(U1, f"fact {i}")
    assert len(bank.retrieve_memories(U1, top_k=3)) == 3
    assert len(bank.retrieve_memories(U1)) == 6


def test_rollback_of_an_expired_memory_is_refused(bank, conn):
    m = bank.create_memory(U1, "old", ttl=timedelta(days=1))
    bank.update_memory(m.name, fact="new")
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 second'"
                 " where name = %s", (m.name,))
    before = count_all_rows(conn)
    with pytest.raises(NotFoundError) as err:
        bank.rollback_memory(m.name, 1)
    assert err.value.argument == "name" and "expired" in err.value.message
    assert count_all_rows(conn) == before


def test_generation_embedder_returning_a_zero_vector_fails_the_job_visibly(bank, conn):
    op = bank.generate_memories(U1, facts=["The user likes tea"])
    job = conn.execute("select job_id from membank.claim_generation_jobs(batch_size => 1)").fetchone()["job_id"]
    with pytest.raises(psycopg.Error) as err:
        conn.execute("select * from membank.prepare_consolidation(job_id => %s, embeddings => %s::real[],"
                     " embedding_model => 'test/m')", (job, [[0.0, 0.0, 0.0]]))
    assert err.value.sqlstate == "22023" and err.value.diag.message_primary.startswith("embeddings[1]: ")
    assert not op.get().done


@pytest.mark.parametrize("entry, message", [
    (float("nan"), "holds null, NaN or infinite entries"),
    (None, "holds null, NaN or infinite entries"),
    (float("inf"), "holds null, NaN or infinite entries"),
    (float("-inf"), "holds null, NaN or infinite entries"),
    (0.0, "has zero norm"),
    (1e-30, "has zero norm"),  # its squares underflow: pgvector's norm is zero
    (1e30, "has entries too large for a cosine distance"),  # its squares overflow: no norm
])
def test_prepare_consolidation_names_the_first_degenerate_row_of_the_fact_vectors(bank, conn, entry, message):
    # Row 2 of 3 is bad: the error names it, as a check row by row does.
    op = bank.generate_memories(U1, facts=["The user likes tea", "The user likes coffee", "The user has a cat"])
    job = conn.execute("select job_id from membank.claim_generation_jobs(batch_size => 1)").fetchone()["job_id"]
    bad = ([entry, entry, entry] if entry in (1e-30, 1e30) else [0.0, entry, 0.0] if entry is not None
           else [0.5, None, 0.5])
    with pytest.raises(psycopg.Error) as err:
        conn.execute("select * from membank.prepare_consolidation(job_id => %s, embeddings => %s::real[],"
                     " embedding_model => 'test/m')", (job, [[0.6, 0.8, 0.0], bad, [0.0, 0.6, 0.8]]))
    assert err.value.sqlstate == "22023"
    assert err.value.diag.message_primary == f"embeddings[2]: {message}"
    assert not op.get().done


def test_an_unknown_decomposition_method_is_named_but_not_echoed_whole(conn):
    with pytest.raises(psycopg.Error) as err:
        conn.execute("select membank.decompose_query(query_text => 'where? when?', method => %s)", ["x" * 100_000])
    assert err.value.sqlstate == "22023"
    assert err.value.diag.message_primary.startswith("method: unknown decomposition method \"xxx")
    assert len(err.value.diag.message_primary) < 200


# -- what the client must name before any SQL ---------------------------------------------------------
@pytest.mark.parametrize("call, argument, message", [
    # A lone surrogate: psycopg's UTF-8 encoding raised UnicodeEncodeError, naming nothing.
    (lambda b: b.create_memory(U1, "peanut \ud800 allergy"), "fact",
     "fact: must not contain lone surrogates (U+D800..U+DFFF)"),
    (lambda b: b.create_memory(U1, "f", metadata={"note": "a \udfff"}), "metadata",
     "metadata: must not contain lone surrogates (U+D800..U+DFFF)"),
    # NaN: json.dumps writes the token NaN, which the server refused as invalid JSON (22P02), naming nothing.
    (lambda b: b.create_memory(U1, "f", metadata={"score": float("nan")}), "metadata",
     "metadata: must not hold NaN or infinite numbers"),
    (lambda b: b.create_memory(U1, "f", labels={"w": [float("inf")]}), "labels",
     "labels: must not hold NaN or infinite numbers"),
    # A naive time was read as UTC (the connection's zone): an instant the caller never named.
    (lambda b: b.create_memory(U1, "f", expire_time=datetime(2099, 1, 1)), "expire_time",
     "expire_time: must be timezone-aware, got the naive 2099-01-01T00:00:00"),
    (lambda b: b.create_memory(U1, "f", expire_time="2099-01-01T00:00:00"), "expire_time",
     "expire_time: must be timezone-aware, got the naive 2099-01-01T00:00:00"),
    (lambda b: b.list_memories(U1, created_after=datetime(2020, 1, 1)), "created_after",
     "created_after: must be timezone-aware, got the naive 2020-01-01T00:00:00"),
    # A number as text: the ::text cast stored the fact "42".
    (lambda b: b.create_memory(U1, 42), "fact", "fact: must be text (str), got the int 42"),
    (lambda b: b.create_memory(U1, "f", context=["a", "b"]), "context",
     "context: must be text (str), got the list ['a', 'b']"),
    (lambda b: b.retrieve_memories(U1, 3.5), "query_text", "query_text: must be text (str), got the float 3.5"),
])
def test_client_names_text_json_and_times_sql_cannot_take(bank, conn, seeded, call, argument, message):
    with pytest.raises(InvalidArgumentError) as err:
        call(bank)
    assert (err.value.message, err.value.argument, err.value.sqlstate) == (message, argument, "22023")
    assert err.value.hint
    assert count_all_rows(conn) == seeded


def test_permissions_check_with_an_empty_tool_is_a_named_error_exit_2(db_url, monkeypatch):
    # Before: the guard answered PROMPT_USER for its own failure, and the CLI exited 1 as for a refusal.
    from click.testing import CliRunner

    from membank.cli import main

    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    result = CliRunner().invoke(main, ["permissions", "check", "--scope", '{"user_id": "u1"}', "--tool", ""])
    assert result.exit_code == 2, result.output
    assert "error [22023]: tool_name: " in result.output and "hint:" in result.output
    assert "Traceback" not in result.output


def test_events_list_output_still_appends_through_the_cli(db_url, monkeypatch):
    # Unknown event keys are refused, but `events list` prints append_time (docs/cli.md: "the format `events
    # append` reads"): the CLI drops it, so that a session copies to another as documented.
    from click.testing import CliRunner

    from membank.cli import main

    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    runner, scope = CliRunner(), '{"user_id": "u1"}'
    assert runner.invoke(main, ["events", "append", "--scope", scope, "--session", "s1"],
                         input=json.dumps(EV1) + "\n").exit_code == 0
    listed = runner.invoke(main, ["events", "list", "--scope", scope, "--session", "s1"]).stdout
    assert "append_time" in listed
    copied = runner.invoke(main, ["events", "append", "--scope", scope, "--session", "s2"], input=listed)
    assert copied.exit_code == 0, copied.output
    assert json.loads(copied.stdout)["appended"] == 1


def test_build_context_with_budget_0_is_accepted_and_chooses_nothing(conn, existing, seeded):
    # Accepted on purpose (documented in build_context's COMMENT): the Python context builder passes what is
    # left of its budget after the session buffer, which may be 0; the memories are then judged, none chosen.
    row = conn.execute("select membank.build_context(scopes => %s::jsonb, query_text => 'existing fact',"
                       " budget_tokens => 0) as c", [json.dumps(U1)]).fetchone()["c"]
    assert row["text"] == "" and row["budget_tokens"] == 0
    assert count_all_rows(conn) == seeded


def test_add_messages_of_roles_not_extracted_is_a_done_no_op(bank, conn):
    # generate_memories refuses events => [], but add_messages of only a system message still stores it and
    # answers with a done operation of no actions (its messages are the session's record).
    pending = bank.add([{"role": "system", "content": "You are terse."}], scope=U1, session_id="chat")
    got = pending.get()
    assert got.done and got.generated_memories == [] and pending.added["excluded_messages"] == 1
    assert [e.text for e in bank.list_events(U1, "chat")] == ["You are terse."]


def test_ingest_events_of_nothing_still_rechecks_the_trigger(bank):
    # append_events refuses [], but IngestEvents with no events is documented: it re-checks the stream's trigger.
    first = bank.ingest_events(U1, [EV1], stream_id="s",
                               generation_trigger_config={"generation_rule": {"event_count": 5}})
    assert first.pending_events == 1 and first.operation_name is None
    again = bank.ingest_events(U1, [], stream_id="s", force_flush=True)
    assert (again.appended, again.trigger_reason) == (0, "force_flush") and again.operation_name is not None


def test_a_query_vector_the_bank_cannot_check_yet_is_refused_unless_its_model_is_named(conn):
    """A fresh bank has no model (no worker declared one, no vector stored), so no dimension to check a query vector
    against: an unnamed vector is refused (22023 naming query_embedding, with a hint), one whose embedding_model is
    named is kept out of the ranking (text only, degraded); once a model is declared, the dimension check answers in
    the same shape."""
    assert conn.execute("select count(*) as n from membank_private.embedding_config").fetchone()["n"] == 0
    conn.execute(f"select membank.create_memory(scope => '{U}', fact => 'User keeps bees')")
    sql = (f"select fact, degraded from membank.retrieve_memories(scope => '{U}', query_text => 'bees',"
           " query_embedding => %s::real[]")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute(sql + ")", ([0.1, 0.2, 0.3],))
    assert err.value.diag.message_primary == (
        "query_embedding: cannot be checked: this bank has no embedding model yet, so a vector of 3 dimensions from"
        " an unnamed model has nothing to be compared with")
    assert err.value.diag.message_hint.startswith("pass embedding_model => the model that made it")
    assert conn.execute(sql + ", embedding_model => 'test/m')", ([0.1, 0.2, 0.3],)).fetchall() == [
        {"fact": "User keeps bees", "degraded": True}]
    conn.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 4)")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute(sql + ")", ([0.1, 0.2, 0.3],))
    assert err.value.diag.message_primary == (
        "query_embedding: has 3 dimensions; this bank stores 4-dimensional vectors of test/m")
    assert err.value.diag.message_hint == "embed the query with test/m (query mode)"


@pytest.mark.parametrize("call", [
    lambda b: b.create_memory(U1, "x", ttl="thirty days"),
    lambda b: b.generate_memories(U1, facts=["f"], ttl="thirty days"),
], ids=["create_memory", "generate_memories"])
def test_a_ttl_the_server_cannot_read_is_named_with_a_hint(bank, conn, seeded, call):
    """The server reads an argument's text before the function runs, and its error names neither the argument nor
    a fix (22007 'invalid input syntax for type interval'); the client names it and says what it takes."""
    with pytest.raises(InvalidArgumentError) as err:
        call(bank)
    assert (err.value.argument, err.value.sqlstate) == ("ttl", "22007")
    assert str(err.value).startswith("ttl: must be interval, got 'thirty days'")
    assert "timedelta(days=30)" in err.value.hint
    assert count_all_rows(conn) == seeded


def test_a_login_without_a_membank_role_is_told_which_to_grant(login, embedder):
    """PostgreSQL's own refusal (42501 'permission denied for schema membank', or for the function when the login
    holds another membank role) has no hint: the client says which roles call what, and where the grant table is."""
    from membank import PermissionDeniedError

    for grants, refusal in (((), "permission denied for schema membank"),
                            (("membank_reader",), "permission denied for function create_memory")):
        with MemoryBank(login(*grants)[1], embedder=embedder) as bank:
            with pytest.raises(PermissionDeniedError) as err:
                bank.create_memory(U1, "x")
        assert err.value.message == refusal and err.value.sqlstate == "42501"
        assert "membank_writer writes" in err.value.hint and "docs/operations.md#roles" in err.value.hint
