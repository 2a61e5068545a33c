"""The API on a real Citus cluster (coordinator + 2 workers, tables distributed by scope_id): `pytest -m citus`.

One distributed database serves the module; each test uses scopes of its own.
Every single-scope call is checked to send its shard commands to exactly the
worker that holds the scope (citus.log_remote_commands, ``RemoteCommands``),
and two scopes are placed on two different workers
(``get_shard_id_for_distribution_column``). The calls run as real logins
holding membank's roles, not as a superuser, except where a test says why.
"""

from __future__ import annotations

import json
import math
import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb

from test_citus import RemoteCommands, workers
from test_role_matrix import objects  # noqa: F401 (the one-server role matrix's fixture, for the comparison)

pytestmark = pytest.mark.citus


@pytest.fixture(scope="module")
def bank(citus_cluster):
    """A distributed membank database for the module: (coordinator URL, database name, cluster)."""
    from membank import distribute, migrate

    name = f"membank_citus_api_{uuid.uuid4().hex[:8]}"
    url = citus_cluster.create_database(name)
    try:
        migrate.upgrade(url)
        distribute.distribute(url)
        yield url, name, citus_cluster
    finally:
        citus_cluster.drop_database(name)


class Cluster:
    """The module's bank as one test sees it: logins, scopes placed on workers, single-worker checks."""

    def __init__(self, url: str, name: str, cluster):
        self.url, self.name, self.cluster = url, name, cluster
        self.admin = psycopg.connect(url, autocommit=True)  # creates logins and places scopes only
        self.roles: list[str] = []
        self.connections: list[psycopg.Connection] = []

    def close(self) -> None:
        for c in self.connections:
            c.close()
        for role in self.roles:
            self.admin.execute(f'drop owned by "{role}"')  # generated names, not input
            self.admin.execute(f'drop role "{role}"')
        self.admin.close()

    def login(self, *grants: str) -> psycopg.Connection:
        """An autocommit connection to the coordinator as a new LOGIN role holding ``grants``."""
        role = f"membank_citus_{uuid.uuid4().hex[:10]}"
        self.admin.execute(f'create role "{role}" login')
        for grant in grants:
            self.admin.execute(f'grant "{grant}" to "{role}"')
        self.roles.append(role)
        c = psycopg.connect(self.url.replace("postgresql://postgres@", f"postgresql://{role}@"), autocommit=True)
        c.execute("set timezone to 'UTC'")
        c.execute("set statement_timeout = '60s'")
        self.connections.append(c)
        return c

    def worker_of(self, scope: dict) -> int:
        """The port of the worker holding ``scope``'s shard of memories."""
        return self.admin.execute(
            "select s.nodeport from citus_shards as s where s.table_name = 'membank_private.memories'::regclass"
            " and s.shardid = get_shard_id_for_distribution_column('membank_private.memories',"
            " md5(%s::jsonb::text)::uuid)", (json.dumps(scope),)).fetchone()[0]

    def scope_on(self, port: int, tag: str) -> dict:
        """A fresh scope {"user_id": ...} whose shard lies on the worker at ``port``."""
        for n in range(500):
            scope = {"user_id": f"{tag}-{uuid.uuid4().hex[:6]}-{n}"}
            if self.worker_of(scope) == port:
                return scope
        raise AssertionError(f"no scope on worker {port}")

    def two_scopes(self, tag: str) -> tuple[dict, dict, int, int]:
        """Two fresh scopes on the two different workers, and those workers' ports."""
        w1, w2 = (w.port for w in workers(self))
        return self.scope_on(w1, tag + "a"), self.scope_on(w2, tag + "b"), w1, w2


@pytest.fixture
def cl(bank):
    url, name, cluster = bank
    c = Cluster(url, name, cluster)
    try:
        yield c
    finally:
        c.close()


def calls_on(c: psycopg.Connection) -> RemoteCommands:
    return RemoteCommands(c)


def fact_list(rows) -> list[str]:
    return [r[0] for r in rows]


def test_two_scopes_live_on_two_workers_and_their_rows_stay_there(cl):
    a, b, w1, w2 = cl.two_scopes("place")
    writer = cl.login("membank_writer")
    writer.execute("select membank.create_memory(scope => %s, fact => 'lives in Oslo')", (json.dumps(a),))
    writer.execute("select membank.create_memory(scope => %s, fact => 'lives in Rome')", (json.dumps(b),))
    assert (cl.worker_of(a), cl.worker_of(b)) == (w1, w2) and w1 != w2
    # Read each worker's shards directly: each holds only its scope's row.
    for scope, worker, fact in ((a, w1, "lives in Oslo"), (b, w2, "lives in Rome")):
        node = next(w for w in cl.cluster.workers if w.port == worker)
        shard = cl.admin.execute("select shard_name(%s::regclass, get_shard_id_for_distribution_column("
                                 "'membank_private.memories', md5(%s::jsonb::text)::uuid))",
                                 ("membank_private.memories", json.dumps(scope))).fetchone()[0]
        with psycopg.connect(node.url(cl.name), autocommit=True) as w:
            assert w.execute(f"select fact from {shard} where scope = %s::jsonb",  # shard_name's own quoting
                             (json.dumps(scope),)).fetchall() == [(fact,)]


def test_retrieval_in_one_scope_runs_on_its_worker(cl):
    a, b, w1, _ = cl.two_scopes("ret")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    for fact in ("User is allergic to peanuts", "User plays the violin", "User's sister lives in Lyon"):
        writer.execute("select membank.create_memory(scope => %s, fact => %s)", (sa, fact))
    writer.execute("select membank.create_memory(scope => %s, fact => 'User is allergic to peanuts too')",
                   (json.dumps(b),))
    reader = cl.login("membank_reader")
    log = calls_on(reader)
    rows, ports = log.during("select fact, matched_signals, text_match_rank from membank.retrieve_memories("
                             "scope => %s, query_text => 'peanut allergy', top_k => 2)", (sa,))
    assert ports == {w1}
    assert rows[0] == ("User is allergic to peanuts", ["text"], 1)
    assert all("too" not in r[0] for r in rows)  # the other scope's memory never appears


def test_session_neighbours_on_the_cluster_stay_on_the_scopes_worker(cl):
    """Memories sourced by events of a session; the turn said after the text hit enters through its session."""
    a, b, w1, w2 = cl.two_scopes("nbr")
    writer = cl.login("membank_writer")
    for scope, turns in ((a, ["I bought an instrument at the market", "A violin, handmade"]),
                         (b, ["B: a drum from the fair"])):
        writer.execute("select membank.append_events(%s, 's1', %s)", (json.dumps(scope), json.dumps([
            {"event_id": f"e{i}", "author": "user", "text": t, "timestamp": f"2023-05-08T13:56:0{i}Z"}
            for i, t in enumerate(turns)])))
        for i, t in enumerate(turns):
            writer.execute("select membank.create_memory(scope => %s, fact => %s, source_event_ids => %s)",
                           (json.dumps(scope), t, [f"e{i}"]))
    reader = cl.login("membank_reader")
    log = calls_on(reader)
    sql = ("select fact from membank.retrieve_memories(scope => %s, query_text => 'instrument market', top_k => 5,"
           " neighbour_weight => 1)")
    rows, ports = log.during(sql, (json.dumps(a),))
    assert ports == {w1}
    assert fact_list(rows) == ["I bought an instrument at the market", "A violin, handmade"]
    rows, ports = log.during(sql, (json.dumps([a, b]),))
    assert ports == {w1, w2}
    assert fact_list(rows) == ["I bought an instrument at the market", "A violin, handmade"]


