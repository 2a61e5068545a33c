"""One scope, one worker, at every size: a census of every public function's shard commands on a real Citus cluster.

Every function and procedure of schema ``membank`` is enumerated from ``pg_proc`` (every overload, as the role
matrix does), so a new function cannot escape the census: it is either called here with one scope's arguments
(scope, scopes, a memory's name with that scope, the ADK app and user whose scope it is) and must send every shard
command to the one worker holding that scope, or it is named in ``NOT_ONE_SCOPE`` with the reason it spans scopes or
reads no scope by design. The shard commands are those ``citus.log_remote_commands`` reports as NOTICEs, caught by
psycopg's notice handler (``RemoteCommands``); each call runs in a transaction rolled back afterwards, so every call
sees the same scope.

The scopes hold 20, 200 and 2,001 memories with vectors and text: up to ``least(200, rerank_depth)`` memories
retrieval reads the scope once (scan_candidates), above it the vector list comes from the Hamming step and the text
list from text_candidates, and above 2,000 from MaxScore (text_candidates_maxscore); ``rerank_depth => 100`` on the
200-memory scope takes it through the non-scan path too. Each scope is loaded in bulk (``bulk_fill`` in
tests/citus_cluster.py: one ``INSERT ... SELECT``, the memories' own triggers writing revisions, queue and word
counts, then the vectors and the bank's own fold of the appended word counts).
"""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
from psycopg.rows import dict_row

import test_role_matrix as rm
from citus_cluster import bulk_fill
from test_citus import RemoteCommands
from test_citus_api import Cluster, bank  # noqa: F401 (the module's distributed bank)

pytestmark = pytest.mark.citus

SIZES = (20, 200, 2001)
DIM = 8

# Functions that do not act on one scope, by design, and why (every name must be a membank function).
NOT_ONE_SCOPE = {
    # bank-wide settings and reference tables (written on every node)
    "configure_embedding": "bank-wide setting (reference table)",
    "configure_ingestion": "bank-wide setting (reference table)",
    "configure_retention": "bank-wide setting (reference table)",
    "create_profile_schema": "profile schemas are bank-wide (reference table)",
    "update_profile_schema": "profile schemas are bank-wide (reference table)",
    "delete_profile_schema": "profile schemas are bank-wide (reference table)",
    "get_profile_schema": "profile schemas are bank-wide (reference table)",
    "list_profile_schemas": "profile schemas are bank-wide (reference table)",
    "bind_role_to_scope": "role bindings are reference tables, kept on every node",
    "unbind_role_from_scope": "role bindings are reference tables, kept on every node",
    "unrestrict_role": "role bindings are reference tables, kept on every node",
    "refresh_role_bindings": "reads every worker's role OIDs",
    "list_scope_bindings": "role bindings are reference tables",
    "scope_vector_index_plan": "plans every big scope's index, on every worker",
    "reembed": "queues every scope's memories again",
    "compact_scopes": "compacts many scopes, one at a time",
    "generate_due_streams": "sweeps every scope's due IngestEvents streams",
    "list_scopes": "names the scopes under a pattern, across every scope the caller may reach",
    "import_memory": "checks the old id in every scope, so that an import run again writes nothing twice",
    # the job queue and maintenance across scopes (docs/scale-out.md, Job queues and maintenance)
    "claim_embedding_jobs": "claims due jobs of any scope",
    "claim_generation_jobs": "claims due jobs of any scope",
    "store_embeddings": "stores vectors of any scope's memories (by name)",
    "fail_embedding_jobs": "fails jobs of any scope (by name)",
    "complete_generation_job": "a job by id, of any scope",
    "fail_generation_job": "a job by id, of any scope",
    "prepare_consolidation": "a job by id, of any scope",
    "embedding_backlog": "the queue of every scope",
    "generation_backlog": "the queue of every scope",
    "purge_expired_memories": "expired memories of every scope",
    "apply_retention": "revisions, operations and events past their window, of every scope",
}
# Functions that read no distributed table at all (no shard command, whatever the scope).
NO_SHARD = {"scope_id", "current_scope", "set_scope", "decompose_query", "decomposition_prompt",
            "default_min_relevance"}

# Extra calls beyond the one per signature: retrieval's other paths (vectors, filters, several queries, the
# non-scan path of a scope above rerank_depth) and build_context with a query.
EXTRA_CALLS = {
    "retrieve_memories (session neighbours)": "select * from membank.retrieve_memories(scope => %(s)s,"
                                              " query_text => 'tea rain', top_k => 5, neighbour_weight => 1)",
    "retrieve_memories (text + vector)": "select * from membank.retrieve_memories(scope => %(s)s,"
                                         " query_text => 'tea rain', query_embedding => %(v)s::real[], top_k => 5)",
    "retrieve_memories (vector only)": "select * from membank.retrieve_memories(scope => %(s)s,"
                                       " query_embedding => %(v)s::real[], top_k => 5)",
    "retrieve_memories (rerank_depth 100)": "select * from membank.retrieve_memories(scope => %(s)s,"
                                            " query_text => 'tea rain', query_embedding => %(v)s::real[],"
                                            " top_k => 5, rerank_depth => 100)",
    "retrieve_memories (filters)": "select * from membank.retrieve_memories(scope => %(s)s, query_text => 'tea rain',"
                                   " query_embedding => %(v)s::real[], topics => '{USER_PREFERENCES}',"
                                   " memory_type => 'NATURAL_LANGUAGE', metadata_filter => '{\"k\": \"x\"}',"
                                   " created_after => '2000-01-01Z', min_similarity => -1)",
    "retrieve_memories (several queries)": "select * from membank.retrieve_memories(scope => %(s)s,"
                                           " query_texts => array['tea', 'chess garden'],"
                                           " query_embeddings => array[%(v)s::real[], %(v)s::real[]])",
    "retrieve_memories (one scope in an array)": "select * from membank.retrieve_memories(scope => %(a)s,"
                                                 " query_text => 'tea rain', query_embedding => %(v)s::real[])",
    "build_context (query, session)": "select membank.build_context(scopes => %(s)s, session_id => 's',"
                                      " query_text => 'tea rain', query_embedding => %(v)s::real[])",
}


def query_vector() -> list[float]:
    return [((k * 37) % 11 - 5) / 5 for k in range(DIM)]


@pytest.fixture(scope="module")
def census(bank):  # noqa: F811 (the imported fixture)
    """The module's cluster with scopes of each size (on alternating workers) and the objects calls name."""
    url, name, cluster = bank
    cl = Cluster(url, name, cluster)
    try:
        cl.admin.execute("select membank.configure_embedding(model_id => 'test/m', dimension => %s)", (DIM,))
        ports = sorted(w.port for w in cluster.workers)
        scopes = {}
        for i, size in enumerate(SIZES):
            port = ports[i % 2]
            for n in range(500):
                scope = {"app_name": "census", "user_id": f"u{size}-{n}"}
                if cl.worker_of(scope) == port:
                    break
            bulk_fill(cl.admin, scope, size, "test/m", DIM)
            s = json.dumps(scope)
            objects = {"port": port, "scope": scope, "s": s, "a": json.dumps([scope]), "v": query_vector()}
            objects["memory"] = str(cl.admin.execute(
                "select name from membank_private.memories where scope_id = md5(%s::jsonb::text)::uuid"
                " order by name limit 1", (s,)).fetchone()[0])
            objects["operation"] = str(cl.admin.execute(
                "select membank.generate_memories(scope => %s, facts => '[\"likes tea\"]')", (s,)).fetchone()[0])
            objects["rule"] = str(cl.admin.execute(
                "select (membank.create_tool_rule(scope => %s, tool_name => 'sh', pattern => 'ls .*',"
                " decision => 'ALLOW')).id", (s,)).fetchone()[0])
            cl.admin.execute("select membank.create_session(app_name => 'census', user_id => %s, session_id => 's')",
                             (scope["user_id"],))
            cl.admin.execute("select membank.append_events(scope => %s, session_id => 's', events =>"
                             " '[{\"event_id\": \"e0\", \"author\": \"user\", \"text\": \"tea in the rain\","
                             " \"timestamp\": \"2023-05-24T10:00:00Z\"}]')", (s,))
            scopes[size] = objects
        cl.admin.execute("select membank.create_profile_schema('p', %s::jsonb)", (rm.ARGUMENTS["memory_schema"],))
        counts = {size: cl.admin.execute("select count(*) from membank_private.memories where scope_id ="
                                         " md5(%s::jsonb::text)::uuid", (o["s"],)).fetchone()[0]
                  for size, o in scopes.items()}
        yield cl, scopes, counts
    finally:
        cl.close()


