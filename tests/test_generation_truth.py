"""GenerateMemories keeps the newest truth.

Event-time order, one action per memory and per fact, long inputs cut into
batches within a token budget, model replies as real models write them,
facts in the conversation's language, through the rules provider and
through the real openai / google-genai client libraries against local
wire-protocol servers (pytest-httpserver).
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from werkzeug import Request, Response

from membank import MemoryBank
from membank.buffer import get_tokenizer
from membank.generation.gemini import GeminiProvider
from membank.generation.openai_compat import OpenAICompatProvider
from test_generation_providers import EVENTS, EXTRACTED, Script, chat_completion, openai_bank

SCOPE = {"user_id": "u1"}
DEFAULT_BUDGET = 8000


def event(text: str, when: str = "2023-05-24T10:00:00Z", author: str = "user", event_id: str | None = None) -> dict:
    return {"event_id": event_id or uuid.uuid4().hex, "author": author, "text": text, "timestamp": when}


def facts_in(bank: MemoryBank, scope: dict = SCOPE) -> list[str]:
    return sorted(m.fact for m in bank.iter_memories(scope))


class RecordingRules:
    """The rules provider, recording every prompt and structured request it answers."""

    name = "rules"
    model_id = "rules/v1"

    def __init__(self) -> None:
        from membank.generation.rules import RulesProvider

        self._rules = RulesProvider()
        self.prompts: list[str] = []
        self.requests: list[dict] = []

    def complete(self, prompt, response_schema=None, *, input=None):
        self.prompts.append(prompt)
        self.requests.append(input)
        return self._rules.complete(prompt, response_schema, input=input)


# -- 1. the event's own time decides what is current ---------------------------------------------------------------

def test_an_older_statement_processed_later_does_not_overwrite_a_newer_one(bank):
    newer = bank.generate_memories(SCOPE, events=[event("I hate cats.", "2023-06-01T10:00:00Z")]).wait(30, process=True)
    assert [g.memory.fact for g in newer.generated_memories] == ["The user hates cats."]
    backfill = bank.generate_memories(SCOPE, events=[event("I love cats.", "2023-05-01T10:00:00Z")]).wait(
        30, process=True)
    assert backfill.error is None and backfill.generated_memories == []
    assert facts_in(bank) == ["The user hates cats."]
    [rejected] = backfill.rejected_items
    assert rejected["stage"] == "CONSOLIDATE" and rejected["item"]["action"] == "UPDATE"
    assert rejected["reason"].startswith("superseded: memory ")
    assert "said 2023-06-01 10:00 UTC, after this fact (said 2023-05-01 10:00 UTC)" in rejected["reason"]


def test_within_one_operation_the_later_statement_wins(bank):
    op = bank.generate_memories(SCOPE, events=[
        event("I love cats.", "2023-05-24T10:00:00Z", event_id="e1"),
        event("Actually I hate cats.", "2023-05-24T10:00:00Z", event_id="e2")]).wait(30, process=True)
    assert op.error is None
    assert facts_in(bank) == ["The user hates cats."]
    # The earlier statement is the memory's history, not a second current fact.
    [name] = {g.memory.name for g in op.generated_memories}
    assert [(r.action, r.fact) for r in bank.list_revisions(name)] == [
        ("CREATED", "The user loves cats."), ("UPDATED", "The user hates cats.")]


def test_facts_are_consolidated_in_event_time_order_not_reply_order(httpserver, db_url):
    # The model lists the newer statement first; consolidation goes by event time.
    events = [event("I love cats.", "2023-05-01T10:00:00Z", event_id="old"),
              event("I hate cats.", "2023-06-01T10:00:00Z", event_id="new")]
    extracted = json.dumps({"memories": [
        {"fact": "The user hates cats.", "topics": ["USER_PREFERENCES"], "source_event_ids": ["new"]},
        {"fact": "The user loves cats.", "topics": ["USER_PREFERENCES"], "source_event_ids": ["old"]}]})
    script = Script(extracted, json.dumps({"actions": [
        {"fact_index": 0, "action": "CREATE"},
        {"fact_index": 1, "action": "UPDATE", "memory_name": "fact:0", "fact": "The user hates cats."}]}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=events).wait(30, process=True)
        assert op.error is None and facts_in(bank) == ["The user hates cats."]
    prompt = script.bodies[1]["messages"][0]["content"]
    assert prompt.index('0. "The user loves cats."') < prompt.index('1. "The user hates cats."')
    assert "said 2023-05-01 10:00 UTC" in prompt
    assert '- memory_name fact:0 (new fact 0 above, said 2023-05-01 10:00 UTC): "The user loves cats."' in prompt


def test_the_consolidation_prompt_shows_event_time_and_an_older_update_is_rejected(httpserver, db_url):
    with MemoryBank(db_url) as setup:
        setup.generate_memories(SCOPE, events=[event("I hate cats.", "2023-06-01T10:00:00Z")]).wait(30, process=True)
        [memory] = setup.iter_memories(SCOPE)
    script = Script(json.dumps({"memories": [{"fact": "The user loves cats.", "topics": ["USER_PREFERENCES"]}]}),
                    json.dumps({"actions": [{"fact_index": 0, "action": "UPDATE", "memory_name": str(memory.name),
                                             "fact": "The user loves cats."}]}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=[event("I love cats.", "2023-05-01T10:00:00Z")]).wait(
            30, process=True)
        assert op.error is None and facts_in(bank) == ["The user hates cats."]
        assert op.rejected_items[0]["reason"].startswith(f"superseded: memory {memory.name}")
    prompt = script.bodies[1]["messages"][0]["content"]
    assert f"memory_name {memory.name} (revision 1, said 2023-06-01 10:00 UTC)" in prompt
    assert "updated" not in prompt.split("New facts:")[1]


# -- 2. one action per memory, one memory per fact -------------------------------------------------------------------

TWO_FACTS = json.dumps({"memories": [
    {"fact": "The user lives in Lisbon.", "topics": ["USER_PERSONAL_INFO"], "source_event_ids": ["e1"]},
    {"fact": "The user likes green tea.", "topics": ["USER_PREFERENCES"], "source_event_ids": ["e1"]}]})


@pytest.mark.parametrize("case", ["two updates", "two creates of one fact", "delete and update", "identical creates"])
def test_a_malformed_plan_applies_one_action_per_memory_and_fact(httpserver, db_url, case):
    with MemoryBank(db_url) as setup:
        rome = setup.create_memory(SCOPE, "The user lives in Rome.")
        setup.process_pending()
    m = str(rome.name)
    actions, expected, reason = {
        "two updates": (
            [{"fact_index": 0, "action": "UPDATE", "memory_name": m, "fact": "The user lives in Lisbon."},
             {"fact_index": 1, "action": "UPDATE", "memory_name": m, "fact": "The user likes green tea."}],
            ["The user lives in Lisbon."],
            f"memory_name: {m} already has an UPDATE earlier in this reply (item 1); one action per memory"),
        "two creates of one fact": (
            [{"fact_index": 1, "action": "CREATE"}, {"fact_index": 1, "action": "CREATE"},
             {"fact_index": 0, "action": "NONE"}],
            ["The user likes green tea.", "The user lives in Rome."],
            "fact_index: 1 already has an action earlier in this reply (item 1); one action per fact"),
        "delete and update": (
            [{"fact_index": 0, "action": "DELETE", "memory_name": m},
             {"fact_index": 1, "action": "UPDATE", "memory_name": m, "fact": "The user lives in Lisbon."}],
            ["The user lives in Lisbon."],
            f"memory_name: {m} also has an UPDATE in this reply (item 2), which is kept; one action per memory"),
        "identical creates": (
            [{"fact_index": 0, "action": "CREATE", "fact": "The user likes green tea."},
             {"fact_index": 1, "action": "CREATE"}],
            ["The user likes green tea.", "The user lives in Rome."],
            "fact: identical to memory {name}, created by this operation; a fact is created once"),
    }[case]
    script = Script(TWO_FACTS, json.dumps({"actions": actions}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error is None
        assert facts_in(bank) == expected
        changed = [g.memory.name for g in op.generated_memories]
        assert len(changed) == len(set(changed)) == 1  # exactly one action applied per memory
        [rejected] = op.rejected_items
        assert rejected["stage"] == "CONSOLIDATE"
        assert rejected["reason"] == reason.format(name=changed[0])


# -- 3. long inputs are cut into batches within the token budget -----------------------------------------------------

FILLER = ("The river runs past the old mill, where the market opens early on most days of the week. "
          "Boats come and go with crates of fruit, fish and flowers from the valley farms. ")


def test_a_40k_character_event_is_split_into_batches_within_the_budget(db_url):
    long_text = ("My name is Joy. " + FILLER * 120 + "I live in Porto with my husband. " + FILLER * 120
                 + "I work as a nurse at the city hospital.")
    assert len(long_text) > 40_000
    provider = RecordingRules()
    with MemoryBank(db_url, provider=provider) as bank:
        op = bank.generate_memories(SCOPE, events=[event(long_text, event_id="long")]).wait(60, process=True)
        assert op.error is None
        facts = facts_in(bank)
        assert len(facts) == 3 and [w for w in ("Joy", "Porto", "nurse") if any(w in f for f in facts)] == [
            "Joy", "Porto", "nurse"]  # from the start, the middle and the end of the event
        # Every memory remembers the one event it came from.
        for memory in bank.iter_memories(SCOPE):
            assert bank.list_revisions(memory.name)[-1].source_event_ids == ["long"]
    extraction = [r for r in provider.requests if r["task"] == "extract"]
    assert len(extraction) >= 2 and op.model_calls == len(provider.prompts) >= 3
    assert [r["events"][0]["part"] for r in extraction] == list(range(1, len(extraction) + 1))
    tokenizer = get_tokenizer()
    for prompt in provider.prompts:
        assert len(prompt.encode()) / 3 <= DEFAULT_BUDGET and tokenizer.count(prompt) <= DEFAULT_BUDGET


def test_twenty_2000_character_events_are_sent_in_batches(httpserver, db_url, conn):
    conn.execute(f"alter database {conn.info.dbname} set membank.max_prompt_tokens = 6000")
    events = [event(f"Event {i}: " + ("I like green tea. " + FILLER * 12)[:1990], event_id=f"e{i}") for i in range(20)]
    assert sum(len(e["text"]) for e in events) >= 39_000
    script = Script(json.dumps({"memories": [{"fact": "The user likes green tea.", "topics": ["USER_PREFERENCES"]}]}),
                    json.dumps({"actions": []}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=events).wait(60, process=True)
        assert op.error is None and facts_in(bank) == ["The user likes green tea."]
    prompts = [b["messages"][0]["content"] for b in script.bodies]
    extraction = [p for p in prompts if p.startswith("You extract")]
    assert len(extraction) >= 2 and op.model_calls == len(prompts) == len(extraction) + 1
    for prompt in prompts:
        assert len(prompt.encode()) / 3 <= 6000
    # Every event is in exactly one batch, in order.
    seen = [int(i) for p in extraction for i in re.findall(r"^\[e(\d+)\]", p, re.MULTILINE)]
    assert seen == list(range(20))
    # Unattributed facts of a batch come from the batch's events only; duplicates across batches are one fact.
    assert len(op.generated_memories) == 1


def counting_handler(statuses: list[int], calls: list[str], extract_reply: str = EXTRACTED):
    def handle(request: Request) -> Response:
        prompt = request.get_json()["messages"][0]["content"]
        calls.append(prompt[:20])
        status = statuses.pop(0) if statuses else 200
        if status != 200:
            return Response(json.dumps({"error": {"message": f"the provider says {status}", "type": "invalid"}}),
                            status=status, content_type="application/json")
        text = extract_reply if prompt.startswith("You extract") else json.dumps({"actions": []})
        return Response(json.dumps(chat_completion(text)), content_type="application/json")
    return handle


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_request_that_will_never_succeed_fails_the_operation_at_once(httpserver, db_url, status):
    calls: list[str] = []
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
        counting_handler([status], calls))
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), max_retries=2)
    with MemoryBank(db_url, provider=provider) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
    assert op.done and op.error["code"] == "MODEL_CALL_FAILED" and op.error["attempts"] == 1
    assert f"the provider says {status}" in op.error["message"]
    assert len(calls) == 1 and op.model_calls == 1


def test_gemini_403_fails_at_once(httpserver, db_url):
    calls = []

    def handle(request: Request) -> Response:
        calls.append(1)
        return Response(json.dumps({"error": {"code": 403, "message": "API key not valid", "status": "PERMISSION_DENIED"}}),
                        status=403, content_type="application/json")

    httpserver.expect_request(re.compile(r"/v1(beta)?/models/.*:generateContent"), method="POST"
                              ).respond_with_handler(handle)
    provider = GeminiProvider(api_key="test-key", base_url=httpserver.url_for("/"))
    with MemoryBank(db_url, provider=provider) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
    assert op.error["code"] == "MODEL_CALL_FAILED" and "API key not valid" in op.error["message"]
    assert len(calls) == 1


def test_503_twice_then_200_is_retried_with_backoff_and_done(httpserver, db_url, conn):
    calls: list[str] = []
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
        counting_handler([503, 503], calls))
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), max_retries=0)
    with MemoryBank(db_url, provider=provider, model_attempts=3) as bank:  # the default is 2 attempts
        pending = bank.generate_memories(SCOPE, events=EVENTS)
        for _ in range(2):
            assert bank.process_pending() == 1
            assert not pending.get().done
            conn.execute("update membank_private.generation_jobs set retry_time = now()")  # the backoff, elapsed
        op = pending.wait(30, process=True)
    assert op.error is None and len(op.generated_memories) == 2
    assert [c.startswith("You extract") for c in calls] == [True, True, True, False]  # 3 extraction calls
    assert op.model_calls == 4


# -- 4. model replies as real models write them ----------------------------------------------------------------------

DRAFT = json.dumps({"memories": [{"fact": "The user maybe likes coffee.", "topics": ["USER_PREFERENCES"]}]})


@pytest.mark.parametrize("reply", [
    "<think>The user said two things. A draft: " + DRAFT + " No: tea, not coffee.</think>" + EXTRACTED,
    "Output for the user: " + EXTRACTED,
    "Here is the format:\n```json\n{\"memories\": [{\"fact\": \"...\"}]}\n```\nAnd the answer:\n```json\n"
    + EXTRACTED + "\n```",
], ids=["reasoning", "labelled prose", "two fenced blocks"])
def test_real_model_reply_shapes_parse(httpserver, db_url, reply):
    script = Script(reply, json.dumps({"actions": []}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error is None and op.rejected_items == []
        assert facts_in(bank) == ["The user likes green tea.", "The user moved to Lisbon on 2023-05-24."]


def test_a_nul_inside_a_reply_string_is_stripped(httpserver, db_url):
    reply = EXTRACTED.replace("green tea", "green\\u0000 tea")
    assert "\\u0000" in reply
    script = Script(reply, json.dumps({"actions": [{"fact_index": 0, "action": "CREATE"},
                                                  {"fact_index": 1, "action": "CREATE", "fact": "Tea\u0000."}]}))
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error is None
        assert facts_in(bank) == ["Tea.", "The user moved to Lisbon on 2023-05-24."]


@pytest.mark.parametrize("reply", ["<think>{\"memories\": []}</think>I cannot help with that.", "no JSON at all"])
def test_a_reply_without_json_fails_cleanly_with_nothing_applied(httpserver, db_url, reply):
    script = Script(reply)
    with openai_bank(httpserver, db_url, script) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error["code"] == "INVALID_MODEL_OUTPUT" and "holds no JSON value" in op.error["message"]
        assert op.generated_memories == [] and facts_in(bank) == []


# -- 5. facts in the conversation's language -------------------------------------------------------------------------

def test_prompts_ask_for_facts_in_the_speakers_language(httpserver, db_url):
    script = Script(EXTRACTED, json.dumps({"actions": []}))
    with openai_bank(httpserver, db_url, script) as bank:
        bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
    extract, consolidate = (b["messages"][0]["content"] for b in script.bodies)
    assert "in the language the speaker used; do not translate it" in extract
    assert "in the language of the new fact; do not translate it" in consolidate


@pytest.mark.parametrize("texts, language", [
    (["私の名前はユキです。", "東京に住んでいて、猫が大好きです。"], "Japanese"),
    (["Меня зовут Юля.", "Я живу в Москве и люблю кошек."], "Russian or another Cyrillic-script language"),
    (["Je m'appelle Claire et j'habite à Lyon.", "J'ai un chat et je suis infirmière."], "French"),
])
def test_the_rules_provider_reports_a_language_it_cannot_read(bank, texts, language):
    events = [event(t, event_id=f"e{i}") for i, t in enumerate(texts)]
    op = bank.generate_memories(SCOPE, events=events).wait(30, process=True)
    assert op.done and op.error is None and op.generated_memories == []
    [rejected] = op.rejected_items
    assert rejected["stage"] == "EXTRACT" and rejected["item"]["source_event_ids"] == ["e0", "e1"]
    assert rejected["reason"].startswith(f"unsupported language: {language}; the rules provider extracts facts "
                                         "from English only")