def test_rerank_on_the_cluster_stays_on_the_scopes_worker(cl):
    """The second pass (rerank => true) reads one scope's shard: its worker alone; two scopes, both, merged by the
    re-ranker's probability. The turn said right after the hit, sharing its names, comes second."""
    a, b, w1, w2 = cl.two_scopes("rrk")
    writer = cl.login("membank_writer")
    for scope, turns in ((a, ["Yesterday Melanie bought a violin at the market in Cremona",
                              "The Cremona workshop where Melanie found it keeps a stall at the market",
                              "The market on Monday sold fish",
                              # so that "market" is in at most half the scope (else only rarer words seek)
                              "Melanie likes tea", "Melanie plays chess", "Melanie owns a kayak"]),
                         (b, ["B: a drum from the market"])):
        writer.execute("select membank.append_events(%s, 's1', %s)", (json.dumps(scope), json.dumps([
            {"event_id": f"e{i}", "author": "user", "text": t, "timestamp": f"2023-05-08T13:56:0{i}Z"}
            for i, t in enumerate(turns)])))
        for i, t in enumerate(turns):
            writer.execute("select membank.create_memory(scope => %s, fact => %s, source_event_ids => %s)",
                           (json.dumps(scope), t, [f"e{i}"]))
    reader = cl.login("membank_reader")
    log = calls_on(reader)
    sql = "select fact, score from membank.retrieve_memories(scope => %s, query_text => 'violin market', top_k => 5"
    plain, _ = log.during(sql + ")", (json.dumps(a),))
    rows, ports = log.during(sql + ", rerank => true)", (json.dumps(a),))
    assert ports == {w1}
    assert sorted(r[0] for r in rows) == sorted(r[0] for r in plain)  # the same candidates, re-ordered
    assert [r[0] for r in rows[:2]] == ["Yesterday Melanie bought a violin at the market in Cremona",
                                        "The Cremona workshop where Melanie found it keeps a stall at the market"]
    assert all(0 < r[1] < 1 for r in rows) and [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    rows, ports = log.during(sql + ", rerank => true)", (json.dumps([a, b]),))
    assert ports == {w1, w2}
    assert "B: a drum from the market" in [r[0] for r in rows]
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)


def cosine_distance(u: list[float], v: list[float]) -> float:
    dot = sum(x * y for x, y in zip(u, v))
    return 1 - dot / (math.sqrt(sum(x * x for x in u)) * math.sqrt(sum(y * y for y in v)))


@pytest.fixture
def embedded(cl):
    """Two scopes on two workers with 3-d vectors stored (the bank's model test/m)."""
    cl.admin.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 3)")
    a, b, w1, w2 = cl.two_scopes("vec")
    vectors_a = {"likes green tea": [1.0, 0.1, 0.0], "likes black coffee": [0.0, 1.0, 0.2],
                 "owns a red bicycle": [0.1, 0.0, 1.0]}
    vectors_b = {"likes jasmine tea": [0.9, 0.3, 0.1], "collects stamps": [0.0, 0.2, 1.0]}
    writer = cl.login("membank_writer")
    for scope, vectors in ((a, vectors_a), (b, vectors_b)):
        for fact, vector in vectors.items():
            name = writer.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                  (json.dumps(scope), fact)).fetchone()[0]
            # The vector goes in as store_embeddings stores it (the embedding
            # worker's queue is ported to Citus apart from the API, in
            # tests/test_citus_jobs.py): the row, its quantization, the job gone.
            cl.admin.execute(
                "insert into membank_private.memory_embeddings (name, scope_id, model_id, fact_md5, embedding,"
                " embedding_bq) select %s, md5(%s::jsonb::text)::uuid, 'test/m', md5(%s)::uuid, v,"
                " membank_private.quantize(v, null) from (select %s::membank_extensions.vector as v) as x",
                (name, json.dumps(scope), fact, str(vector)))
            cl.admin.execute("delete from membank_private.embedding_jobs where scope_id = md5(%s::jsonb::text)::uuid"
                             " and name = %s", (json.dumps(scope), name))
    return a, b, w1, w2, {**vectors_a, **vectors_b}


def test_vector_retrieval_on_the_cluster_gives_true_cosine_distances(cl, embedded):
    a, _, w1, _, vectors = embedded
    query = [1.0, 0.2, 0.1]
    reader = cl.login("membank_reader")
    log = calls_on(reader)
    rows, ports = log.during("select fact, distance, vector_rank from membank.retrieve_memories(scope => %s,"
                             " query_embedding => %s::real[], query_text => 'tea', top_k => 3)",
                             (json.dumps(a), query))
    assert ports == {w1}, log.commands
    assert [r[0] for r in rows][0] == "likes green tea"
    for fact, distance, _ in rows:
        assert distance == pytest.approx(cosine_distance(query, vectors[fact]), abs=1e-5), fact
    assert sorted(r[2] for r in rows) == [1, 2, 3]


def test_multi_scope_retrieval_gathers_from_both_workers_and_fuses_once(cl, embedded):
    a, b, w1, w2, vectors = embedded
    query = [1.0, 0.2, 0.1]
    reader = cl.login("membank_reader")
    log = calls_on(reader)
    rows, ports = log.during("select fact, scope, distance, score from membank.retrieve_memories(scope => %s,"
                             " query_embedding => %s::real[], top_k => 4)", (json.dumps([a, b]), query))
    assert ports == {w1, w2}
    facts = [r[0] for r in rows]
    assert set(facts[:2]) == {"likes green tea", "likes jasmine tea"}  # each scope's best first
    assert {json.dumps(r[1], sort_keys=True) for r in rows} == {json.dumps(a, sort_keys=True),
                                                                 json.dumps(b, sort_keys=True)}
    assert [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)
    for fact, _, distance, _ in rows:
        assert distance == pytest.approx(cosine_distance(query, vectors[fact]), abs=1e-5)


def test_retrieval_filters_on_the_cluster(cl):
    a, _, w1, _ = cl.two_scopes("filt")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    writer.execute("select membank.create_memory(scope => %s, fact => 'User cooks pasta on Sundays',"
                   " topics => '{USER_PREFERENCES}', metadata => '{\"source\": \"chat\"}')", (sa,))
    writer.execute("select membank.create_memory(scope => %s, fact => 'User cooks rice on Mondays',"
                   " topics => '{USER_PERSONAL_INFO}', metadata => '{\"source\": \"email\"}')", (sa,))
    log = calls_on(writer)
    by_topic, ports = log.during("select fact from membank.retrieve_memories(scope => %s, query_text => 'cooks',"
                                 " topics => '{USER_PERSONAL_INFO}')", (sa,))
    assert fact_list(by_topic) == ["User cooks rice on Mondays"] and ports == {w1}
    by_metadata, ports = log.during("select fact from membank.retrieve_memories(scope => %s, query_text => 'cooks',"
                                    " metadata_filter => '{\"source\": \"chat\"}')", (sa,))
    assert fact_list(by_metadata) == ["User cooks pasta on Sundays"] and ports == {w1}
    none, _ = log.during("select fact from membank.retrieve_memories(scope => %s, query_text => 'cooks',"
                         " created_before => '2000-01-01')", (sa,))
    assert none == []


