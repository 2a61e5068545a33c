"""Compaction of old memories: one summary replaces many, in the database (ai.generate) or through the worker."""

from __future__ import annotations

import json
import threading
from uuid import UUID

import psycopg
import pytest
from psycopg.rows import dict_row
from werkzeug import Request, Response

from membank import MemoryBank

SCOPE = {"user_id": "u1"}

# A stand-in for AlloyDB AI's ai.generate with the same signature, installed in the test database only:
# its answer is built deterministically from the prompt (the facts of the "- [date] fact" lines, joined).
AI_GENERATE_STUB = r"""
create schema ai;
create function ai.generate(prompt text, model_id text default null) returns text
language sql immutable as $$
    select 'Summary (' || coalesce(model_id, 'default') || '): ' || string_agg(
        substring(l from '^- \[[0-9-]+\] (.*)$'), '; ' order by n)
    from regexp_split_to_table(prompt, E'\n') with ordinality as x (l, n)
    where l ~ '^- \['
$$;
"""


def seed(conn, scope=SCOPE, old=100, new=20):
    """``old`` memories created 31..130 days ago (time moved in SQL, triggers off) and ``new`` ones from today."""
    scope_json = json.dumps(scope)
    names = []
    for i in range(old + new):
        row = conn.execute("select (membank.create_memory(scope => %s, fact => %s, topics => %s)).name",
                           (scope_json, f"fact number {i} about topic {i % 7}", [f"T{i % 3}"])).fetchone()
        names.append(row["name"])
    conn.execute("set session_replication_role = replica")  # test setup: move time without a revision
    for i, name in enumerate(names[:old]):
        conn.execute("update membank_private.memories set create_time = now() - make_interval(days => 130 - %s)"
                     " where name = %s", (i, name))
    conn.execute("set session_replication_role = origin")
    return names


def live_names(conn, scope=SCOPE):
    return {r["name"] for r in conn.execute(
        "select name from membank.list_memories(scope => %s, page_size => 1000)", (json.dumps(scope),))}


def operation(conn, name):
    return conn.execute("select * from membank.get_operation(name => %s)", (str(name),)).fetchone()


def compact(conn, scope=SCOPE, **kwargs):
    extra = "".join(f", {k} => %({k})s" for k in kwargs)
    return conn.execute(f"select membank.compact_memories(scope => %(scope)s, older_than => '30 days'{extra}) as op",
                        {"scope": json.dumps(scope), **kwargs}).fetchone()["op"]


@pytest.fixture
def ai_stub(conn):
    conn.execute(AI_GENERATE_STUB)


def check_compacted(conn, op_name, replaced):
    op = operation(conn, op_name)
    assert op["done"] and op["error"] is None and op["stage"] == "DONE"
    actions = [(g["action"], g["memory"]["name"]) for g in op["generated_memories"]]
    assert actions[0][0] == "CREATED" and sorted(n for a, n in actions[1:] if a == "DELETED") == sorted(
        str(n) for n in replaced)
    summary = actions[0][1]
    # The summary's revision names every memory (and fact) it replaced ...
    created = conn.execute("select * from membank.get_revision(name => %s, revision => 1)", (summary,)).fetchone()
    assert created["action"] == "CREATED" and created["labels"]["action"] == "COMPACT"
    assert [m["name"] for m in created["extracted_memories"]] == [str(n) for n in replaced]
    assert all(m["fact"].startswith("fact number ") for m in created["extracted_memories"])
    # ... and each original's DELETED revision names the summary.
    for name in replaced:
        deleted = conn.execute("select * from membank.list_revisions(name => %s)", (str(name),)).fetchall()[-1]
        assert deleted["action"] == "DELETED" and deleted["labels"]["compacted_into"] == summary
    return UUID(summary)


def test_in_database_compaction_replaces_fifty_at_a_time(conn, ai_stub):
    names = seed(conn)
    first = compact(conn)
    summary1 = check_compacted(conn, first, names[:50])
    fact = conn.execute("select fact from membank.get_memory(name => %s)", (str(summary1),)).fetchone()["fact"]
    assert fact == "Summary (gemini-2.0-flash-001): " + "; ".join(f"fact number {i} about topic {i % 7}"
                                                                  for i in range(50))
    assert operation(conn, first)["model_calls"] == 1
    second = compact(conn)
    summary2 = check_compacted(conn, second, names[50:100])
    # The 20 newer than the cutoff and the two summaries are all that is left; a third call finds nothing.
    assert live_names(conn) == set(names[100:]) | {summary1, summary2}
    assert compact(conn) is None
    assert live_names(conn) == set(names[100:]) | {summary1, summary2}


def test_model_id_is_configurable(conn, ai_stub):
    seed(conn, old=3, new=0)
    op = compact(conn, model_id="my-model")
    summary = operation(conn, op)["generated_memories"][0]["memory"]
    assert summary["fact"].startswith("Summary (my-model): ")
    conn.execute("set membank.compaction_model_id = 'from-setting'")
    seed(conn, scope={"user_id": "u2"}, old=3, new=0)
    op = compact(conn, scope={"user_id": "u2"})
    assert operation(conn, op)["generated_memories"][0]["memory"]["fact"].startswith("Summary (from-setting): ")


