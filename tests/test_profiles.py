"""Structured profiles: schemas, filling them through GenerateMemories (rules and the openai wire), reading them."""

from __future__ import annotations

import json
import threading
from typing import Literal

import psycopg
import pytest
from psycopg.types.json import Jsonb
from pydantic import BaseModel, Field
from werkzeug import Request, Response

from membank import InvalidArgumentError, MemoryBank
from membank.generation.openai_compat import OpenAICompatProvider
from membank.generation.rules import RulesProvider
from membank.generation.worker import GenerationWorker

SCOPE = {"user_id": "123"}


class UserProfile(BaseModel):
    technical_stack: str = Field(description="the user's technical stack")
    job_status: Literal["unemployed", "part_time", "full_time", "student"]
    preferred_language: str


FIRST = [{"event_id": "e1", "author": "user", "timestamp": "2025-01-10T10:00:00Z",
          "text": "Can you help me build an ADK agent that organizes my daily tasks?"}]
SECOND = [{"event_id": "e2", "author": "user", "timestamp": "2025-01-11T10:00:00Z",
           "text": "Do you have any career recommendations for students that specialize in Python?"}]


def field_memory(bank: MemoryBank, field: str, scope=SCOPE):
    rows = [m for m in bank.list_memories(scope, memory_type="STRUCTURED_PROFILE").memories
            if m.structured_content["field"] == field]
    assert len(rows) <= 1
    return rows[0] if rows else None


def run_seed(bank: MemoryBank) -> tuple:
    bank.create_profile_schema("user-profile", UserProfile)
    op1 = bank.generate_memories(SCOPE, events=FIRST).wait(timeout=60, process=True)
    first = bank.retrieve_profiles(SCOPE)
    op2 = bank.generate_memories(SCOPE, events=SECOND).wait(timeout=60, process=True)
    return op1, first, op2, bank.retrieve_profiles(SCOPE)


def check_seed(bank: MemoryBank, op1, first, op2, second) -> None:
    assert first == {"user-profile": {"technical_stack": "ADK"}}
    assert second["user-profile"]["technical_stack"] == "ADK, Python"
    assert second["user-profile"]["job_status"] == "student"
    assert op1.error is None and op2.error is None
    assert [(g.action, g.memory.structured_content["field"]) for g in op1.generated_memories
            if g.memory.memory_type == "STRUCTURED_PROFILE"] == [("CREATED", "technical_stack")]
    assert sorted((g.action, g.memory.structured_content["field"]) for g in op2.generated_memories
                  if g.memory.memory_type == "STRUCTURED_PROFILE") == [("CREATED", "job_status"),
                                                                      ("UPDATED", "technical_stack")]
    stack = field_memory(bank, "technical_stack")
    assert stack.structured_content["schema_id"] == "user-profile"
    revisions = bank.list_revisions(stack.name)
    assert [r.structured_content["value"] for r in revisions] == ["ADK", "ADK, Python"]
    assert [r.extracted_memories[0]["value"] for r in revisions] == ["ADK", "Python"]
    assert "ADK agent" in revisions[0].extracted_memories[0]["context"]
    assert "Python" in revisions[1].extracted_memories[0]["context"]
    assert [r.source_event_ids for r in revisions] == [["e1"], ["e2"]]
    # Profile fields are listed and retrieved only when asked for.
    assert all(m.memory_type == "NATURAL_LANGUAGE" for m in bank.list_memories(SCOPE).memories)


def test_seed_example_with_the_rules_provider(db_url):
    with MemoryBank(db_url, provider=RulesProvider()) as bank:
        check_seed(bank, *run_seed(bank))


def test_seed_example_through_the_openai_wire(httpserver, db_url):
    bodies: list[dict] = []

    def reply(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        if "Profile fields to merge" in prompt:
            assert '"ADK"' in prompt and '"Python"' in prompt
            return json.dumps({"actions": [], "profile_fields": [
                {"schema_id": "user-profile", "field": "technical_stack", "value": "ADK, Python"}]})
        schema = body["response_format"]["json_schema"]["schema"]
        fields = schema["properties"]["profiles"]["properties"]["user-profile"]["properties"]
        assert fields["job_status"]["properties"]["value"]["enum"] == ["unemployed", "part_time", "full_time",
                                                                      "student"]
        assert "the user's technical stack" in prompt
        if "build an ADK agent" in prompt:
            return json.dumps({"memories": [], "profiles": {"user-profile": {"technical_stack": {
                "value": "ADK", "context": "The user said they need help building an ADK agent",
                "source_event_ids": ["e1"]}}}})
        return json.dumps({"memories": [], "profiles": {"user-profile": {
            "technical_stack": {"value": "Python", "context": "The user asked about careers specializing in Python",
                                "source_event_ids": ["e2"]},
            "job_status": {"value": "student", "context": "The user asked for recommendations for students",
                           "source_event_ids": ["e2"]}}}})

    def handle(request: Request) -> Response:
        body = request.get_json()
        bodies.append(body)
        text = reply(body)
        return Response(json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}),
            content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), max_retries=0)
    with MemoryBank(db_url, provider=provider) as bank:
        check_seed(bank, *run_seed(bank))
    assert sum("Profile fields to merge" in b["messages"][-1]["content"] for b in bodies) == 1