def test_retrieval_without_a_query_and_with_several_queries(cl):
    a, _, w1, _ = cl.two_scopes("multiq")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    for fact in ("User adopted a cat named Miso", "User works as a nurse", "User runs marathons"):
        writer.execute("select membank.create_memory(scope => %s, fact => %s)", (sa, fact))
    log = calls_on(writer)
    listed, ports = log.during("select fact from membank.retrieve_memories(scope => %s)", (sa,))
    assert sorted(fact_list(listed)) == sorted(["User adopted a cat named Miso", "User works as a nurse",
                                                "User runs marathons"]) and ports == {w1}
    both, ports = log.during("select fact from membank.retrieve_memories(scope => %s,"
                             " query_texts => array['cat', 'nurse'], top_k => 2)", (sa,))
    assert set(fact_list(both)) == {"User adopted a cat named Miso", "User works as a nurse"} and ports == {w1}


def test_scopes_stay_apart_on_the_cluster(cl):
    a, b, w1, w2 = cl.two_scopes("iso")
    writer = cl.login("membank_writer")
    sa, sb = json.dumps(a), json.dumps(b)
    name = writer.execute("select (membank.create_memory(scope => %s, fact => 'secret of a')).name",
                          (sa,)).fetchone()[0]
    for query in ("select membank.get_memory(name => %s, scope => %s)",
                  "select membank.update_memory(name => %s, fact => 'x', scope => %s)",
                  "select membank.delete_memory(name => %s, scope => %s)",
                  "select * from membank.list_revisions(name => %s, scope => %s)"):
        with pytest.raises(psycopg.errors.NoDataFound):
            writer.execute(query, (name, sb))
    assert writer.execute("select count(*) from membank.retrieve_memories(scope => %s, query_text => 'secret')",
                          (sb,)).fetchone() == (0,)
    assert writer.execute("select count(*) from membank.list_memories(scope => %s)", (sb,)).fetchone() == (0,)
    assert writer.execute("select (membank.get_memory(name => %s, scope => %s)).fact", (name, sa)).fetchone() == (
        "secret of a",)


def test_revisions_and_rollback_each_on_one_worker(cl):
    a, _, w1, _ = cl.two_scopes("rev")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    log = calls_on(writer)
    (name,), = log.during("select (membank.create_memory(scope => %s, fact => 'drinks tea')).name", (sa,))[0]
    steps = [
        ("select membank.update_memory(name => %s, fact => 'drinks coffee', scope => %s)", (name, sa)),
        ("select membank.rollback_memory(name => %s, revision => 1, scope => %s)", (name, sa)),
        ("select membank.delete_memory(name => %s, scope => %s)", (name, sa)),
        ("select membank.rollback_memory(name => %s, revision => 2, scope => %s)", (name, sa)),
    ]
    for query, params in steps:
        assert log.during(query, params)[1] == {w1}, query
    rows, ports = log.during("select revision, action, fact from membank.list_revisions(name => %s, scope => %s)",
                             (name, sa))
    assert ports == {w1}
    assert [(r[1], r[2]) for r in rows] == [("CREATED", "drinks tea"), ("UPDATED", "drinks coffee"),
                                            ("UPDATED", "drinks tea"), ("DELETED", "drinks tea"),
                                            ("CREATED", "drinks coffee")]
    assert writer.execute("select (membank.get_memory(name => %s, scope => %s)).fact", (name, sa)).fetchone() == (
        "drinks coffee",)


def test_events_append_idempotently_on_one_worker(cl):
    a, _, w1, _ = cl.two_scopes("ev")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    events = Jsonb([{"event_id": "e1", "author": "user", "text": "I moved to Berlin",
                     "timestamp": "2023-05-24T10:00:00Z"},
                    {"event_id": "e2", "author": "assistant", "text": "Welcome to Berlin",
                     "timestamp": "2023-05-24T10:00:05Z"}])
    log = calls_on(writer)
    assert log.during("select membank.append_events(scope => %s, session_id => 's1', events => %s)",
                      (sa, events)) == ([(2,)], {w1})
    assert log.during("select membank.append_events(scope => %s, session_id => 's1', events => %s)",
                      (sa, events)) == ([(0,)], {w1})  # a retry stores nothing twice
    rows, ports = log.during("select event_id, author, text from membank.list_events(scope => %s,"
                             " session_id => 's1')", (sa,))
    assert rows == [("e1", "user", "I moved to Berlin"), ("e2", "assistant", "Welcome to Berlin")] and ports == {w1}
    with pytest.raises(psycopg.Error, match="already stored with other content"):
        writer.execute("select membank.append_events(scope => %s, session_id => 's1', events => %s)",
                       (sa, Jsonb([{"event_id": "e1", "author": "user", "text": "changed",
                                    "timestamp": "2023-05-24T10:00:00Z"}])))


def test_add_messages_and_ingest_events_on_one_worker(cl):
    a, _, w1, _ = cl.two_scopes("ing")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    log = calls_on(writer)
    rows, ports = log.during("select (m).appended, (m).messages from (select membank.add_messages(scope => %s,"
                             " messages => %s) as m) as x",
                             (sa, Jsonb([{"role": "user", "content": "I love hiking"},
                                         {"role": "assistant", "content": "Nice!"}])))
    assert rows == [(2, 2)] and ports == {w1}
    rows, ports = log.during("select (i).appended from (select membank.ingest_events(scope => %s,"
                             " stream_id => 'st', events => %s) as i) as x",
                             (sa, Jsonb([{"event_id": "i1", "author": "user", "text": "I have a dog",
                                          "timestamp": "2023-05-24T10:00:00Z"}])))
    assert rows == [(1,)] and ports == {w1}
    assert writer.execute("select count(*) from membank.list_operations(scope => %s)", (sa,)).fetchone()[0] >= 1


def test_adk_sessions_on_one_worker(cl):
    app = f"app{uuid.uuid4().hex[:6]}"
    scope = {"app_name": app, "user_id": "u1"}
    port = cl.worker_of(scope)
    writer = cl.login("membank_writer")
    log = calls_on(writer)
    calls = [
        ("select membank.create_session(app_name => %s, user_id => 'u1', session_id => 'S1',"
         " state => '{\"k\": 1, \"user:lang\": \"de\"}')", (app,)),
        ("select membank.append_session_event(app_name => %s, user_id => 'u1', session_id => 'S1', event => %s)",
         (app, Jsonb({"id": "e1", "author": "user", "invocation_id": "i1", "timestamp": 1.5,
                      "actions": {"state_delta": {"k": 2, "user:lang": "fr"}}}))),
        ("select membank.get_session(app_name => %s, user_id => 'u1', session_id => 'S1')", (app,)),
        ("select membank.list_sessions(app_name => %s, user_id => 'u1')", (app,)),
        ("select membank.get_user_state(app_name => %s, user_id => 'u1')", (app,)),
    ]
    results = []
    for query, params in calls:
        rows, ports = log.during(query, params)
        assert ports == {port}, query
        results.append(rows[0][0])
    created, appended, session, listed, user_state = results
    assert created["state"] == {"k": 1, "user:lang": "de"}
    assert appended["appended"] is True
    assert session["state"] == {"k": 2, "user:lang": "fr"}
    assert [e["id"] for e in session["events"]] == ["e1"]
    assert listed["id"] == "S1" and listed["events"] == []
    assert user_state == {"lang": "fr"}
    # App-wide state lives in a reference table (a copy on every node); the
    # app-wide listing walks every user's shard, no whole row reaching a shard.
    other = cl.login("membank_writer")
    other.execute("select membank.create_session(app_name => %s, user_id => 'u2', session_id => 'S2',"
                  " state => '{\"app:theme\": \"dark\"}')", (app,))
    assert writer.execute("select membank.get_session(app_name => %s, user_id => 'u1', session_id => 'S1')",
                          (app,)).fetchone()[0]["state"]["app:theme"] == "dark"
    assert sorted(r[0]["user_id"] for r in other.execute("select membank.list_sessions(app_name => %s)",
                                                         (app,)).fetchall()) == ["u1", "u2"]
    assert log.during("select membank.delete_session(app_name => %s, user_id => 'u1', session_id => 'S1')",
                      (app,)) == ([(True,)], {port})