def one_scope_call(routine: dict, objects: dict) -> tuple[str, dict]:
    """The statement calling ``routine`` on the scope of ``objects``: every scope-naming argument given (scope,
    scopes, the ADK app and user), a memory's name with its scope, other arguments as the role matrix gives them."""
    scope = objects["scope"]
    values = {"scope": objects["s"], "scopes": objects["s"], "app_name": scope["app_name"],
              "user_id": scope["user_id"], "name": objects["memory"], "revision": "1",
              "get_operation.name": objects["operation"], "id": objects["rule"], "session_id": "s",
              "create_memory.fact": "likes tea", "update_memory.fact": "likes tea a lot",
              "create_session.session_id": "s2",
              # a procedure commits its batches (no rollback): a filter no memory matches keeps the scope whole
              "purge_memories_in_batches.metadata_filter": '{"census": "matches nothing"}'}
    parts, params = [], {}
    for arg, typ, has_default in routine["args"]:
        key = f"{routine['name']}.{arg}"
        if key in values:
            value = values[key]
        elif arg in values:
            value = values[arg]
        elif has_default:
            continue
        else:
            value = rm.ARGUMENTS[key] if key in rm.ARGUMENTS else rm.ARGUMENTS[arg]
        parts.append(f"{arg} => %({arg})s::{typ}")
        params[arg] = value
    verb = "call" if routine["kind"] == "p" else "select * from"
    return f"{verb} membank.{routine['name']}({', '.join(parts)})", params


def ports_of(log: RemoteCommands, c: psycopg.Connection, statement: str, params,
             procedure: bool = False) -> set[int] | str:
    """The worker ports the call sent shard commands to, its effects rolled back (a procedure, which commits,
    runs on its own); its SQLSTATE if it failed."""
    try:
        if procedure:
            return log.during(statement, params)[1]
        with c.transaction(force_rollback=True):
            c.execute("set local citus.log_remote_commands to on")
            log.ports, log.commands = [], []
            c.execute(statement, params).fetchall()
    except psycopg.Error as err:
        return f"failed {err.sqlstate}: {str(err).splitlines()[0]}"
    return set(log.ports)


def test_the_census_covers_every_public_function(census):
    cl, _, _ = census
    names = {r["name"] for r in rm.routines(cl.admin.cursor(row_factory=dict_row))}
    assert set(NOT_ONE_SCOPE) - names == set() and NO_SHARD - names == set()


@pytest.mark.parametrize("size", SIZES)
def test_every_single_scope_call_sends_its_shard_commands_to_one_worker(census, size):
    """At 20, 200 and 2,001 memories, every public function called on one scope (and retrieval's other paths)
    sends shard commands only to the worker holding the scope; the functions that read no table send none."""
    cl, scopes, counts = census
    objects = scopes[size]
    assert counts[size] == size  # the load is the size it says
    caller = cl.login("membank_admin", "membank_worker")
    caller.execute("set membank.lock_timeout = '5s'")
    log = RemoteCommands(caller)
    wrong, seen = {}, 0
    for routine in rm.routines(cl.admin.cursor(row_factory=dict_row)):
        if routine["name"] in NOT_ONE_SCOPE:
            continue
        statement, params = one_scope_call(routine, objects)
        got = ports_of(log, caller, statement, params, procedure=routine["kind"] == "p")
        expected = set() if routine["name"] in NO_SHARD else {objects["port"]}
        seen += 1
        if got != expected:
            wrong[routine["signature"]] = got if isinstance(got, str) else sorted(got)
    for call, statement in EXTRA_CALLS.items():
        got = ports_of(log, caller, statement, objects)
        if got != {objects["port"]}:
            wrong[call] = got if isinstance(got, str) else sorted(got)
    assert wrong == {}
    assert seen >= 40  # the census called the catalog's functions, not an empty list


def test_retrieval_over_scopes_of_one_worker_touches_only_that_worker(census):
    """Several scopes in one call (a JSON array): only the workers holding them get shard commands: the 20- and
    2,001-memory scopes (one worker) from that worker alone, with results from both; with the 200-memory scope of
    the other worker added, from both workers."""
    cl, scopes, _ = census
    same, other = (scopes[20], scopes[2001]), scopes[200]
    assert same[0]["port"] == same[1]["port"] != other["port"]
    reader = cl.login("membank_reader")
    log = RemoteCommands(reader)
    v = query_vector()
    retrieve = ("select scope from membank.retrieve_memories(scope => %s, query_text => 'tea rain',"
                " query_embedding => %s::real[], top_k => 30)")
    rows, ports = log.during(retrieve, (json.dumps([o["scope"] for o in same]), v))
    assert ports == {same[0]["port"]}
    # every memory of the 20 has a vector, so 30 rows hold both scopes'
    assert len(rows) == 30
    assert {json.dumps(r[0], sort_keys=True) for r in rows} == {json.dumps(o["scope"], sort_keys=True) for o in same}
    _, ports = log.during("select * from membank.retrieve_memories(scope => %s, query_texts => array['tea', 'chess'],"
                          " query_embeddings => array[%s::real[], %s::real[]], topics => '{USER_PREFERENCES}')",
                          (json.dumps([o["scope"] for o in same]), v, v))
    assert ports == {same[0]["port"]}
    # min_relevance off: bulk_fill's vectors follow the memories' random names, so the default threshold kept
    # every memory out in some runs (an empty text), whatever the routing
    rows, ports = log.during("select membank.build_context(scopes => %s, query_text => 'tea rain',"
                             " query_embedding => %s::real[], min_relevance => null)",
                             (json.dumps([o["scope"] for o in same]), v))
    assert ports == {same[0]["port"]} and "User note" in rows[0][0]["text"]
    _, ports = log.during(retrieve, (json.dumps([o["scope"] for o in (*same, other)]), v))
    assert ports == {same[0]["port"], other["port"]}
    # min_relevance gates the merged top k as a whole, as on one server: at the best row's relevance every row
    # stays (each scope gated by its own best would drop the scope whose best is lower), just above it none
    gated = ("select scope, relevance from membank.retrieve_memories(scope => %s, query_text => 'tea rain',"
             " query_embedding => %s::real[], top_k => 30, min_relevance => %s)")
    both = json.dumps([o["scope"] for o in same])
    ungated = reader.execute(gated, (both, v, None)).fetchall()
    best = max(r[1] for r in ungated)
    best_of = {json.dumps(o["scope"], sort_keys=True): max(r[1] for r in ungated if r[0] == o["scope"]) for o in same}
    assert min(best_of.values()) < best  # one scope's rows are all under the other's best
    assert reader.execute(gated, (both, v, best)).fetchall() == ungated
    assert reader.execute(gated, (both, v, min(1.0, best * 1.000001 + 1e-12))).fetchall() == []