def test_unsupported_schema_constructs_are_refused_naming_the_path(conn):
    bad = {"properties": {"job_status": {"type": "object"}}}
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"memory_schema\.properties\.job_status\.type"):
        conn.execute("select membank.create_profile_schema('p', %s)", (Jsonb(bad),))
    bad = {"properties": {"tags": {"type": "array", "items": {"type": "integer"}}}}
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"memory_schema\.properties\.tags\.items"):
        conn.execute("select membank.create_profile_schema('p', %s)", (Jsonb(bad),))
    bad = {"properties": {"kind": {"$ref": "#/$defs/Kind"}}}
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"memory_schema\.properties\.kind\.\$ref"):
        conn.execute("select membank.create_profile_schema('p', %s)", (Jsonb(bad),))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^schema_id"):
        conn.execute("select membank.create_profile_schema('bad id!', '{\"properties\": {\"a\": {}}}')")
    assert conn.execute("select count(*) from membank.list_profile_schemas()").fetchone()["count"] == 0

    class Optional_(BaseModel):
        tags: list[str] = []
        age: int | None = None
        score: float
        active: bool
    row = conn.execute("select * from membank.create_profile_schema('ok', %s)",
                       (Jsonb(Optional_.model_json_schema()),)).fetchone()
    assert set(row["memory_schema"]["properties"]) == {"tags", "age", "score", "active"}
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("select membank.create_profile_schema('ok', %s)", (Jsonb(Optional_.model_json_schema()),))


def complete_extraction(conn, reply: dict, events=FIRST, scope=SCOPE) -> dict:
    name = conn.execute("select membank.generate_memories(scope => %s, events => %s) as n",
                        (Jsonb(scope), Jsonb(events))).fetchone()["n"]
    with conn.transaction():
        job = conn.execute("select * from membank.claim_generation_jobs(1, %s)", (name,)).fetchone()
        status = conn.execute("select membank.complete_generation_job(%s, %s) as s",
                              (job["job_id"], json.dumps(reply))).fetchone()["s"]
    assert status == "done"
    return conn.execute("select * from membank.get_operation(%s)", (str(name),)).fetchone()


def test_invalid_values_are_rejected_with_reasons_and_nothing_changes(conn):
    conn.execute("select membank.create_profile_schema('user-profile', %s)", (Jsonb(UserProfile.model_json_schema()),))
    complete_extraction(conn, {"memories": [], "profiles": {"user-profile": {"technical_stack": {"value": "ADK"}}}})
    op = complete_extraction(conn, {"memories": [], "profiles": {"user-profile": {
        "job_status": {"value": "retired", "context": "x"}, "technical_stack": {"value": 42},
        "shoe_size": 44}}}, events=SECOND)
    reasons = sorted(r["reason"] for r in op["rejected_items"])
    assert reasons == [
        'profiles.user-profile.job_status: "retired" is not one of unemployed, part_time, full_time, student',
        "profiles.user-profile.shoe_size: shoe_size is not a field of user-profile",
        "profiles.user-profile.technical_stack: must be a string, got number"]
    assert op["generated_memories"] == []
    assert conn.execute("select membank.retrieve_profiles(%s) as p", (Jsonb(SCOPE),)).fetchone()["p"] == {
        "user-profile": {"technical_stack": "ADK"}}


def test_profiles_are_isolated_by_exact_scope_and_deleted_or_expired_fields_vanish(db_url, conn):
    with MemoryBank(db_url, provider=RulesProvider()) as bank:
        bank.create_profile_schema("user-profile", UserProfile)
        other = {"user_id": "123", "app": "x"}
        bank.generate_memories(SCOPE, events=FIRST + SECOND).wait(timeout=60, process=True)
        bank.generate_memories(other, events=[{**FIRST[0], "event_id": "o1", "text": "I program in Rust"}]).wait(
            timeout=60, process=True)
        assert bank.retrieve_profiles(SCOPE) == {"user-profile": {"technical_stack": "ADK, Python",
                                                                  "job_status": "student"}}
        assert bank.retrieve_profiles(other) == {"user-profile": {"technical_stack": "Rust",
                                                                  "preferred_language": "Rust"}}
        assert bank.retrieve_profiles({"user_id": "nobody"}) == {}
        bank.delete_memory(field_memory(bank, "job_status").name)
        assert bank.retrieve_profiles(SCOPE) == {"user-profile": {"technical_stack": "ADK, Python"}}
        stack = field_memory(bank, "technical_stack")
        # Expire it: move its expiry into the past with the database clock.
        conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 s'"
                     " where name = %s", (stack.name,))
        assert bank.retrieve_profiles(SCOPE) == {}
        assert bank.retrieve_profiles(other)["user-profile"]["technical_stack"] == "Rust"
        # A new value after expiry starts the field again (the expired memory gives way).
        bank.generate_memories(SCOPE, events=[{**FIRST[0], "event_id": "e9"}]).wait(timeout=60, process=True)
        assert bank.retrieve_profiles(SCOPE) == {"user-profile": {"technical_stack": "ADK"}}