def test_profiles_on_the_cluster(cl):
    a, _, w1, _ = cl.two_scopes("prof")
    schema_id = f"p{uuid.uuid4().hex[:6]}"
    admin = cl.login("membank_admin")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    admin.execute("select membank.create_profile_schema(schema_id => %s, memory_schema => %s)",
                  (schema_id, Jsonb(schema)))
    admin.execute("select membank.update_profile_schema(schema_id => %s, memory_schema => %s)",
                  (schema_id, Jsonb({**schema, "properties": {"city": {"type": "string"},
                                                              "job": {"type": "string"}}})))
    reader = cl.login("membank_reader")
    listed = [r[0] for r in reader.execute("select schema_id from membank.list_profile_schemas()").fetchall()]
    assert schema_id in listed
    got = reader.execute("select (membank.get_profile_schema(%s)).memory_schema", (schema_id,)).fetchone()[0]
    assert sorted(got["properties"]) == ["city", "job"]
    log = calls_on(reader)
    assert log.during("select membank.retrieve_profiles(scope => %s)", (json.dumps(a),)) == ([({},)], {w1})
    admin.execute("select membank.delete_profile_schema(schema_id => %s)", (schema_id,))
    assert schema_id not in [r[0] for r in reader.execute("select schema_id from membank.list_profile_schemas()")]


def test_tool_rules_and_permission_checks_on_one_worker(cl):
    a, b, w1, _ = cl.two_scopes("tool")
    admin = cl.login("membank_admin")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    log = calls_on(admin)
    (rule,), = log.during("select (membank.create_tool_rule(scope => %s, tool_name => 'shell',"
                          " pattern => 'rm .*', decision => 'BLOCK')).id", (sa,))[0]
    admin.execute("select membank.create_tool_rule(scope => %s, tool_name => 'shell', pattern => 'ls .*',"
                   " decision => 'ALLOW', project_id => 'p1')", (sa,))
    checks = {
        "rm -rf /tmp/x": "BLOCK", "ls -la": "ALLOW",
    }
    for command, decision in checks.items():
        rows, ports = log.during("select (d).decision from (select membank.check_tool_permission(scope => %s,"
                                 " project_id => 'p1', tool_name => 'shell', command => %s) as d) as x",
                                 (sa, command))
        assert rows == [(decision,)] and ports == {w1}, command
    # Another scope holds none of these rules: it is asked.
    assert writer.execute("select (membank.check_tool_permission(scope => %s, project_id => 'p1',"
                          " tool_name => 'shell', command => 'ls -la')).decision",
                          (json.dumps(b),)).fetchone() == ("PROMPT_USER",)
    steps = [
        ("select membank.update_tool_rule(id => %s, scope => %s, decision => 'ALLOW')", (rule, sa)),
        ("select * from membank.list_tool_rules(scope => %s, project_id => 'p1')", (sa,)),
        ("select * from membank.list_tool_rule_changes(scope => %s)", (sa,)),
        ("select * from membank.list_tool_decisions(scope => %s)", (sa,)),
        ("select membank.set_exempt_tools(scope => %s, tools => '{cat}')", (sa,)),
        ("select membank.delete_tool_rule(id => %s, scope => %s)", (rule, sa)),
    ]
    for query, params in steps:
        assert log.during(query, params)[1] == {w1}, query
    actions = [r[0] for r in writer.execute("select action from membank.list_tool_rule_changes(scope => %s)"
                                            " order by 1", (sa,)).fetchall()]
    assert sorted(actions) == ["CREATED", "CREATED", "DELETED", "UPDATED"]
    assert writer.execute("select (membank.check_tool_permission(scope => %s, project_id => 'p1',"
                          " tool_name => 'cat', command => 'cat x')).decision", (sa,)).fetchone() == ("ALLOW",)


def test_operations_are_read_on_one_worker(cl):
    a, b, w1, _ = cl.two_scopes("op")
    writer = cl.login("membank_writer")
    sa = json.dumps(a)
    log = calls_on(writer)
    (name,), = log.during("select membank.generate_memories(scope => %s, facts => %s)",
                          (sa, Jsonb(["the user likes tea"])))[0]
    rows, ports = log.during("select (o).scope, (o).done from (select membank.get_operation(name => %s, scope => %s)"
                             " as o) as x", (str(name), sa))
    assert rows == [(a, False)] and ports == {w1}
    rows, ports = log.during("select name from membank.list_operations(scope => %s)", (sa,))
    assert rows == [(name,)] and ports == {w1}
    with pytest.raises(psycopg.errors.NoDataFound):
        writer.execute("select membank.get_operation(name => %s, scope => %s)", (str(name), json.dumps(b)))


def test_erase_scope_on_one_worker_keeps_the_other_scope(cl):
    a, b, w1, w2 = cl.two_scopes("erase")
    writer = cl.login("membank_writer")
    sa, sb = json.dumps(a), json.dumps(b)
    for scope in (sa, sb):
        name = writer.execute("select (membank.create_memory(scope => %s, fact => 'plays chess')).name",
                              (scope,)).fetchone()[0]
        writer.execute("select membank.update_memory(name => %s, fact => 'plays chess daily', scope => %s)",
                       (name, scope))
        writer.execute("select membank.append_events(scope => %s, session_id => 's', events => %s)",
                       (scope, Jsonb([{"event_id": "e", "author": "user", "text": "chess",
                                       "timestamp": "2023-05-24T10:00:00Z"}])))
    admin = cl.login("membank_admin")
    for scope in (sa, sb):
        admin.execute("select membank.create_tool_rule(scope => %s, tool_name => 'sh', pattern => 'ls',"
                      " decision => 'ALLOW')", (scope,))
    log = calls_on(admin)
    rows, ports = log.during("select membank.erase_scope(scope => %s, force => true)", (sa,))
    assert ports == {w1}, [x for x in log.commands if not x.startswith(str(w1))]
    counts = rows[0][0]["counts"]
    assert (counts["memories"], counts["revisions"], counts["events"], counts["sessions"], counts["tool_rules"]) == (
        1, 2, 1, 1, 1)
    assert writer.execute("select fact from membank.list_memories(scope => %s)", (sa,)).fetchall() == []
    assert writer.execute("select count(*) from membank.list_events(scope => %s, session_id => 's')",
                          (sa,)).fetchone() == (0,)
    assert writer.execute("select count(*) from membank.list_memories(scope => %s)", (sb,)).fetchone() == (1,)
    assert writer.execute("select count(*) from membank.list_tool_rules(scope => %s)", (sb,)).fetchone() == (1,)