def shard_commands(commands: list[str]) -> dict[str, int]:
    """The logged commands of one call by kind: statements on shards, and the transaction control around them."""
    kinds = {"statements": 0, "begin": 0, "commit": 0, "two-phase": 0}
    for line in commands:
        text = line.split(": ", 1)[1].removeprefix("issuing ").upper()
        if text.startswith("BEGIN"):
            kinds["begin"] += 1
        elif text.startswith(("PREPARE TRANSACTION", "COMMIT PREPARED")):
            kinds["two-phase"] += 1
        elif text.startswith("COMMIT"):
            kinds["commit"] += 1
        else:
            kinds["statements"] += 1
    return kinds


# Shard statements per call through the coordinator (bench/citus.py --mode route prints the same), by scope size.
# A change that adds a statement to these paths adds a coordinator-to-worker round trip on the cluster: update the
# figure here and in docs/benchmarks.md when it is meant.
# create_memory: 1, its INSERT (the scope's lock is taken by the INSERT's trigger on the shard, not by a statement of
# its own before it: 2 until 2026-12-02).
CREATE_STATEMENTS = {20: 1, 200: 1, 2001: 1}
# The create before each retrieval adds a memory: the 200-memory scope's retrieval takes the path of a scope above
# 200 (Hamming step, then the full-text index), the 2,001's MaxScore (and the per-scope HNSW check on its worker).
# retrieve_memories: one statement routed to the scope's shard of scope_locks (retrieve_on_shard) reads the scope's
# counts and ranks it there, reading the shards by name: up to 200 memories the scan (4 until 2026-12-03: the count,
# the scan, the signals, the ranking), above it the vector list (Hamming step or the scope's HNSW index) and the text
# list (MaxScore above 2,000) as well (5 until 2026-12-03: the count, the vector list, the text query, the text list,
# the signals and ranking; 6 and 7 before that; 6, 8 and 9 until 2026-12-02).
RETRIEVE_STATEMENTS = {20: 1, 200: 1, 2001: 1}


@pytest.mark.parametrize("size", SIZES)
def test_shard_commands_per_call_for_create_and_retrieve(census, size):
    """As app logins, one call each (autocommit, as clients call): create_memory sends its statements to the
    scope's worker in one transaction committed in one phase (no PREPARE TRANSACTION: one worker written), and
    retrieve_memories (text + vector) sends the number of statements the table above says, all to that worker."""
    cl, scopes, _ = census
    objects = scopes[size]
    writer, reader = cl.login("membank_writer"), cl.login("membank_reader")
    got = {}
    for label, conn, statement in (
            ("create", writer, "select membank.create_memory(scope => %(s)s, fact => 'likes tea in the rain')"),
            ("retrieve", reader, EXTRA_CALLS["retrieve_memories (text + vector)"])):
        log = RemoteCommands(conn)
        conn.execute(statement, objects).fetchall()  # the session's connections to the workers are open
        _, ports = log.during(statement, objects)
        assert ports == {objects["port"]}, (label, log.commands)
        got[label] = shard_commands(log.commands)
    assert got["create"] == {"statements": CREATE_STATEMENTS[size], "begin": 1, "commit": 1, "two-phase": 0}, got
    assert got["retrieve"]["two-phase"] == 0 and got["retrieve"]["statements"] == RETRIEVE_STATEMENTS[size], got


ROW = ("name, fact, distance, similarity, text_rank, vector_rank, text_match_rank, score, matched_signals, degraded,"
       " relevance")


@pytest.mark.parametrize("variant", [
    {"texts": ["tea rain"], "queries": True},
    {"texts": ["tea rain"], "queries": False},
    {"texts": ["tea", "chess garden"], "queries": True, "k": 6},
    {"texts": ["tea rain"], "queries": True, "topics": ["USER_PREFERENCES"], "metadata_filter": '{"k": "x"}',
     "min_similarity": -0.5},
    {"texts": ["tea rain"], "queries": True, "min_relevance": 0.0, "fusion": "convex", "k": 4},
], ids=["hybrid", "text", "several queries", "filters", "convex, min_relevance"])
@pytest.mark.parametrize("size", [20, 2001])
def test_a_scopes_routed_retrieval_ranks_as_the_statements_through_citus(census, variant, size):
    """A scope is retrieved by one statement routed to its shard (retrieve_on_shard, reading the shards by name):
    up to 200 memories by the scan, above by the Hamming step or the scope's HNSW index and the GIN index (MaxScore
    above 2,000; with filters the statements through Citus); its rows and every value equal those of the one-server
    statements run through Citus on the coordinator (hybrid_candidates per query, query_signals, rank_candidates),
    as main ran them."""
    cl, scopes, _ = census
    objects = scopes[size]
    c = cl.admin
    v = objects["v"]
    texts, k = variant["texts"], variant.get("k", 5)
    queries = [list(v) for _ in texts] if variant["queries"] else [None] * len(texts)
    args = {"s": objects["s"], "texts": texts, "queries": [json.dumps(q) if q else None for q in queries], "k": k,
            "depth": max(5 * k, 50), "topics": variant.get("topics"), "mf": variant.get("metadata_filter"),
            "ms": variant.get("min_similarity"), "mr": variant.get("min_relevance"),
            "fusion": variant.get("fusion", "rrf")}
    weights = (0.7, 0.3) if args["fusion"] == "convex" else (1.0, 1.0)
    args["wv"], args["wt"] = weights
    query_args = ("query_texts => %(texts)s::text[], query_embeddings => %(qe)s::real[]" if len(texts) > 1 else
                  "query_text => %(t)s, query_embedding => %(qe)s::real[]")
    got = c.execute(
        f"select {ROW} from membank.retrieve_memories(scope => %(s)s, {query_args}, top_k => %(k)s,"
        " topics => %(topics)s, metadata_filter => %(mf)s::jsonb, min_similarity => %(ms)s,"
        " min_relevance => %(mr)s, fusion => %(fusion)s)",
        {**args, "t": texts[0], "qe": (queries if len(texts) > 1 else queries[0]) if variant["queries"] else None,
         }).fetchall()
    c.execute("set plan_cache_mode to force_custom_plan")  # as retrieve_memories runs on Citus
    try:
        lists = c.execute(
            "select array_agg(q.i), array_agg(h.name), array_agg(h.distance), array_agg(h.vector_rank),"
            " array_agg(h.text_rank), array_agg(h.text_match_rank), array_agg(h.text_tiebreak), array_agg(h.score)"
            " from unnest(%(texts)s::text[], %(queries)s::membank_extensions.vector[]) with ordinality"
            "  as q (query_text, query, i)"
            " cross join lateral membank_private.hybrid_candidates(array[md5(%(s)s::jsonb::text)::uuid], q.query,"
            "  q.query_text, %(depth)s, 400, %(mf)s::jsonb, %(topics)s::text[], null, null, null, %(fusion)s,"
            "  %(wv)s, %(wt)s, 10) as h", args).fetchone()
        signals = c.execute("select idf_total, unknown_share from membank_private.query_signals(%(texts)s::text[],"
                            " array[md5(%(s)s::jsonb::text)::uuid])", args).fetchone()
        documents = c.execute("select membank_private.scope_documents(array[md5(%(s)s::jsonb::text)::uuid])",
                              args).fetchone()[0]
        distances = [d for d in (lists[2] or []) if d is not None]
        want = c.execute(
            f"select {ROW} from membank_private.rank_candidates(%s::bigint[], %s::uuid[], %s::float8[], %s::int[],"
            " %s::real[], %s::int[], %s::real[], %s::float8[], %s::membank_extensions.vector[],"
            " array[md5(%s::jsonb::text)::uuid], array[%s::jsonb], %s::text[], %s, %s, %s, 10, %s, %s, %s, %s, %s)",
            (*lists, args["queries"], args["s"], args["s"], texts, k, args["depth"], args["ms"],
             1 - min(distances) if distances else None, signals[0], signals[1], min(documents + 1, 100),
             args["mr"])).fetchall()
    finally:
        c.execute("reset plan_cache_mode")
    assert got and got == want