def test_a_deleted_field_does_not_come_back_from_the_same_events(db_url):
    with MemoryBank(db_url, provider=RulesProvider()) as bank:
        bank.create_profile_schema("user-profile", UserProfile)
        bank.append_events(SCOPE, "s1", FIRST)
        bank.generate_memories(SCOPE, session_id="s1").wait(timeout=60, process=True)
        deleted = field_memory(bank, "technical_stack")
        assert deleted.structured_content["value"] == "ADK"
        bank.delete_memory(deleted.name)
        # The same session again (a new request_id, as ADK's add_session_to_memory): the field stays deleted.
        again = bank.generate_memories(SCOPE, session_id="s1", request_id="new").wait(timeout=60, process=True)
        assert again.error is None and bank.retrieve_profiles(SCOPE) == {}
        assert any(r["reason"].startswith(f"source_event_ids: e1 were the source of memory {deleted.name}")
                   for r in again.rejected_items), again.rejected_items
        # A new statement brings it back.
        bank.append_events(SCOPE, "s1", [{**FIRST[0], "event_id": "e3", "timestamp": "2025-01-12T10:00:00Z"}])
        bank.generate_memories(SCOPE, session_id="s1", request_id="newer",
                               start_time="2025-01-12T00:00:00Z").wait(timeout=60, process=True)
        assert bank.retrieve_profiles(SCOPE) == {"user-profile": {"technical_stack": "ADK"}}


def test_profiles_only_and_facts_source(db_url):
    with MemoryBank(db_url, provider=RulesProvider()) as bank:
        bank.create_profile_schema("user-profile", UserProfile)
        op = bank.generate_memories(SCOPE, events=[{**FIRST[0], "text": "I use Django. I moved to Lisbon last week."}],
                                    disable_natural_language_memories=True).wait(timeout=60, process=True)
        assert [g.memory.memory_type for g in op.generated_memories] == ["STRUCTURED_PROFILE"]
        op = bank.generate_memories(SCOPE, facts=["The user uses Kotlin"]).wait(timeout=60, process=True)
        assert bank.retrieve_profiles(SCOPE)["user-profile"]["technical_stack"] == "Django, Kotlin"
        assert [m.fact for m in bank.list_memories(SCOPE).memories] == ["The user uses Kotlin"]
        op = bank.generate_memories(SCOPE, facts=["The user uses Go"], profile_schemas=[]).wait(timeout=60,
                                                                                                process=True)
        assert bank.retrieve_profiles(SCOPE)["user-profile"]["technical_stack"] == "Django, Kotlin"
        with pytest.raises(InvalidArgumentError, match=r"profile_schemas\[0\]"):
            bank.generate_memories(SCOPE, facts=["x"], profile_schemas=["nope"])


def test_two_concurrent_operations_filling_one_field_end_with_one_field_memory(db_url, conn):
    conn.execute("select membank.create_profile_schema('user-profile', %s)", (Jsonb(UserProfile.model_json_schema()),))
    names = [conn.execute("select membank.generate_memories(scope => %s, events => %s) as n",
                          (Jsonb(SCOPE), Jsonb(events))).fetchone()["n"] for events in (FIRST, SECOND)]
    replies = [{"memories": [], "profiles": {"user-profile": {"technical_stack": v}}} for v in ("ADK", "Python")]
    first = psycopg.connect(db_url)
    second = psycopg.connect(db_url)
    try:
        jobs = [c.execute("select job_id from membank.claim_generation_jobs(1, %s)", (n,)).fetchone()[0]
                for c, n in ((first, names[0]), (second, names[1]))]
        # Both were planned against an empty field; the first applies and holds the scope's lock.
        assert first.execute("select membank.complete_generation_job(%s, %s)",
                             (jobs[0], json.dumps(replies[0]))).fetchone()[0] == "done"
        result: list = []
        waiter = threading.Thread(target=lambda: result.append(second.execute(
            "select membank.complete_generation_job(%s, %s)", (jobs[1], json.dumps(replies[1]))).fetchone()[0]))
        waiter.start()
        waiter.join(0.5)
        first.commit()
        waiter.join(30)
        second.commit()
    finally:
        first.close()
        second.close()
    # The second found the field set after the lock: it goes on to consolidation, where the value is merged.
    assert result == ["next"]
    worker = GenerationWorker(db_url, RulesProvider(), embedder=None)
    try:
        assert worker.process_pending() == 1
    finally:
        worker.close()
    rows = conn.execute("select structured_content ->> 'value' as v from membank_private.memories"
                        " where memory_type = 'STRUCTURED_PROFILE'").fetchall()
    assert [r["v"] for r in rows] == ["ADK, Python"]