SINGLE_SCOPE_CALLS = {
    # call: (statement, params built from (scope json, memory name))
    "create_memory": ("select membank.create_memory(scope => %(s)s, fact => 'likes rain')", ()),
    "get_memory": ("select membank.get_memory(name => %(n)s, scope => %(s)s)", ()),
    "list_memories": ("select * from membank.list_memories(scope => %(s)s)", ()),
    "update_memory": ("select membank.update_memory(name => %(n)s, fact => 'likes a lot of rain', scope => %(s)s)",
                      ()),
    "list_revisions": ("select * from membank.list_revisions(name => %(n)s, scope => %(s)s)", ()),
    "get_revision": ("select membank.get_revision(name => %(n)s, revision => 1, scope => %(s)s)", ()),
    "rollback_memory": ("select membank.rollback_memory(name => %(n)s, revision => 1, scope => %(s)s)", ()),
    "retrieve_memories": ("select * from membank.retrieve_memories(scope => %(s)s, query_text => 'rain')", ()),
    "retrieve_memories (filters)": ("select * from membank.retrieve_memories(scope => %(s)s, query_text => 'rain',"
                                    " topics => '{USER_PREFERENCES}', memory_type => 'NATURAL_LANGUAGE')", ()),
    "append_events": ("select membank.append_events(scope => %(s)s, session_id => 's',"
                      " events => '[{\"event_id\": \"e1\", \"author\": \"user\", \"text\": \"rain\","
                      " \"timestamp\": \"2023-05-24T10:00:00Z\"}]')", ()),
    "list_events": ("select * from membank.list_events(scope => %(s)s, session_id => 's')", ()),
    "add_messages": ("select membank.add_messages(scope => %(s)s, messages => '[{\"role\": \"user\","
                     " \"content\": \"I like rain\"}]')", ()),
    "ingest_events": ("select membank.ingest_events(scope => %(s)s, stream_id => 'st', events => '[{\"event_id\":"
                      " \"x1\", \"author\": \"user\", \"text\": \"rain\", \"timestamp\": \"2023-05-24T10:00:00Z\"}]')",
                      ()),
    "generate_memories": ("select membank.generate_memories(scope => %(s)s, facts => '[\"likes puddles\"]')", ()),
    "list_operations": ("select * from membank.list_operations(scope => %(s)s)", ()),
    "retrieve_profiles": ("select membank.retrieve_profiles(scope => %(s)s)", ()),
    "create_tool_rule": ("select membank.create_tool_rule(scope => %(s)s, tool_name => 'sh', pattern => 'ls .*',"
                         " decision => 'ALLOW')", ()),
    "list_tool_rules": ("select * from membank.list_tool_rules(scope => %(s)s)", ()),
    "check_tool_permission": ("select membank.check_tool_permission(scope => %(s)s, project_id => 'p',"
                              " tool_name => 'sh', command => 'ls -la')", ()),
    "set_exempt_tools": ("select membank.set_exempt_tools(scope => %(s)s, tools => '{cat}')", ()),
    "list_tool_rule_changes": ("select * from membank.list_tool_rule_changes(scope => %(s)s)", ()),
    "list_tool_decisions": ("select * from membank.list_tool_decisions(scope => %(s)s)", ()),
    "build_context": ("select membank.build_context(scopes => %(s)s, session_id => 's', query_text => 'rain')", ()),
    "evidence_verdicts": ("select * from membank.evidence_verdicts(scopes => %(s)s, session_id => 's',"
                          " expected => array[%(n)s])", ()),
    "delete_memory": ("select membank.delete_memory(name => %(n)s, scope => %(s)s)", ()),
    "erase_scope": ("select membank.erase_scope(scope => %(s)s)", ()),
}


def test_build_context_on_the_cluster(cl):
    a, b, w1, w2 = cl.two_scopes("ctx")
    writer = cl.login("membank_writer")
    sa, sb = json.dumps(a), json.dumps(b)
    writer.execute("select membank.create_memory(scope => %s, fact => 'User keeps bees')", (sa,))
    writer.execute("select membank.create_memory(scope => %s, fact => 'User keeps goats')", (sb,))
    writer.execute("select membank.append_events(scope => %s, session_id => 's', events => %s)",
                   (sa, Jsonb([{"event_id": "c1", "author": "user", "text": "How are my bees?",
                                "timestamp": "2023-05-24T10:00:00Z"}])))
    log = calls_on(writer)
    rows, ports = log.during("select membank.build_context(scopes => %s, session_id => 's', query_text => 'keeps')",
                             (sa,))
    text = rows[0][0]["text"]
    assert ports == {w1} and "User keeps bees" in text and "How are my bees?" in text and "goats" not in text
    rows, ports = log.during("select membank.build_context(scopes => %s, query_text => 'keeps')",
                             (json.dumps([a, b]),))
    assert ports == {w1, w2}
    assert "User keeps bees" in rows[0][0]["text"] and "User keeps goats" in rows[0][0]["text"]


@pytest.mark.parametrize("worker_index", [0, 1])
def test_every_single_scope_call_touches_exactly_its_worker(cl, worker_index):
    """Each call's shard commands all go to the one worker holding the scope (on either worker)."""
    port = sorted(w.port for w in cl.cluster.workers)[worker_index]
    scope = cl.scope_on(port, f"every{worker_index}")
    admin = cl.login("membank_admin")
    log = calls_on(admin)
    s = json.dumps(scope)
    name = str(admin.execute("select (membank.create_memory(scope => %s, fact => 'likes rain',"
                             " topics => '{USER_PREFERENCES}')).name", (s,)).fetchone()[0])
    wrong = {}
    for call, (query, _) in SINGLE_SCOPE_CALLS.items():
        _, ports = log.during(query, {"s": s, "n": name})
        if ports != {port}:
            wrong[call] = sorted(ports)
    assert wrong == {}


def test_retrieval_settings_are_citus_only(cl):
    """On the cluster: the deployment flag is on and retrieval plans per call, on every node."""
    signature = "'membank.retrieve_memories'::regproc"
    probe = ("select membank_private.distributed()::text || ' ' || coalesce(array_to_string(proconfig, ','), '')"
             f" from pg_proc where oid = {signature}")
    got = cl.admin.execute(probe).fetchone()[0]
    assert got.startswith("true ") and "plan_cache_mode=force_custom_plan" in got
    on_workers = cl.admin.execute("select result from run_command_on_workers(%s)", (probe,)).fetchall()
    assert [r[0].startswith("true ") and "plan_cache_mode=force_custom_plan" in r[0] for r in on_workers] == [
        True, True]


@pytest.fixture
def fresh(citus_database):
    """A Cluster view of a distributed database of this test's own: its state is that of a fresh bank (the job
    queue, the operations), as on the single server a test compares it with."""
    from membank import distribute, migrate

    migrate.upgrade(citus_database.url)
    distribute.distribute(citus_database.url)
    c = Cluster(citus_database.url, citus_database.name, citus_database.cluster)
    try:
        yield c
    finally:
        c.close()