def test_a_forged_scope_count_memo_is_not_taken(census):
    """The per-statement memo of a scope's document count is a setting any role can set: a malformed count (here
    negative, which made ln() fail) set in the same statement as the retrieval is ignored, not used."""
    cl, scopes, _ = census
    reader = cl.login("membank_reader")
    scope = json.dumps(scopes[20]["scope"])
    honest = reader.execute("select name from membank.retrieve_memories(scope => %s, query_text => 'tea rain',"
                            " top_k => 5)", (scope,)).fetchall()
    forged = reader.execute(
        "select set_config('membank.scope_counts', md5(statement_timestamp()::text || membank.scope_id(%s::jsonb)::text)"
        " || '|-5|false|false', true) as forged, (select array_agg(r.name) from membank.retrieve_memories(scope => %s,"
        " query_text => 'tea rain', top_k => 5) as r) as names", (scope, scope)).fetchone()
    assert forged[0].endswith("|-5|false|false") and forged[1] == [r[0] for r in honest]


def test_update_and_delete_send_no_revision_context_when_there_is_none(census):
    """update_memory and delete_memory with a scope and no labels or sources send the scope's worker its lock with
    the row's read (one statement) and the write, and no SET LOCAL of the revision context (each was a shard command
    of its own); with labels the context is still carried to the worker, and the revision written there holds them."""
    cl, scopes, _ = census
    objects = scopes[20]
    writer = cl.login("membank_writer")
    names = [str(writer.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                (objects["s"], f"context test {n} likes tea")).fetchone()[0]) for n in range(3)]
    log = RemoteCommands(writer)
    got = {}
    for label, statement, params in (
            ("update", "select membank.update_memory(%s, fact => 'context test likes coffee', scope => %s)",
             (names[0], objects["s"])),
            ("delete", "select membank.delete_memory(%s, scope => %s)", (names[1], objects["s"]))):
        _, ports = log.during(statement, params)
        assert ports == {objects["port"]}, (label, log.commands)
        assert not [c for c in log.commands if "SET LOCAL" in c.upper()], (label, log.commands)
        got[label] = shard_commands(log.commands)
    # the scope's lock and the row's read are one statement (two until 2026-12-02), then the write
    assert got == {"update": {"statements": 2, "begin": 1, "commit": 1, "two-phase": 0},
                   "delete": {"statements": 2, "begin": 1, "commit": 1, "two-phase": 0}}, got
    log.during("select membank.update_memory(%s, fact => 'context test likes jazz', scope => %s,"
               " labels => '{\"why\": \"test\"}')", (names[2], objects["s"]))
    assert any("revision_context" in c for c in log.commands), log.commands
    revisions = cl.admin.execute(
        "select revision, labels from membank_private.memory_revisions where scope_id = md5(%s::jsonb::text)::uuid"
        " and memory_name = any(%s::uuid[]) order by memory_name, revision", (objects["s"], names)).fetchall()
    by_name = {}
    for name in names:
        by_name[name] = cl.admin.execute(
            "select array_agg(labels order by revision) from membank_private.memory_revisions"
            " where scope_id = md5(%s::jsonb::text)::uuid and memory_name = %s::uuid",
            (objects["s"], name)).fetchone()[0]
    assert by_name == {names[0]: [{}, {}], names[1]: [{}, {}], names[2]: [{}, {"why": "test"}]}, revisions


def test_get_memory_with_scope_reads_the_bindings_once(census):
    """get_memory with a scope asks whether any role is bound (a read of the reference table bound_roles, on the
    coordinator) once, for the scope named; the row found must be of that scope, so it is not asked again."""
    cl, scopes, _ = census
    objects = scopes[20]
    reader = cl.login("membank_reader")
    local: list[str] = []
    reader.add_notice_handler(lambda d: local.append(d.message_primary or ""))
    reader.execute("set citus.log_remote_commands to on")
    try:
        row = reader.execute("select (membank.get_memory(%s, %s)).name", (objects["memory"], objects["s"])).fetchone()
    finally:
        reader.execute("reset citus.log_remote_commands")
    assert str(row[0]) == objects["memory"]
    assert len([m for m in local if "executing the command locally" in m and "bound_roles" in m]) == 1, local


def test_the_memories_triggers_write_the_shards_without_citus_statements(census):
    """On the scope's worker (a direct connection, where a call's statements on distributed tables run as Citus's
    local commands), the memories triggers of create, update and delete write the revision, the embedding queue, the
    word and document counts and the retired sources on the colocated shards by name, with no statement planned by
    Citus (each was a routed statement of its own, 0.3 to 0.6 ms), and take the scope's write lock on its shard: an
    update or delete takes it through Citus once (its own first statement), not again from the trigger, and a create
    only in its trigger. The scope's word counts then match its live memories' words."""
    cl, scopes, _ = census
    objects = scopes[20]
    cl.login("membank_writer")
    role = cl.roles[-1]
    worker = next(w for w in cl.cluster.workers if w.port == objects["port"])
    local: list[str] = []
    with psycopg.connect(worker.url(cl.name).replace("postgresql://postgres@", f"postgresql://{role}@"),
                         autocommit=True) as direct:
        direct.add_notice_handler(lambda d: local.append(d.message_primary or ""))
        direct.execute("set citus.log_local_commands to on")
        name = direct.execute("select (membank.create_memory(scope => %s, fact => 'counts violin marathon'))"
                              ".name", (objects["s"],)).fetchone()[0]
        direct.execute("select membank.update_memory(%s, fact => 'counts cello marathon', scope => %s)",
                       (str(name), objects["s"]))
        gone = direct.execute("select (membank.create_memory(scope => %s, fact => 'counts harp'))"
                              ".name", (objects["s"],)).fetchone()[0]
        direct.execute("select membank.delete_memory(%s, scope => %s)", (str(gone), objects["s"]))
    trigger_tables = ("memory_revisions", "embedding_jobs", "memory_embeddings", "scope_lexicon_base",
                      "scope_lexicon_delta", "scope_stats_base", "scope_stats_delta", "retired_sources")
    commands = [m for m in local if m.startswith("executing the command locally")]
    assert [m for m in commands if "memories_" in m], local  # the calls' own statements are logged
    assert not [m for m in commands if any(t + "_" in m for t in trigger_tables)], commands
    assert not [m for m in local if "intermediate_result" in m], local
    # update and delete lock through Citus (their first statement); a create only in its trigger, on the shard
    assert len([m for m in commands if "scope_locks_" in m]) == 2, commands
    counted = dict(cl.admin.execute(
        "select lexeme, doc_count from membank_private.scope_lexicon where scope_id = md5(%s::jsonb::text)::uuid"
        " and doc_count <> 0", (objects["s"],)).fetchall())
    expected = dict(cl.admin.execute(
        "select l.lexeme, count(*) from membank_private.memories as m"
        " cross join lateral unnest(tsvector_to_array(m.fts)) as l (lexeme)"
        " where m.scope_id = md5(%s::jsonb::text)::uuid group by l.lexeme", (objects["s"],)).fetchall())
    assert counted == expected and counted.get("cello") == 1 and "harp" not in counted