def test_concurrent_in_database_calls_never_compact_a_memory_twice(conn, db_url, ai_stub):
    names = seed(conn)
    results = []
    barrier = threading.Barrier(2)

    def run():
        with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as c:
            barrier.wait()
            results.append(compact(c))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deleted = []
    for op in results:
        deleted += [g["memory"]["name"] for g in operation(conn, op)["generated_memories"] if g["action"] == "DELETED"]
    assert len(deleted) == 100 and sorted(deleted) == sorted(str(n) for n in names[:100])


def test_worker_path_with_the_rules_provider(conn, db_url):
    names = seed(conn)
    # No ai.generate here: both operations are queued, and they never share a memory.
    first, second = compact(conn), compact(conn)
    assert operation(conn, first)["done"] is False and operation(conn, first)["stage"] == "COMPACT"
    assert compact(conn) is None  # the 20 left are newer than the cutoff
    with MemoryBank(db_url, provider="rules") as bank:
        bank.generation_worker.process_pending()
    summary1 = check_compacted(conn, first, names[:50])
    summary2 = check_compacted(conn, second, names[50:100])
    fact = conn.execute("select fact from membank.get_memory(name => %s)", (str(summary1),)).fetchone()["fact"]
    lines = fact.split("\n")
    assert 1 < len(lines) < 50 and all(line[0] == "[" and line[11] == "]" for line in lines)
    assert all(line[13:] in {f"fact number {i} about topic {i % 7}" for i in range(50)} for line in lines)
    assert live_names(conn) == set(names[100:]) | {summary1, summary2}


def test_a_candidate_changed_meanwhile_applies_nothing(conn, db_url):
    names = seed(conn, old=5, new=0)
    op = compact(conn)
    conn.execute("select membank.update_memory(name => %s, fact => 'changed')", (str(names[2]),))
    with MemoryBank(db_url, provider="rules") as bank:
        bank.generation_worker.process_pending()
    result = operation(conn, op)
    assert result["done"] and result["error"]["code"] == "CANDIDATES_CHANGED"
    assert result["error"]["memories"] == [str(names[2])] and result["generated_memories"] == []
    assert live_names(conn) == set(names)
    # The next call chooses afresh and applies.
    with MemoryBank(db_url, provider="rules") as bank:
        pending = bank.compact_memories(SCOPE, 30 * 86400)
        done = pending.wait(timeout=30, process=True)
    assert done.error is None and len(done.generated_memories) == 6


def test_bad_arguments(conn):
    for kwargs, words in [({"max_memories": 1}, "max_memories: must be between 2 and 1000"),
                          ({"in_database": True}, "in_database: this database has no trusted ai.generate")]:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            compact(conn, **kwargs)
        assert words in err.value.diag.message_primary and err.value.diag.message_hint
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="older_than"):
        conn.execute("select membank.compact_memories(scope => '{\"u\":\"1\"}', older_than => '-1 day')")


def test_an_untrusted_ai_generate_is_not_used(conn):
    conn.execute("create role membank_test_untrusted")
    try:
        conn.execute(AI_GENERATE_STUB)
        conn.execute("alter function ai.generate(text, text) owner to membank_test_untrusted")
        assert conn.execute("select membank_private.in_database_model() as m").fetchone()["m"] is False
        seed(conn, old=3, new=0)
        assert operation(conn, compact(conn))["done"] is False   # queued for the worker instead
    finally:
        conn.execute("drop schema ai cascade")
        conn.execute("drop role membank_test_untrusted")


def test_in_database_and_worker_paths_produce_the_same_rows(conn, db_url, ai_stub, httpserver):
    from membank.generation.openai_compat import OpenAICompatProvider

    a, b = {"user_id": "in-db"}, {"user_id": "worker"}
    seed(conn, scope=a, old=10, new=2)
    seed(conn, scope=b, old=10, new=2)
    in_db = compact(conn, scope=a)

    def handle(request: Request) -> Response:
        # The same stubbed model answers the worker's call, over the OpenAI wire protocol.
        prompt = request.get_json()["messages"][-1]["content"]
        with psycopg.connect(db_url) as c:
            answer = c.execute("select ai.generate(prompt => %s, model_id => 'gemini-2.0-flash-001')",
                               (prompt,)).fetchone()[0]
        return Response(json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}]}),
            content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), max_retries=0)
    with MemoryBank(db_url, provider=provider) as bank:
        via_worker = bank.compact_memories(b, 30 * 86400, in_database=False).wait(timeout=30, process=True)

    def shape(op_name):
        op = operation(conn, op_name)
        summary = op["generated_memories"][0]["memory"]
        revision = conn.execute("select * from membank.get_revision(name => %s, revision => 1)",
                                (summary["name"],)).fetchone()
        return (op["error"], op["model_calls"], [g["action"] for g in op["generated_memories"]],
                summary["fact"], summary["topics"], summary["metadata"]["compaction"]["replaced"],
                [(m["fact"], m["topics"], m["revision"]) for m in revision["extracted_memories"]])

    assert shape(in_db) == shape(via_worker.name)
    assert shape(in_db)[3].startswith("Summary (gemini-2.0-flash-001): fact number 0 about topic 0; ")