def test_the_role_matrix_on_the_cluster(fresh, superuser, login, objects):
    """Every public function as every membank role (real logins): 42501 exactly where the grant table says, and
    every call's exact outcome (success or SQLSTATE) the same as on one server (the ``objects`` of
    tests/test_role_matrix.py on this session's single server; the cluster's bank is as fresh)."""
    import test_role_matrix as rm
    from conftest import connect_as

    cl = fresh
    single = rm.exact_matrix(lambda who: connect_as(login(*([who] if who else []))[1]), rm.routines(superuser),
                             objects)

    functions, contains = rm.grant_table()
    admin = cl.login("membank_admin")
    scope = json.dumps(json.loads(rm.SCOPE))
    from psycopg.rows import dict_row

    su = psycopg.connect(cl.url, autocommit=True, row_factory=dict_row)
    try:
        memory = su.execute("select (membank.create_memory(scope => %s::jsonb, fact => 'f')).name::text as n",
                            (scope,)).fetchone()["n"]
        operation = su.execute("select membank.generate_memories(scope => %s::jsonb, facts => %s)::text as n",
                               (scope, Jsonb(["the user likes tea"]))).fetchone()["n"]
        rule = su.execute("select (membank.create_tool_rule(scope => %s::jsonb, tool_name => 'sh',"
                          " pattern => 'ls .*', decision => 'ALLOW')).id::text as n", (scope,)).fetchone()["n"]
        su.execute("select membank.create_profile_schema('p', %s::jsonb) where not exists"
                   " (select from membank.list_profile_schemas() where schema_id = 'p')",
                   (rm.ARGUMENTS["memory_schema"],))
        # The session the one-server matrix names ('s'); the module's other tests use other ids.
        su.execute("select membank.create_session(app_name => 'a', user_id => 'u', session_id => 's')"
                   " where not exists (select from membank.list_sessions(app_name => 'a', user_id => 'u') as s"
                   " where s ->> 'id' = 's')")
        tenant = f"membank_citus_{uuid.uuid4().hex[:10]}"
        su.execute(f'create role "{tenant}" login')
        cl.roles.append(tenant)
        cluster_objects = {"memory": memory, "operation": operation, "rule": rule, "tenant": tenant}
        found = rm.routines(su)
    finally:
        su.close()
    del admin
    mismatches = []
    for who in [*rm.ROLES, None]:
        c = cl.login(*([who] if who else []))
        c.row_factory = dict_row
        c.execute("set membank.lock_timeout = '2s'")
        may = rm.allowed(who, functions, contains) if who else set()
        for routine in found:
            statement, params = rm.call_for(routine, cluster_objects)
            got = rm.exact_outcome(c, routine, statement, params)
            expected = "42501" if routine["name"] not in may else single[f"{who or 'no membank role'}: "
                                                                          f"{routine['signature']}"]
            if got != expected:
                mismatches.append(f"{who}: {routine['signature']}: one server {expected}, cluster {got}")
    assert mismatches == []


def test_a_bound_role_reads_only_its_scope_on_the_cluster(cl):
    a, b, w1, _ = cl.two_scopes("bound")
    writer = cl.login("membank_writer")
    writer.execute("select membank.create_memory(scope => %s, fact => 'a: likes figs')", (json.dumps(a),))
    writer.execute("select membank.create_memory(scope => %s, fact => 'b: likes figs')", (json.dumps(b),))
    tenant = cl.login("membank_writer")
    role = tenant.execute("select current_user").fetchone()[0]
    cl.admin.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (role, json.dumps(a)))
    log = calls_on(tenant)
    rows, ports = log.during("select fact from membank.retrieve_memories(scope => %s, query_text => 'figs')",
                             (json.dumps(a),))
    assert fact_list(rows) == ["a: likes figs"] and ports == {w1}
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        tenant.execute("select * from membank.retrieve_memories(scope => %s, query_text => 'figs')",
                       (json.dumps(b),))
    # list_scopes (LangGraph's prefix search) names only the bound scope; an unrestricted login names both
    listed = "select scope from membank.list_scopes(scope_pattern => '{}')"
    assert [r[0] for r in tenant.execute(listed).fetchall()] == [a]
    assert {json.dumps(a), json.dumps(b)} <= {json.dumps(r[0]) for r in writer.execute(listed).fetchall()}


def scope_fingerprint(admin: psycopg.Connection, scope: dict) -> list[tuple]:
    """Every row a scope holds, per distributed table: (table, count, md5 of the rows' text), read on one shard."""
    from psycopg import sql

    from membank import distribute

    scope_id = admin.execute("select md5(%s::jsonb::text)::uuid", (json.dumps(scope),)).fetchone()[0]
    out = []
    for table in distribute.DISTRIBUTED:
        out.append((table, *admin.execute(sql.SQL(
            "select count(*), md5(coalesce(string_agg(x::text, '|' order by x::text), ''))"
            " from membank_private.{} as x where x.scope_id = %s").format(sql.Identifier(table)),
            (scope_id,)).fetchone()))
    return out


def call_every_routine(c: psycopg.Connection, params: dict) -> tuple[dict[str, str], str]:
    """Each public routine's canary call (tests/test_erasure.py) as ``c``: {signature: 'ok' or SQLSTATE}, and
    everything the calls returned or said, as one text."""
    from test_erasure import CANARY_CALLS

    outcomes, said = {}, []
    for signature, statement in sorted(CANARY_CALLS.items()):
        if statement is None:
            continue
        try:
            if statement.startswith("call"):
                said.append(json.dumps(c.execute(statement, params).fetchall(), default=str))
            else:
                with c.transaction(force_rollback=True):
                    said.append(json.dumps(c.execute(statement, params).fetchall(), default=str))
            outcomes[signature] = "ok"
        except psycopg.Error as err:
            outcomes[signature] = err.sqlstate or "?"
            said.append(f"{err.diag.message_primary} {err.diag.message_detail} {err.diag.message_hint}")
    return outcomes, "\n".join(said)