def test_create_memory_waits_for_a_held_scope_lock_at_most_the_callers_limit(census):
    """create_memory takes the scope's write lock in its INSERT's trigger on the worker: with another transaction
    holding it, the caller's membank.lock_timeout (set on the coordinator, carried to the worker) bounds the wait and
    the error is one server's MB040 (message and hint), nothing written; once the holder commits the call succeeds.
    A malformed limit is refused on the coordinator (22023) before anything is sent."""
    cl, scopes, _ = census
    objects = scopes[20]
    holder, waiter = cl.login("membank_writer"), cl.login("membank_writer")
    count = "select count(*) from membank_private.memories where scope_id = md5(%s::jsonb::text)::uuid"
    before = cl.admin.execute(count, (objects["s"],)).fetchone()[0]
    holder.execute("begin")
    holder.execute("select membank.create_memory(scope => %s, fact => 'holds the lock')", (objects["s"],))
    waiter.execute("set membank.lock_timeout = '300ms'")
    with pytest.raises(psycopg.Error) as busy:
        waiter.execute("select membank.create_memory(scope => %s, fact => 'waits for it')", (objects["s"],))
    assert busy.value.sqlstate == "MB040", busy.value
    assert busy.value.diag.message_primary == ("scope: another write to this scope held its write lock for longer"
                                               " than 300ms")
    assert busy.value.diag.message_hint == ("nothing was written; retry the call (the wait limit is the setting"
                                            " membank.lock_timeout)")
    holder.execute("commit")
    assert cl.admin.execute(count, (objects["s"],)).fetchone()[0] == before + 1
    assert waiter.execute("select (membank.create_memory(scope => %s, fact => 'waits for it')).fact",
                          (objects["s"],)).fetchone() == ("waits for it",)
    waiter.execute("set membank.lock_timeout = 'soon'")
    with pytest.raises(psycopg.Error) as bad:
        waiter.execute("select membank.create_memory(scope => %s, fact => 'never')", (objects["s"],))
    assert bad.value.sqlstate == "22023", bad.value
    waiter.execute("reset membank.lock_timeout")
    assert cl.admin.execute(count, (objects["s"],)).fetchone()[0] == before + 2


def test_update_and_delete_wait_for_a_held_scope_lock_at_most_the_callers_limit(census):
    """update_memory and delete_memory take the scope's lock with the row's read in one statement (FOR UPDATE OF the
    lock row, SKIP LOCKED): with another transaction holding the scope, the statement finds no row and the call falls
    back to lock_scope's bounded wait, with one server's MB040 (message and hint) and nothing written; once the holder
    commits both calls succeed. A malformed membank.lock_timeout is still 22023, and the memory is unchanged."""
    cl, scopes, _ = census
    objects = scopes[20]
    holder, waiter = cl.login("membank_writer"), cl.login("membank_writer")
    names = [str(waiter.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                (objects["s"], f"lock test {n} likes tea")).fetchone()[0]) for n in range(2)]
    read = "select fact, revision from membank_private.memories where scope_id = md5(%s::jsonb::text)::uuid and name = %s"
    holder.execute("begin")
    holder.execute("select membank.create_memory(scope => %s, fact => 'holds the lock')", (objects["s"],))
    waiter.execute("set membank.lock_timeout = '300ms'")
    for statement in ("select membank.update_memory(%s, fact => 'lock test likes coffee', scope => %s)",
                      "select membank.delete_memory(%s, scope => %s)"):
        with pytest.raises(psycopg.Error) as busy:
            waiter.execute(statement, (names[0], objects["s"]))
        assert busy.value.sqlstate == "MB040", busy.value
        assert busy.value.diag.message_primary == ("scope: another write to this scope held its write lock for"
                                                   " longer than 300ms")
        assert busy.value.diag.message_hint == ("nothing was written; retry the call (the wait limit is the setting"
                                                " membank.lock_timeout)")
    assert cl.admin.execute(read, (objects["s"], names[0])).fetchone() == ("lock test 0 likes tea", 1)
    holder.execute("commit")
    assert waiter.execute("select (membank.update_memory(%s, fact => 'lock test likes coffee', scope => %s)).fact",
                          (names[0], objects["s"])).fetchone() == ("lock test likes coffee",)
    waiter.execute("select membank.delete_memory(%s, scope => %s)", (names[0], objects["s"]))
    assert cl.admin.execute(read, (objects["s"], names[0])).fetchone() is None
    waiter.execute("set membank.lock_timeout = 'soon'")
    with pytest.raises(psycopg.Error) as bad:
        waiter.execute("select membank.update_memory(%s, fact => 'never', scope => %s)", (names[1], objects["s"]))
    assert bad.value.sqlstate == "22023", bad.value
    waiter.execute("reset membank.lock_timeout")
    assert cl.admin.execute(read, (objects["s"], names[1])).fetchone() == ("lock test 1 likes tea", 1)


def test_update_takes_the_scope_lock_before_it_waits_for_the_memory_row(census):
    """The one statement of update_memory locks the scope's lock row before the memory's row (the order of its
    locking clauses), as lock_scope then the row's read did: while it waits for a row another transaction holds, it
    already holds the scope, so a third writer of the scope waits for it (MB040 past its limit); once the row is
    free the update goes through."""
    cl, scopes, _ = census
    objects = scopes[20]
    row_holder = psycopg.connect(cl.admin.info.dsn, autocommit=True)  # the bank's owner, as cl.admin
    updater, other = cl.login("membank_writer"), cl.login("membank_writer")
    name = str(updater.execute("select (membank.create_memory(scope => %s, fact => 'order test likes tea')).name",
                               (objects["s"],)).fetchone()[0])
    row_holder.execute("begin")
    row_holder.execute("select 1 from membank_private.memories where scope_id = md5(%s::jsonb::text)::uuid"
                       " and name = %s for update", (objects["s"], name))
    got = {}

    def update() -> None:
        try:
            got["fact"] = updater.execute("select (membank.update_memory(%s, fact => 'order test likes coffee',"
                                          " scope => %s)).fact", (name, objects["s"])).fetchone()[0]
        except psycopg.Error as err:  # reported below
            got["fact"] = err
    waiting = threading.Thread(target=update)
    waiting.start()
    try:
        # the update waits for the row on the worker (a backend there waiting on a lock); no time is asserted
        waits = ("select coalesce(sum(result::integer), 0) from run_command_on_workers("
                 "$$select count(*) from pg_stat_activity where wait_event_type = 'Lock'$$)")
        for _ in range(600):
            if cl.admin.execute(waits).fetchone()[0]:
                break
            threading.Event().wait(0.05)
        assert cl.admin.execute(waits).fetchone()[0] == 1
        other.execute("set membank.lock_timeout = '300ms'")
        with pytest.raises(psycopg.Error) as busy:
            other.execute("select membank.create_memory(scope => %s, fact => 'order test waits')", (objects["s"],))
        assert busy.value.sqlstate == "MB040", busy.value
    finally:
        row_holder.execute("rollback")
        row_holder.close()
        waiting.join(60)
    assert got["fact"] == "order test likes coffee", got