def test_compact_scopes_starts_compaction_in_every_matching_scope(conn, db_url):
    seed(conn, scope={"app_name": "shop", "user_id": "a"}, old=3, new=0)
    seed(conn, scope={"app_name": "shop", "user_id": "b"}, old=3, new=1)
    seed(conn, scope={"app_name": "other", "user_id": "c"}, old=3, new=0)
    rows = conn.execute("select * from membank.compact_scopes(scope_pattern => '{\"app_name\": \"shop\"}',"
                        " older_than => '30 days')").fetchall()
    assert sorted(r["scope"]["user_id"] for r in rows) == ["a", "b"]
    assert conn.execute("select count(*) from membank.compact_scopes(scope_pattern => '{\"app_name\": \"shop\"}',"
                        " older_than => '30 days')").fetchone()["count"] == 0   # already held by those operations
    with MemoryBank(db_url, provider="rules") as bank:
        bank.generation_worker.process_pending()
    assert len(live_names(conn, {"app_name": "shop", "user_id": "b"})) == 2
    assert len(live_names(conn, {"app_name": "other", "user_id": "c"})) == 3


def test_compact_scopes_skips_and_reports_a_scope_whose_lock_another_transaction_holds(superuser, login):
    """One tenant's open transaction (holding its scope's write lock) made compact_scopes fail for
    every scope with MB040 after lock_timeout. Now that scope is skipped without a wait and reported; the
    others are compacted. As the admin role the worker's schedule runs with."""
    busy, free = {"app_name": "shop", "user_id": "busy"}, {"app_name": "shop", "user_id": "free"}
    seed(superuser, scope=busy, old=3, new=0)
    seed(superuser, scope=free, old=3, new=0)
    _, writer_url = login("membank_writer")
    _, admin_url = login("membank_admin")
    with psycopg.connect(writer_url, autocommit=True, row_factory=dict_row) as tenant, \
            psycopg.connect(admin_url, autocommit=True, row_factory=dict_row) as admin:
        tenant.execute("begin")
        tenant.execute("select membank.create_memory(%s, 'still typing')", (json.dumps(busy),))
        admin.execute("set membank.lock_timeout = '30s'")
        admin.execute("set statement_timeout = '5s'")  # a wait on the busy scope would be 57014, not an answer
        rows = admin.execute("select scope ->> 'user_id' as user_id, operation_name, skipped"
                             " from membank.compact_scopes(scope_pattern => '{\"app_name\": \"shop\"}',"
                             " older_than => '30 days') order by 1").fetchall()
        tenant.execute("rollback")
        assert [(r["user_id"], r["operation_name"] is not None, r["skipped"]) for r in rows] == [
            ("busy", False, "LOCKED"), ("free", True, None)]
        # Nothing was started in the busy scope: the next call (its lock free now) compacts it.
        again = admin.execute("select scope ->> 'user_id' as user_id, skipped from membank.compact_scopes("
                              "scope_pattern => '{\"app_name\": \"shop\"}', older_than => '30 days')").fetchall()
        assert again == [{"user_id": "busy", "skipped": None}]


def test_a_summary_expires_when_its_last_source_would_have(conn, ai_stub):
    """Compaction drops no TTL: a summary of expiring memories expires at their latest expire_time, and memories
    that expire are never merged with memories that do not."""
    names = seed(conn, old=6, new=0)
    conn.execute("set session_replication_role = replica")  # test setup: move time without a revision
    for i, name in enumerate(names[:4]):  # the 4 oldest expire in 1..4 days, the other 2 never
        conn.execute("update membank_private.memories set expire_time = now() + make_interval(days => %s)"
                     " where name = %s", (i + 1, name))
    conn.execute("set session_replication_role = origin")
    first = compact(conn)
    summary = check_compacted(conn, first, names[:4])
    got = conn.execute("select expire_time, now() + interval '4 days' as latest from membank_private.memories"
                       " where name = %s", (summary,)).fetchone()
    assert got["expire_time"] is not None
    assert abs((got["expire_time"] - got["latest"]).total_seconds()) < 60
    second = compact(conn)  # the two that never expire, on their own
    never = check_compacted(conn, second, names[4:])
    assert conn.execute("select expire_time from membank_private.memories where name = %s",
                        (never,)).fetchone()["expire_time"] is None
    # When the oldest kind has a single memory, the other kind is compacted: nothing is stuck behind it.
    more = seed(conn, scope={"user_id": "u2"}, old=3, new=0)
    conn.execute("update membank_private.memories set expire_time = now() + interval '1 day' where name = %s",
                 (more[0],))
    third = compact(conn, scope={"user_id": "u2"})
    check_compacted(conn, third, more[1:])