def test_a_bound_login_is_bound_on_every_node(cl):
    """A tenant bound to scope A, connected to each worker and to the coordinator, calls every public routine with
    scope B's scope, names and operation: each node answers as the coordinator does, every call that names B is
    refused (42501, or P0002 for a name), nothing of B is returned, and no row of B changes. It still works in A.
    (Each node gives the role its own OID: the binding records every node's.)"""
    a, b, w1, w2 = cl.two_scopes("node")
    secret = f"wombat{uuid.uuid4().hex[:8]}"  # in B's rows only, never in what the tenant passes
    su = cl.admin
    name = su.execute("select (membank.create_memory(scope => %s, fact => %s)).name::text",
                      (json.dumps(b), f"b keeps the quokka {secret}")).fetchone()[0]
    su.execute("select membank.append_events(scope => %s, session_id => 's', events => %s)",
               (json.dumps(b), Jsonb([{"event_id": "e1", "author": "user", "text": f"the quokka is mine {secret}",
                                               "timestamp": "2026-01-01T10:00:00Z"}])))
    operation = su.execute("select membank.generate_memories(scope => %s, facts => %s)::text",
                           (json.dumps(b), Jsonb([f"likes the quokka {secret}"]))).fetchone()[0]
    rule = su.execute("select (membank.create_tool_rule(scope => %s, tool_name => 'sh', pattern => 'ls',"
                      " decision => 'ALLOW')).id", (json.dumps(b),)).fetchone()[0]
    app, user = "node-app", b["user_id"]
    su.execute("select membank.create_session(app_name => %s, user_id => %s, session_id => 'adk',"
               " state => %s)", (app, user, Jsonb({"secret": secret})))
    params = {"scope": Jsonb(b), "name": name, "operation": operation, "session": "s", "canary": "quokka",
              "rule": rule, "app": app, "user": user, "adk_session": "adk"}

    tenant = cl.login("membank_writer")
    role = tenant.execute("select current_user").fetchone()[0]
    su.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (role, json.dumps(a)))
    before = scope_fingerprint(su, b)
    nodes = {"coordinator": cl.url, **{f"worker {w.port}": w.url(cl.name) for w in workers(cl)}}
    results = {}
    for node, url in nodes.items():
        with psycopg.connect(url.replace("postgresql://postgres@", f"postgresql://{role}@"), autocommit=True) as c:
            c.execute("set membank.lock_timeout = '2s'")
            outcomes, said = call_every_routine(c, params)
            assert secret not in said, f"{node} returned B's rows"
            results[node] = outcomes
            # The binding restricts, it does not break: the login works in its own scope through this node.
            mine = c.execute("select (membank.create_memory(scope => %s, fact => 'a works here')).name::text",
                             (json.dumps(a),)).fetchone()[0]
            assert c.execute("select (membank.get_memory(name => %s::text)).fact", (mine,)).fetchone() == (
                "a works here",)
    assert scope_fingerprint(su, b) == before
    assert results[f"worker {w1}"] == results["coordinator"] and results[f"worker {w2}"] == results["coordinator"]
    refused = {s: o for s, o in results["coordinator"].items() if o in ("42501", "P0002")}
    naming_b = [s for s, statement in __import__("test_erasure").CANARY_CALLS.items()
                if statement and any(k in statement for k in ("%(scope)s", "%(name)s", "%(operation)s", "%(app)s"))]
    assert sorted(set(naming_b) - set(refused)) == sorted(FILTERED_NOT_REFUSED)


# Calls that name scope B yet answer a tenant bound to A without refusing: they show the caller's own scopes only.
FILTERED_NOT_REFUSED = [
    "membank.list_scopes(jsonb,integer,jsonb)",  # lists the caller's bound scopes only: none that contain B
    "membank.list_sessions(text,text)",  # ADK's list_sessions: an empty list for a user the caller is not bound to
]


def test_a_binding_follows_the_role_on_every_worker(cl):
    """Each worker matches a bound role by its own OID of it (recorded at binding time): renamed, it stays bound; a
    worker with no recorded OID (one added after the binding) matches the recorded name; refresh_role_bindings
    records every worker's OID again. Bindings are changed on the coordinator only."""
    a, b, _, _ = cl.two_scopes("rename")
    tenant = cl.login("membank_writer")
    role = tenant.execute("select current_user").fetchone()[0]
    su = cl.admin
    su.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (role, json.dumps(a)))
    groups = sorted(r[0] for r in su.execute("select groupid::text from pg_dist_node where groupid <> 0").fetchall())
    recorded = su.execute("select worker_oids from membank_private.bound_roles as b join pg_roles as r"
                          " on r.oid = b.role_oid where r.rolname = %s", (role,)).fetchone()[0]
    assert sorted(recorded) == groups

    def reach_on_workers(login: str) -> list[tuple[bool, bool]]:
        """(may list A, may list B) through each worker, as ``login``."""
        out = []
        for w in workers(cl):
            with psycopg.connect(w.url(cl.name, user=login), autocommit=True) as c:
                may = []
                for scope in (a, b):
                    try:
                        c.execute("select * from membank.list_memories(scope => %s)", (json.dumps(scope),))
                        may.append(True)
                    except psycopg.errors.InsufficientPrivilege:
                        may.append(False)
                out.append(tuple(may))
        return out

    assert reach_on_workers(role) == [(True, False), (True, False)]
    # A worker that was never told of the binding (as one added by citus_add_node later): the recorded name.
    su.execute("update membank_private.bound_roles set worker_oids = '{}' where role_name = %s", (role,))
    assert reach_on_workers(role) == [(True, False), (True, False)]
    assert su.execute("select membank.refresh_role_bindings()").fetchone()[0] >= 1
    assert sorted(su.execute("select worker_oids from membank_private.bound_roles where role_name = %s",
                             (role,)).fetchone()[0]) == groups
    # Renamed (Citus renames it on every node): each node still knows it by its OID.
    renamed = role + "_renamed"
    su.execute(f'alter role "{role}" rename to "{renamed}"')  # generated names, not input
    cl.roles[cl.roles.index(role)] = renamed
    assert reach_on_workers(renamed) == [(True, False), (True, False)]
    # Bindings change on the coordinator only: a worker cannot see the other nodes' OIDs of a role.
    with psycopg.connect(workers(cl)[0].url(cl.name), autocommit=True) as c:
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            c.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (renamed, json.dumps(b)))


def test_calls_that_failed_only_on_citus_give_one_servers_results(cl):
    """The scoped views as an app role, unbind_role_from_scope, purge_memories_in_batches and reembed, through the
    coordinator: the rows and counts one server gives (each failed on the cluster with 42501, XX000 or 0A000)."""
    a, b, _, _ = cl.two_scopes("onlycitus")
    writer = cl.login("membank_writer")
    names = [writer.execute("select (membank.create_memory(scope => %s, fact => %s, metadata => %s)).name::text",
                            (json.dumps(a), f"a fact {n}", Jsonb({"batch": n % 2}))).fetchone()[0]
             for n in range(6)]
    writer.execute("select membank.update_memory(name => %s::text, fact => 'a fact 0, changed')", (names[0],))
    writer.execute("select membank.create_memory(scope => %s, fact => 'b fact')", (json.dumps(b),))
    # Scoped views: exactly the set scope, as the app's role.
    writer.execute("select membank.set_scope(scope => %s)", (json.dumps(a),))
    assert sorted(r[0] for r in writer.execute("select fact from membank.scoped_memories").fetchall()) == [
        "a fact 0, changed", "a fact 1", "a fact 2", "a fact 3", "a fact 4", "a fact 5"]
    assert writer.execute("select count(*), count(*) filter (where action = 'UPDATED')"
                          " from membank.scoped_revisions").fetchone() == (7, 1)
    assert writer.execute("select count(*) from membank.scoped_profiles").fetchone() == (0,)
    writer.execute("select membank.set_scope(scope => null)")
    assert writer.execute("select count(*) from membank.scoped_memories").fetchone() == (0,)
    # Bindings: unbind leaves the role restricted, to nothing.
    admin = cl.login("membank_admin")
    tenant = cl.login("membank_reader")
    role = tenant.execute("select current_user").fetchone()[0]
    assert admin.execute("select membank.bind_role_to_scope(role => %s, scope => %s)",
                         (role, json.dumps(a))).fetchone() == (True,)
    assert admin.execute("select membank.unbind_role_from_scope(role => %s, scope => %s)",
                         (role, json.dumps(a))).fetchone() == (True,)
    assert admin.execute("select membank.unbind_role_from_scope(role => %s, scope => %s)",
                         (role, json.dumps(a))).fetchone() == (False,)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        tenant.execute("select * from membank.list_memories(scope => %s)", (json.dumps(a),))
    # Purge in batches: the matching memories of one scope, batch by batch, and their text forgotten.
    purged = admin.execute("call membank.purge_memories_in_batches(scope => %s, metadata_filter => '{\"batch\": 1}',"
                           " batch_size => 2, purged => null)", (json.dumps(a),)).fetchone()[0]
    assert purged == 3
    assert sorted(r[0] for r in writer.execute("select fact from membank.list_memories(scope => %s)",
                                               (json.dumps(a),)).fetchall()) == ["a fact 0, changed", "a fact 2",
                                                                                 "a fact 4"]
    assert writer.execute("select count(*) from membank.list_memories(scope => %s)",
                          (json.dumps(b),)).fetchone() == (1,)