def attack_login(cl: Cluster, url: str, role: str) -> psycopg.Connection:
    """An autocommit connection to ``url`` (the coordinator or a worker) as a new LOGIN role holding ``role``."""
    c = cl.login(role)
    name = c.execute("select current_user").fetchone()[0]
    if url == cl.url:
        return c
    w = psycopg.connect(url.replace("postgresql://postgres@", f"postgresql://{name}@"), autocommit=True)
    w.execute("set statement_timeout = '60s'")
    cl.connections.append(w)
    return w


def test_update_and_delete_through_each_node_serialise_on_the_scope_lock_and_stay_in_their_scope(bank):  # noqa: F811
    """update_memory / delete_memory's one statement (lock row and memory row), called through the coordinator and
    through each worker's own connection, with the scope's shard on either worker and after that shard group moved
    (citus_move_shard_placement): while another transaction holds the scope (it updated another memory of it), each
    call meets MB040 within membank.lock_timeout and writes nothing; once it commits they go through. A memory of
    another scope passed with my scope is P0002 at once, even while that other scope's lock is held, and is left
    unchanged."""
    from test_citus import workers

    cl = Cluster(*bank)
    try:
        a, b, w1, w2 = cl.two_scopes("attack3")
        read = ("select fact, revision from membank_private.memories where scope_id = md5(%s::jsonb::text)::uuid"
                " and name = %s::uuid")
        nodes = {"coordinator": cl.url, **{f"worker {w.port}": w.url(cl.name) for w in workers(cl)}}
        holder = cl.login("membank_writer")
        for moved in (False, True):
            if moved:  # a's shard group to the other worker: the lock row and the memories move with it
                shard = cl.admin.execute("select get_shard_id_for_distribution_column('membank_private.memories',"
                                         " md5(%s::jsonb::text)::uuid)", (json.dumps(a),)).fetchone()[0]
                cl.admin.execute("select citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s,"
                                 " shard_transfer_mode => 'block_writes')", (shard, w1, w2))
                cl.admin.execute("call citus_cleanup_orphaned_resources()")
                assert cl.worker_of(a) == w2
            for node, url in nodes.items():
                label = f"{node}, moved={moved}"
                caller = attack_login(cl, url, "membank_writer")
                names = [str(caller.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                            (json.dumps(a), f"{node} {n} likes tea")).fetchone()[0])
                         for n in range(3)]
                theirs = str(holder.execute("select (membank.create_memory(scope => %s, fact => 'b likes rain')).name",
                                            (json.dumps(b),)).fetchone()[0])
                holder.execute("begin")
                holder.execute("select membank.update_memory(%s, fact => %s, scope => %s)",
                               (names[2], f"{node} 2 holds the scope", json.dumps(a)))
                caller.execute("set membank.lock_timeout = '300ms'")
                for statement in ("select membank.update_memory(%s, fact => 'never', scope => %s)",
                                  "select membank.delete_memory(%s, scope => %s)"):
                    with pytest.raises(psycopg.Error) as busy:
                        caller.execute(statement, (names[0], json.dumps(a)))
                    assert busy.value.sqlstate == "MB040", (label, busy.value)
                # the memory of another scope with mine: not found, whatever the state of either lock
                with pytest.raises(psycopg.Error) as missing:
                    caller.execute("select membank.update_memory(%s, fact => 'never', scope => %s)",
                                   (theirs, json.dumps(a)))
                assert missing.value.sqlstate in ("MB040", "P0002"), (label, missing.value)
                holder.execute("commit")
                holder.execute("begin")
                holder.execute("select membank.update_memory(%s, fact => 'b holds its scope', scope => %s)",
                               (theirs, json.dumps(b)))
                for statement in ("select membank.update_memory(%s, fact => 'never', scope => %s)",
                                  "select membank.delete_memory(%s, scope => %s)"):
                    with pytest.raises(psycopg.Error) as missing:
                        caller.execute(statement, (theirs, json.dumps(a)))
                    assert missing.value.sqlstate == "P0002", (label, missing.value)
                holder.execute("commit")
                assert cl.admin.execute(read, (json.dumps(b), theirs)).fetchone() == ("b holds its scope", 2), label
                assert cl.admin.execute(read, (json.dumps(a), names[0])).fetchone() == (f"{node} 0 likes tea", 1)
                assert caller.execute("select (membank.update_memory(%s, fact => %s, scope => %s)).revision",
                                      (names[0], f"{node} 0 likes coffee", json.dumps(a))).fetchone() == (2,)
                caller.execute("select membank.delete_memory(%s, scope => %s)", (names[1], json.dumps(a)))
                assert cl.admin.execute(read, (json.dumps(a), names[0])).fetchone() == (f"{node} 0 likes coffee", 2)
                assert cl.admin.execute(read, (json.dumps(a), names[1])).fetchone() is None, label
    finally:
        cl.close()


def test_a_forged_scope_count_memo_in_the_current_format_is_not_taken(bank):  # noqa: F811
    """The memo (scope_counts, scope_has_jobs) is a setting any role can set, now key|documents|pending|jobs: a
    malformed one set in the same statement as the retrieval (a negative count, a count beyond bigint) is ignored,
    never an error; the retrieval answers as without it."""
    cl = Cluster(*bank)
    try:
        reader, writer = cl.login("membank_reader"), cl.login("membank_writer")
        scope = json.dumps({"user_id": "memo-forger"})
        for fact in ("likes tea in the rain", "walks in the rain", "reads by the window"):
            writer.execute("select membank.create_memory(scope => %s, fact => %s)", (scope, fact))
        retrieve = ("select array_agg(r.name order by r.name) from membank.retrieve_memories(scope => %s,"
                    " query_text => 'tea rain', top_k => 5) as r")
        honest = reader.execute(retrieve, (scope,)).fetchone()[0]
        assert honest  # found by text (no vectors yet)
        for forged in ("-5|false|false", "99999999999999999999|false|false", "7|false|maybe", "1e3|true|true"):
            got = reader.execute(
                "select set_config('membank.scope_counts', md5(statement_timestamp()::text"
                " || membank.scope_id(%s::jsonb)::text) || '|' || %s, true), (" + retrieve + ")",
                (scope, forged, scope)).fetchone()
            assert got[0].endswith(forged) and got[1] == honest, (forged, got)
    finally:
        cl.close()