def test_list_and_retrieve_memories_show_profile_fields_only_when_asked(db_url):
    with MemoryBank(db_url, provider=RulesProvider()) as bank:
        bank.create_profile_schema("user-profile", UserProfile)
        bank.create_memory(SCOPE, "The user likes tea")
        bank.generate_memories(SCOPE, events=FIRST, disable_natural_language_memories=True).wait(
            timeout=60, process=True)
        assert [m.fact for m in bank.list_memories(SCOPE).memories] == ["The user likes tea"]
        assert [r.memory.fact for r in bank.retrieve_memories(SCOPE)] == ["The user likes tea"]
        fields = bank.list_memories(SCOPE, memory_type="STRUCTURED_PROFILE").memories
        assert [m.structured_content["value"] for m in fields] == ["ADK"]


def test_build_context_puts_the_scopes_profiles_first_within_the_budget(db_url):
    from membank.context import PROFILES_HEADER, build_context

    with MemoryBank(db_url, provider=RulesProvider()) as bank:
        bank.create_profile_schema("user-profile", UserProfile)
        bank.create_memory(SCOPE, "The user likes green tea")
        bank.generate_memories(SCOPE, events=FIRST + SECOND, disable_natural_language_memories=True).wait(
            timeout=60, process=True)
        ctx = build_context(bank, None, SCOPE, "s1", "What tea does the user like?", budget_tokens=500)
        assert ctx.text.startswith(PROFILES_HEADER + '\n- user-profile: job_status = "student"; '
                                   'technical_stack = "ADK, Python"')
        assert "green tea" in ctx.text and ctx.sections["profiles"] > 0 and ctx.tokens <= 500
        small = build_context(bank, None, SCOPE, "s1", "What tea does the user like?", budget_tokens=12)
        assert small.tokens <= 12 and "user-profile" in small.dropped["profiles"]


def test_schema_management_errors_and_roles(postgresql, conn):
    import uuid as _uuid

    from conftest import url_for

    with pytest.raises(psycopg.errors.NoDataFound, match="^schema_id: no profile schema"):
        conn.execute("select membank.get_profile_schema('nope')")
    with pytest.raises(psycopg.errors.NoDataFound):
        conn.execute("select membank.update_profile_schema('nope', '{\"properties\": {\"a\": {\"type\": \"string\"}}}')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="^disable_natural_language_memories"):
        conn.execute("select membank.generate_memories(scope => '{\"u\": \"1\"}', facts => '[\"x\"]',"
                     " disable_natural_language_memories => true)")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="^profile_schemas"):
        conn.execute("select membank.generate_memories(scope => '{\"u\": \"1\"}', facts => '[\"x\"]',"
                     " profile_schemas => '{\"a\": 1}')")
    conn.execute("select membank.create_profile_schema('user-profile', %s)", (Jsonb(UserProfile.model_json_schema()),))
    updated = conn.execute("select * from membank.update_profile_schema('user-profile',"
                           " '{\"properties\": {\"city\": {\"type\": \"string\"}}}')").fetchone()
    assert list(updated["memory_schema"]["properties"]) == ["city"] and updated["update_time"] >= updated["create_time"]
    # Schemas are the admin's: the application (writer) reads them and the profiles, and cannot change them.
    role = f"app_{_uuid.uuid4().hex[:8]}"
    conn.execute(f'create role "{role}" login in role membank_writer')
    info = postgresql.info
    try:
        with psycopg.connect(url_for(info.host, info.port, role, info.dbname), autocommit=True) as app:
            assert app.execute("select count(*) from membank.list_profile_schemas()").fetchone()[0] == 1
            assert app.execute("select membank.retrieve_profiles('{\"u\": \"1\"}')").fetchone()[0] == {}
            for sql in ("select membank.create_profile_schema('x', '{\"properties\": {\"a\": {\"type\": \"string\"}}}')",
                        "select membank.delete_profile_schema('user-profile', true)",
                        "select membank.bind_role_to_scope('membank_reader', '{\"u\": \"1\"}')"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    app.execute(sql)
    finally:
        conn.execute(f'drop role "{role}"')