def test_reembed_queues_every_scopes_memories_on_the_cluster(citus_database):
    """reembed locks every memory (scope by scope on Citus: no FOR KEY SHARE over several shards) and queues each
    one with a fact for the new model, as on one server. Its own database: it changes the bank's model."""
    from membank import distribute, migrate

    db = citus_database
    migrate.upgrade(db.url)
    distribute.distribute(db.url)
    with db.connect() as c:
        for n in range(12):
            c.execute("select membank.create_memory(scope => %s, fact => %s)",
                      (json.dumps({"user_id": f"re{n % 4}"}), f"fact {n}"))
        c.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 3)")
        c.execute("select membank.claim_embedding_jobs(batch_size => 100)")
        assert c.execute("select membank.reembed(model_id => 'test/other', dimension => 4)").fetchone() == (12,)
        assert c.execute("select count(*), count(distinct scope_id) from membank_private.embedding_jobs"
                         " where retry_time <= now()").fetchone() == (12, 4)
        assert c.execute("select model_id, dimension from membank_private.embedding_config").fetchone() == (
            "test/other", 4)



def test_a_callers_datestyle_changes_no_time_argument_on_the_cluster(cl):
    """A caller's DateStyle 'SQL, DMY' changes no time argument of a call on the cluster, through the coordinator
    and through the other worker's own connection: Citus writes a routed statement's values as text in the
    calling session's style and the scope's worker reads them in its own (ISO, MDY), so 2027-01-05 sent as
    05/01/2027 arrived as May 1st, and a 13th or later as an error. Each call gives the rows of the same call
    under the default style: list_memories' created/updated bounds, list_events' window, create_memory's and
    update_memory's expire_time (read back as stored)."""
    from datetime import datetime, timedelta, timezone

    from test_citus_routing import attack_login

    a, _, w1, _ = cl.two_scopes("datestyle")
    other = next(w for w in workers(cl) if w.port != w1)
    sa = json.dumps(a)
    cl.admin.execute("select membank.append_events(scope => %s, session_id => 's1', events => %s)",
                     (sa, Jsonb([{"event_id": f"e{d}", "author": "user", "text": f"day {d}",
                                  "timestamp": f"2027-01-{d:02d}T10:00:00Z"} for d in (3, 5, 14)])))
    # the 5th and the 20th of a month ahead, which DMY and MDY read differently (or not at all)
    now = datetime.now(timezone.utc)
    expire_5 = (now.replace(day=1) + timedelta(days=40)).replace(day=5, hour=12, minute=0, second=0, microsecond=0)
    expire_20 = expire_5.replace(day=20)
    for node, writer in (("coordinator", cl.login("membank_writer")),
                         ("other worker", attack_login(cl, other.url(cl.name), "membank_writer"))):
        fact = f"kept via {node}"
        name = writer.execute("select (membank.create_memory(scope => %s, fact => %s, expire_time => %s)).name::text",
                              (sa, fact, expire_5)).fetchone()[0]
        calls = [
            ("select fact from membank.list_memories(scope => %s, created_before => %s, created_after => %s,"
             " updated_before => %s) where fact = %s",
             (sa, now + timedelta(days=2), now - timedelta(days=2), now + timedelta(days=2), fact)),
            ("select event_id from membank.list_events(scope => %s, session_id => 's1', start_time => %s,"
             " end_time => %s)", (sa, datetime(2027, 1, 4, tzinfo=timezone.utc),
                                   datetime(2027, 1, 13, tzinfo=timezone.utc))),
            ("select expire_time from membank.get_memory(name => %s::text)", (name,)),
        ]
        plain = [writer.execute(q, args).fetchall() for q, args in calls]
        assert plain == [[(fact,)], [("e5",)], [(expire_5,)]], (node, plain)
        writer.execute("set datestyle to 'SQL, DMY'")
        try:
            # binary results: psycopg cannot read SQL-style dates, and the values are what is compared
            assert [writer.execute(q, args, binary=True).fetchall() for q, args in calls] == plain, node
            created = writer.execute("select (membank.create_memory(scope => %s, fact => 'dmy', expire_time => %s))"
                                     ".expire_time", (sa, expire_20), binary=True).fetchone()[0]
            assert created == expire_20, node
            updated = writer.execute("select (membank.update_memory(name => %s::text, expire_time => %s))"
                                     ".expire_time", (name, expire_20), binary=True).fetchone()[0]
            assert updated == expire_20, node
        finally:
            writer.execute("reset datestyle")


def test_a_callers_datestyle_changes_no_purge_of_expired_memories_on_the_cluster(cl):
    """call purge_expired_memories under the caller's DateStyle 'SQL, DMY' purges the memories that expired an hour
    ago, as under the default style. The procedure keeps its caller's styles (its COMMITs forbid a SET clause), and
    each batch compared the scope's expire_time with the time it read, which Citus sent to the worker as text in
    the caller's style: on December 3rd, 03/12 arrived as March 12th and nothing expired since then was purged (from
    the 13th of a month, an error). Its batches are functions and run in the workers' styles. Time moves explicitly:
    the memories' expire_time and the coordinator's index of due work (121_due_work.sql) set an hour back."""
    a, _, _, _ = cl.two_scopes("purge-datestyle")
    sa = json.dumps(a)
    live = cl.admin.execute("select (membank.create_memory(scope => %s, fact => 'still here')).name",
                            (sa,)).fetchone()[0]
    names = [cl.admin.execute("select (membank.create_memory(scope => %s, fact => %s, ttl => '1 day')).name",
                              (sa, f"expires {n}")).fetchone()[0] for n in range(2)]
    cl.admin.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 hour'"
                     " where name = any(%s)", (names,))
    cl.admin.execute("update membank_private.due_scopes set due_time = statement_timestamp() - interval '1 hour'"
                     " where kind = 'expiry' and scope_id = md5(%s::jsonb::text)::uuid", (sa,))
    admin = cl.login("membank_admin")
    admin.execute("set datestyle to 'SQL, DMY'")
    assert admin.execute("call membank.purge_expired_memories()").fetchone() == (2,)
    assert cl.admin.execute("select array_agg(name) from membank_private.memories"
                            " where scope_id = md5(%s::jsonb::text)::uuid", (sa,)).fetchone()[0] == [live]