def test_concurrent_compare_and_set_updates_and_deletes_lose_nothing(bank):  # noqa: F811
    """Writers through the coordinator and both workers race update_memory with the same expected_revision on one
    memory (exactly one wins each round, the others MB003: no lost update), on two memories of one scope (both
    win), and a delete against updates (after the delete every update is P0002): no deadlock, no MB040 within a
    generous membank.lock_timeout, and the revisions count exactly the writes that succeeded."""
    from test_citus import workers

    cl = Cluster(*bank)
    try:
        scope = json.dumps(cl.scope_on(workers(cl)[0].port, "race"))
        urls = [cl.url] + [w.url(cl.name) for w in workers(cl)]
        callers = [attack_login(cl, urls[i % 3], "membank_writer") for i in range(6)]
        for c in callers:
            c.execute("set membank.lock_timeout = '30s'")
        one, two = (str(callers[0].execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                           (scope, f"race {n} likes tea")).fetchone()[0]) for n in range(2))

        def race(jobs):
            outcome = [None] * len(jobs)
            start = threading.Barrier(len(jobs))

            def run(i, statement, args):
                start.wait()
                try:
                    outcome[i] = callers[i].execute(statement, args).fetchone()[0]
                except psycopg.Error as err:
                    outcome[i] = err.sqlstate
            threads = [threading.Thread(target=run, args=(i, *job)) for i, job in enumerate(jobs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            return outcome

        update = "select (membank.update_memory(%s, fact => %s, scope => %s, expected_revision => %s)).revision"
        for revision in range(1, 6):
            got = race([(update, (one, f"race one v{revision}.{i}", scope, revision)) for i in range(6)])
            assert sorted(got, key=str) == sorted([revision + 1] + ["MB003"] * 5, key=str), got
        got = race([(update, (one if i % 2 else two, f"race both {i}", scope, 6 if i % 2 else 1))
                    for i in range(2)])
        assert got == [2, 7], got
        delete = "select (membank.delete_memory(%s, scope => %s)).revision"
        got = race([(delete, (two, scope))] + [(update.replace(", expected_revision => %s", ""),
                                                 (two, f"race two {i}", scope)) for i in range(1, 6)])
        assert "40P01" not in got and "MB040" not in got, got
        wins = [g for g in got[1:] if isinstance(g, int)]
        assert set(got[1:]) - set(wins) <= {"P0002"}, got
        assert got[0] == 2 + len(wins), got  # the memory as the delete found it: after every update that won
        revisions = cl.admin.execute("select count(*) from membank_private.memory_revisions where memory_name = %s::uuid",
                                     (two,)).fetchone()[0]
        assert revisions == 2 + len(wins) + 1
    finally:
        cl.close()


def test_a_statement_the_caller_prepared_under_the_retrievals_name_is_not_run(bank):  # noqa: F811
    """retrieve_on_shard runs the statements it reads the shards with as prepared statements of the session, named
    by the md5 of their text (prepared_on_shard), under retrieve_memories' owner. Through a worker's own connection
    the routed statement executes in the caller's session, which sees the names in pg_prepared_statements:

    - a scope-bound reader deallocates the ranking statement and PREPAREs its own under that name (its arguments
      all text; it answers with a row saying who ran it and how many roles pg_authid, the superuser's, holds): its
      next retrieval must not run it (as the owner, any statement could read or write any scope's rows), it answers
      as before;
    - an admin (USAGE on membank_private) PREPAREs the signals statement's own text again under a search_path with
      pg_temp first, where text is a temporary domain whose check is a temporary function (Citus lets the session
      create both with its DDL propagation off): the query texts passed to it must never run that check as the
      owner.

    The internal functions stay out of a reader's and an admin's reach on the worker."""
    from test_citus import workers

    cl = Cluster(*bank)
    try:
        w1 = workers(cl)[0]
        mine = cl.scope_on(w1.port, "attack4-mine")
        cl.admin.execute("select membank.create_memory(scope => %s, fact => 'mine likes tea in the rain')",
                         (json.dumps(mine),))
        attacker = attack_login(cl, w1.url(cl.name), "membank_reader")
        role = attacker.execute("select current_user").fetchone()[0]
        cl.admin.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (role, json.dumps(mine)))
        retrieve = ("select array_agg(r.fact order by r.fact) from membank.retrieve_memories(scope => %s,"
                    " query_text => 'tea', top_k => 10) as r")
        honest = attacker.execute(retrieve, (json.dumps(mine),)).fetchone()[0]
        assert honest == ["mine likes tea in the rain"]
        row = attacker.execute("select to_jsonb(r) from membank.retrieve_memories(scope => %s, query_text => 'tea')"
                               " as r", (json.dumps(mine),)).fetchone()[0]
        prepared = attacker.execute("select name, cardinality(parameter_types) from pg_prepared_statements"
                                    " where statement like '%%retrieved_memory%%'").fetchall()
        assert len(prepared) == 1, prepared  # the ranking statement, prepared in the caller's own session
        name, arity = prepared[0]
        template = json.dumps(row).replace("'", "''")  # an honest row, its other fields as they came
        attacker.execute(f'deallocate "{name}"')
        attacker.execute(
            f'prepare "{name}" ({", ".join(["text"] * arity)}) as select array[jsonb_populate_record('
            f"null::membank.retrieved_memory, '{template}'::jsonb || jsonb_build_object('fact', 'ran as '"
            " || current_user || ', roles ' || (select count(*) from pg_catalog.pg_authid)))]")
        assert attacker.execute(retrieve, (json.dumps(mine),)).fetchone()[0] == honest
        # the internal functions: out of a reader's and an admin's reach on the worker (the admin has USAGE on
        # membank_private, not EXECUTE)
        admin = attack_login(cl, w1.url(cl.name), "membank_admin")
        admin_role = admin.execute("select current_user").fetchone()[0]
        for c in (attacker, admin):
            for call in ("select membank_private.prepared_on_shard('select 1', '')",
                         "select membank_private.shard_table('memories', md5('x')::uuid)",
                         "select membank_private.rank_statement()",
                         "select membank_private.retrieve_on_shard(md5('x')::uuid, '{}', '{tea}', '{null}', 5, 50,"
                         " null, null, null, null, null, null, 'rrf', 1, 1, 10, 400, null)"):
                with pytest.raises(psycopg.Error) as denied:
                    c.execute(call)
                assert denied.value.sqlstate == "42501", (call, denied.value)
        assert admin.execute(retrieve, (json.dumps(mine),)).fetchone()[0] == honest
        signals = admin.execute("select name, statement from pg_prepared_statements"
                                " where statement like '%%scope_lexicon_base%%'").fetchone()
        assert signals is not None
        spied = []
        admin.add_notice_handler(lambda d: spied.append(d.message_primary))
        admin.execute("set citus.enable_ddl_propagation to off")
        admin.execute("create function pg_temp.spy(q pg_catalog.text) returns boolean language plpgsql as"
                      " $$ begin raise notice 'spy ran as %', current_user; return true; end $$")
        admin.execute("create domain pg_temp.text as pg_catalog.text check (pg_temp.spy(value))")
        admin.execute(f'deallocate "{signals[0]}"')
        admin.execute("set search_path to pg_temp, pg_catalog")
        admin.execute(signals[1])
        admin.execute("reset search_path")
        assert admin.execute("select statement from pg_prepared_statements where name = %s",
                             (signals[0],)).fetchone()[0] == signals[1]  # the same text
        assert admin.execute(retrieve, (json.dumps(mine),)).fetchone()[0] == honest
        # (the caller's own statements may run it, as the caller)
        assert not [m for m in spied if m.startswith("spy ran") and m != f"spy ran as {admin_role}"], spied
    finally:
        cl.close()


def test_a_routed_retrieval_answers_the_same_across_shard_moves_on_the_same_connections(bank):  # noqa: F811
    """The statements retrieve_on_shard prepares name the scope's shards and stay on the coordinator's kept
    connections to a worker: after the scope's shard group moves to the other worker and back
    (citus_move_shard_placement, orphans cleaned up), the same connections (coordinator and a worker's own) answer
    as before, and after a delete the deleted memory is gone from both."""
    from test_citus import workers

    cl = Cluster(*bank)
    try:
        w1, w2 = (w.port for w in workers(cl))
        scope = cl.scope_on(w1, "attack4-move")
        s = json.dumps(scope)
        names = [str(cl.admin.execute("select (membank.create_memory(scope => %s, fact => %s)).name",
                                      (s, fact)).fetchone()[0])
                 for fact in ("likes tea in the rain", "drinks green tea", "walks in the rain")]
        readers = {"coordinator": cl.login("membank_reader"),
                   "worker": attack_login(cl, next(w for w in workers(cl) if w.port == w2).url(cl.name),
                                          "membank_reader")}
        retrieve = ("select array_agg(r.fact order by r.fact) from membank.retrieve_memories(scope => %s,"
                    " query_text => 'tea', top_k => 10) as r")
        honest = readers["coordinator"].execute(retrieve, (s,)).fetchone()[0]
        assert honest == ["drinks green tea", "likes tea in the rain"]
        shard = cl.admin.execute("select get_shard_id_for_distribution_column('membank_private.memories',"
                                 " md5(%s::jsonb::text)::uuid)", (s,)).fetchone()[0]
        for source, target in ((w1, w2), (w2, w1)):
            cl.admin.execute("select citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s,"
                             " shard_transfer_mode => 'block_writes')", (shard, source, target))
            cl.admin.execute("call citus_cleanup_orphaned_resources()")
            assert cl.worker_of(scope) == target
            for node, c in readers.items():
                assert c.execute(retrieve, (s,)).fetchone()[0] == honest, (node, target)
        cl.admin.execute("select membank.delete_memory(%s, scope => %s)", (names[1], s))
        for node, c in readers.items():
            assert c.execute(retrieve, (s,)).fetchone()[0] == ["likes tea in the rain"], node
    finally:
        cl.close()


def test_a_callers_datestyle_and_float_digits_do_not_change_a_routed_retrieval(bank):  # noqa: F811
    """The routed retrieval passes its arguments to the scope's worker: a caller's DateStyle (SQL, DMY),
    extra_float_digits (-15, one digit) and plan_cache_mode (force_custom_plan) change neither the rows nor their
    values, through the coordinator and through the scope's worker, for a created_before a day ahead and a
    min_relevance (which gates the answer on its best row) of exactly the best row's relevance (every row) and of
    the next float above it (no row; one digit, 0.5, would let them through)."""
    import math
    from datetime import datetime, timedelta, timezone

    from test_citus import workers

    cl = Cluster(*bank)
    try:
        w1 = workers(cl)[0]
        scope = json.dumps(cl.scope_on(w1.port, "attack4-settings"))
        for fact in ("likes tea in the rain", "drinks green tea", "walks in the rain"):
            cl.admin.execute("select membank.create_memory(scope => %s, fact => %s)", (scope, fact))
        callers = {"coordinator": cl.login("membank_reader"),
                   "worker": attack_login(cl, w1.url(cl.name), "membank_reader")}
        before = datetime.now(timezone.utc) + timedelta(days=1)
        retrieve = ("select array_agg(r.fact order by r.fact), array_agg(r.score order by r.fact),"
                    " array_agg(r.relevance order by r.fact) from membank.retrieve_memories(scope => %s,"
                    " query_text => 'tea rain', top_k => 10, created_before => %s, min_relevance => %s) as r")
        # binary: the values as the server holds them, whatever the session prints
        first = callers["coordinator"].execute(
            "select array_agg(r.relevance order by r.relevance desc) from membank.retrieve_memories(scope => %s,"
            " query_text => 'tea rain', top_k => 10) as r", (scope,), binary=True).fetchone()[0]
        assert len(first) >= 2 and first[0] > first[1], first
        for node, c in callers.items():
            best = c.execute(retrieve, (scope, before, first[0]), binary=True).fetchone()
            # the floor gates the answer on its best row: at it, every row; just above it, none
            assert best[0] is not None and len(best[0]) == len(first) and max(best[2]) == first[0], (node, best)
            above = c.execute(retrieve, (scope, before, math.nextafter(first[0], 1)), binary=True).fetchone()
            assert above == (None, None, None), (node, above)
            c.execute("set datestyle to 'SQL, DMY'")
            c.execute("set extra_float_digits to -15")
            c.execute("set plan_cache_mode to force_custom_plan")
            assert c.execute(retrieve, (scope, before, first[0]), binary=True).fetchone() == best, node
            assert c.execute(retrieve, (scope, before, math.nextafter(first[0], 1)),
                             binary=True).fetchone() == above, node
            c.execute("reset datestyle")
            c.execute("reset extra_float_digits")
            c.execute("reset plan_cache_mode")
    finally:
        cl.close()


def test_styles_a_transaction_propagates_to_the_workers_do_not_change_a_routed_retrievals_rows(bank):  # noqa: F811
    """A routed retrieval's rows come back from the scope's worker as membank.retrieved_memory[], which the worker
    writes as text in its connection's styles. A SET LOCAL made while citus.propagate_set_commands is 'local' reaches
    that connection: DateStyle 'SQL, DMY' turned a create_time of December 3rd into March 12th (an error from the
    13th) and extra_float_digits -15 every score and relevance into one digit. For a scope of 3 memories (the scan)
    and one of 201 (the vector and text lists, and with a filter rank_on_shard), through the coordinator and through
    each worker's own connection, the rows are those of the same call without them (binary results: the values as
    the server holds them). Failed before fused_memories carried the workers' styles to the transaction's
    connections."""
    from test_citus import workers

    cl = Cluster(*bank)
    try:
        w1, w2 = workers(cl)
        scope = json.dumps(cl.scope_on(w1.port, "attack5-styles"))
        for fact in ("likes tea in the rain", "drinks green tea", "walks in the rain"):
            cl.admin.execute("select membank.create_memory(scope => %s, fact => %s)", (scope, fact))
        big = cl.scope_on(w1.port, "attack5-styles-big")
        cl.admin.execute("select membank.configure_embedding(model_id => 'test/m', dimension => %s)", (DIM,))
        bulk_fill(cl.admin, big, 201, "test/m", DIM)
        retrieve = ("select r.* from membank.retrieve_memories(scope => %s, query_text => 'tea rain', top_k => 10) as r"
                    " order by r.name")
        sb = json.dumps(big)
        calls = [(retrieve, (scope,)),
                 ("select r.* from membank.retrieve_memories(scope => %s, query_text => 'tea rain',"
                  " query_embedding => %s::real[], top_k => 10) as r order by r.name", (sb, query_vector())),
                 ("select r.* from membank.retrieve_memories(scope => %s, query_text => 'tea rain',"
                  " query_embedding => %s::real[], top_k => 10, topics => '{USER_PREFERENCES}') as r order by r.name",
                  (sb, query_vector()))]
        for node, c in (("coordinator", cl.login("membank_writer")),
                        ("scope's worker", attack_login(cl, w1.url(cl.name), "membank_writer")),
                        ("other worker", attack_login(cl, w2.url(cl.name), "membank_writer"))):
            plain = [c.execute(q, args, binary=True).fetchall() for q, args in calls]
            assert len(plain[0]) == 3 and any(r[-1] != round(r[-1], 2) for r in plain[0]), plain  # many digits
            assert [len(rows) for rows in plain[1:]] == [10, 10], plain
            c.execute("begin")
            try:
                c.execute("set local citus.propagate_set_commands to 'local'")
                c.execute("set local datestyle to 'SQL, DMY'")
                c.execute("set local extra_float_digits to -15")
                assert [c.execute(q, args, binary=True).fetchall() for q, args in calls] == plain, node
            finally:
                c.execute("rollback")
    finally:
        cl.close()
