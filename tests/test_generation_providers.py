"""The gemini and openai providers, through their real client libraries, against local wire-protocol servers.

pytest-httpserver answers as the Gemini API (``:generateContent``) and as an
OpenAI-compatible server (``/v1/chat/completions``); the replies are scripted
model output, including the malformed kinds real models produce.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from werkzeug import Request, Response

from membank import InvalidArgumentError, MemoryBank
from membank.generation import get_provider
from membank.generation.gemini import GeminiProvider
from membank.generation.openai_compat import OpenAICompatProvider
from membank.generation.rules import RulesProvider

SCOPE = {"user_id": "u1"}
EVENTS = [{"event_id": "e1", "author": "user", "text": "I moved to Lisbon and I like green tea.",
           "timestamp": "2023-05-24T10:00:00Z"}]


def chat_completion(text: str) -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "local",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def gemini_response(text: str) -> dict:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "modelVersion": "gemini-2.5-flash"}


class Script:
    """Scripted model: replies by stage, recording every request body."""

    def __init__(self, extract: str, consolidate: str | None = None) -> None:
        self.extract, self.consolidate = extract, consolidate
        self.bodies: list[dict] = []

    def reply_for(self, prompt: str) -> str:
        if prompt.startswith("You extract long-term memories"):
            return self.extract
        assert self.consolidate is not None, "no consolidation reply scripted"
        return self.consolidate


def openai_bank(httpserver, db_url: str, script: Script) -> MemoryBank:
    def handle(request: Request) -> Response:
        body = request.get_json()
        script.bodies.append(body)
        text = script.reply_for(body["messages"][-1]["content"])
        return Response(json.dumps(chat_completion(text)), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), max_retries=0)
    return MemoryBank(db_url, provider=provider)


EXTRACTED = json.dumps({"memories": [
    {"fact": "The user moved to Lisbon on 2023-05-24.", "topics": ["USER_PERSONAL_INFO"], "source_event_ids": ["e1"]},
    {"fact": "The user likes green tea.", "topics": ["USER_PREFERENCES"], "source_event_ids": ["e1"]}]})


def test_openai_provider_runs_an_operation_through_the_wire(httpserver, db_url):
    script = Script(EXTRACTED, json.dumps({"actions": [{"fact_index": 0, "action": "CREATE"},
                                                      {"fact_index": 1, "action": "CREATE"}]}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error is None and op.model_calls == 2
        assert sorted(g.memory.fact for g in op.generated_memories) == [
            "The user likes green tea.", "The user moved to Lisbon on 2023-05-24."]
    extract, consolidate = script.bodies
    assert extract["model"] == "local-model" and extract["temperature"] == 0
    assert extract["response_format"]["type"] == "json_schema"
    assert extract["response_format"]["json_schema"]["schema"]["required"] == ["memories"]
    assert "[e1] 2023-05-24 10:00 UTC (Wednesday) user: I moved to Lisbon" in extract["messages"][0]["content"]
    assert "0. \"The user moved to Lisbon on 2023-05-24.\"" in consolidate["messages"][0]["content"]


def test_an_unknown_memory_name_is_rejected_item_by_item_and_valid_items_apply(httpserver, db_url):
    with MemoryBank(db_url) as setup:
        rome = setup.create_memory(SCOPE, "The user lives in Rome.")
        setup.process_pending()
    unknown = str(uuid.uuid4())
    script = Script(EXTRACTED, json.dumps({"actions": [
        {"fact_index": 1, "action": "UPDATE", "memory_name": unknown, "fact": "The user likes green tea."},
        {"fact_index": 0, "action": "UPDATE", "memory_name": str(rome.name),
         "fact": "The user lives in Lisbon since 2023-05-24."}]}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error is None
        assert [(g.action, g.memory.name, g.memory.fact) for g in op.generated_memories] == [
            ("UPDATED", rome.name, "The user lives in Lisbon since 2023-05-24.")]
        [rejected] = op.rejected_items
        assert rejected["stage"] == "CONSOLIDATE" and rejected["item"]["memory_name"] == unknown
        assert rejected["reason"] == f"memory_name: {unknown} was not among the candidates shown to the model for fact_index 1"
        assert [m.fact for m in bank.iter_memories(SCOPE)] == ["The user lives in Lisbon since 2023-05-24."]


@pytest.mark.parametrize("reply", [
    "```json\n" + EXTRACTED + "\n```",
    "Sure! Here are the memories:\n" + EXTRACTED + "\nLet me know if you need more.",
    EXTRACTED.replace("]}]}", "],},],}"),
], ids=["fenced", "prose", "trailing commas"])
def test_malformed_but_repairable_replies_are_parsed(httpserver, db_url, reply):
    script = Script(reply, json.dumps({"actions": []}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error is None and len(op.generated_memories) == 2


@pytest.mark.parametrize("reply", [
    "I would update the first memory and create the second.",
    "[" * 100_000 + "]" * 100_000,  # deeper than PostgreSQL's stack allows to parse: not JSON, not an error
], ids=["prose", "nested too deep"])
def test_an_invalid_reply_fails_the_operation_and_applies_nothing(httpserver, db_url, reply):
    script = Script(EXTRACTED, reply)
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.done and op.error["code"] == "INVALID_MODEL_OUTPUT" and op.error["stage"] == "CONSOLIDATE"
        assert "holds no JSON value" in op.error["message"]
        assert op.generated_memories == [] and list(bank.iter_memories(SCOPE)) == []


def test_extraction_items_are_validated_one_by_one(httpserver, db_url):
    script = Script(json.dumps({"memories": [
        {"fact": "", "topics": [], "source_event_ids": []},
        {"fact": "The user likes tea.", "topics": ["GOSSIP"], "source_event_ids": ["e1"]},
        {"fact": "The user likes jazz.", "topics": ["USER_PREFERENCES"], "source_event_ids": ["e404"]},
        {"fact": "The user likes green tea.", "topics": ["USER_PREFERENCES"], "source_event_ids": ["e1"]}]}),
        json.dumps({"actions": [{"fact_index": 0, "action": "CREATE"}]}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
    assert [g.memory.fact for g in op.generated_memories] == ["The user likes green tea."]
    assert [r["reason"] for r in op.rejected_items] == [
        "fact: must be a non-empty string", "topics: none of GOSSIP was requested",
        "source_event_ids: e404 not among the events of this operation"]


def test_failed_calls_retry_with_backoff_then_fail_the_operation_visibly(httpserver, db_url, conn):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        {"error": {"message": "overloaded", "type": "server_error"}}, status=503)
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), max_retries=0)
    with MemoryBank(db_url, provider=provider, model_attempts=5) as bank:
        pending = bank.generate_memories(SCOPE, events=EVENTS)
        for attempt in range(1, 6):
            assert bank.process_pending() == 1
            job = conn.execute("select attempts, retry_time > now() as later from membank_private.generation_jobs"
                               ).fetchone()
            if attempt < 5:
                assert job == {"attempts": attempt, "later": True}  # backing off
                assert not pending.get().done
                conn.execute("update membank_private.generation_jobs set retry_time = now()")
        op = pending.get()
    assert job is None and op.done and op.error["code"] == "MODEL_CALL_FAILED" and op.error["attempts"] == 5
    assert "overloaded" in op.error["message"]


def test_gemini_provider_sends_the_json_schema_and_reads_the_reply(httpserver, db_url):
    bodies = []

    def handle(request: Request) -> Response:
        body = request.get_json()
        bodies.append(body)
        prompt = body["contents"][0]["parts"][0]["text"]
        text = EXTRACTED if prompt.startswith("You extract") else json.dumps({"actions": []})
        return Response(json.dumps(gemini_response(text)), content_type="application/json")

    # google-genai picks the API version (v1beta, or v1 with a custom base URL): match either.
    httpserver.expect_request(re.compile(r"/v1(beta)?/models/gemini-2.5-flash:generateContent"), method="POST"
                              ).respond_with_handler(handle)
    provider = GeminiProvider(api_key="test-key", base_url=httpserver.url_for("/"))
    with MemoryBank(db_url, provider=provider) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
    assert op.error is None and len(op.generated_memories) == 2
    config = bodies[0]["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["required"] == ["memories"]
    assert config["temperature"] == 0


def test_get_provider_specs(monkeypatch):
    monkeypatch.delenv("MEMBANK_PROVIDER", raising=False)
    assert isinstance(get_provider(), RulesProvider)
    monkeypatch.setenv("MEMBANK_PROVIDER", "openai:m1")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")  # OpenAI's own endpoint is refused without one
    provider = get_provider()
    assert isinstance(provider, OpenAICompatProvider) and provider.model_id == "openai/m1"
    for bad in ("openai", "openai:", "claude", "rules:x"):
        with pytest.raises(InvalidArgumentError) as info:
            get_provider(bad)
        assert info.value.argument == "MEMBANK_PROVIDER" and "rules" in info.value.hint
