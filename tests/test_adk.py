"""MembankMemoryService: an ADK BaseMemoryService over membank, and google-adk's own memory-service cases.

The conformance cases re-express the behavioural tests of google-adk's
tests/unittests/memory/test_in_memory_memory_service.py and
test_sqlite_memory_service.py (google/adk-python; the wheel ships no tests)
against this service. Adapted where the backend necessarily differs:
ADK's services store and return raw events, membank returns the facts
GenerateMemories extracted (with the offline rules provider: first-person
statements become "The user ..." facts), so the search cases use
first-person texts; a worker runs the generation (here in process, with
``wait_for_completion`` and ``process_in_process``); and hybrid retrieval
ranks every memory of the scope, so "no match" needs a ``min_similarity``.
Each test's docstring names the ADK case it re-expresses.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("google.adk")

from google.adk.events.event import Event  # noqa: E402
from google.adk.memory import BaseMemoryService  # noqa: E402
from google.adk.memory.memory_entry import MemoryEntry  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.genai import types  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.adk import MembankMemoryService  # noqa: E402

APP = "test-app"
USER = "test-user"
OTHER_USER = "another-user"


def event(event_id: str, text: str | None, *, author: str = "user", timestamp: float = 1684922400.0) -> Event:
    content = types.Content(role="user", parts=[types.Part(text=text)]) if text is not None else None
    return Event(id=event_id, invocation_id=f"inv-{event_id}", author=author, timestamp=timestamp, content=content)


def session(session_id: str, events: list[Event], *, user_id: str = USER, app_name: str = APP) -> Session:
    return Session(app_name=app_name, user_id=user_id, id=session_id, last_update_time=1000, events=events)


SESSION_1 = session("session-1", [
    event("event-1a", "The ADK is a great toolkit."),
    event("event-1b", None),  # no content: skipped
    event("event-1c", "I agree. The Agent Development Kit (ADK) rocks!", author="model", timestamp=1684922401.0),
])
SESSION_2 = session("session-2", [event("event-2a", "I like to code in Python.", timestamp=1684922500.0)])


@pytest.fixture
def bank(db_url, embedder):
    with MemoryBank(db_url, embedder=embedder, max_size=4) as b:
        yield b


@pytest.fixture
def service(bank):
    """Waits for each operation and runs it in this process (no separate worker in a test)."""
    return MembankMemoryService(bank, wait_for_completion=True, process_in_process=True)


def run(coro):
    return asyncio.run(coro)


def stored_ids(bank, session_id, user_id=USER):
    return [e.event_id for e in bank.list_events({"app_name": APP, "user_id": user_id}, session_id)]


def texts(response):
    return [m.content.parts[0].text for m in response.memories]


def search(service, query, user_id=USER, app_name=APP):
    return run(service.search_memory(app_name=app_name, user_id=user_id, query=query))


# -- Must hold -------------------------------------------------------------------------------
def test_two_user_turns_are_recalled_for_the_user_and_nobody_else(bank):
    """Fire-and-forget (the default): add returns at once; a worker runs the operation; search finds the fact."""
    service = MembankMemoryService(bank)
    s = session("s-must", [event("m1", "I moved to Lisbon last week."),
                           event("m2", "Hello! How can I help?", author="model", timestamp=1684922401.0),
                           event("m3", "I am allergic to peanuts.", timestamp=1684922402.0)])
    run(service.add_session_to_memory(s))
    assert len(service.operations) == 1 and not service.operations[0].get().done  # queued, not run
    bank.process_pending()  # the worker
    assert service.operations[0].get().done
    found = search(service, "What is the user allergic to?")
    assert texts(found)[0] == "The user is allergic to peanuts."
    entry = found.memories[0]
    assert entry.author == "user" and entry.id and entry.timestamp.endswith("+00:00")
    assert entry.custom_metadata["topics"] and entry.custom_metadata["revision"] == 1
    assert entry.custom_metadata["degraded"] is False and entry.custom_metadata["similarity"] > 0.8
    assert set(texts(found)) == {"The user is allergic to peanuts.",
                                 "The user moved to Lisbon in the week of 2023-05-17."}
    assert search(service, "What is the user allergic to?", user_id=OTHER_USER).memories == []
    assert search(service, "allergic", app_name="other-app").memories == []
    # adding the same session again stores nothing twice and starts no operation
    run(service.add_session_to_memory(s))
    assert len(service.operations) == 1 and stored_ids(bank, "s-must") == ["m1", "m2", "m3"]


def test_wait_for_completion_per_call(bank):
    service = MembankMemoryService(bank, process_in_process=True)
    run(service.add_events_to_memory(app_name=APP, user_id=USER, session_id="s", events=[
        event("w1", "I prefer jasmine tea.")], custom_metadata={"wait_for_completion": True, "ttl": 3600}))
    op = service.operations[-1].get()
    assert op.done and [g.memory.fact for g in op.generated_memories] == ["The user prefers jasmine tea."]
    assert op.generated_memories[0].memory.expire_time is not None


def test_every_optional_method_of_the_installed_base_class_is_implemented():
    optional = [name for name, member in vars(BaseMemoryService).items()
                if callable(member) and not name.startswith("_")
                and not getattr(member, "__isabstractmethod__", False)]
    assert set(optional) >= {"add_events_to_memory", "add_memory", "delete_memory"}
    for name in optional:
        assert getattr(MembankMemoryService, name) is not getattr(BaseMemoryService, name), name


# -- google-adk's in-memory service cases --------------------------------------------------------
def test_add_session_to_memory(service, bank):
    """ADK test_add_session_to_memory: events without content are skipped (read back via list_events)."""
    run(service.add_session_to_memory(SESSION_1))
    assert stored_ids(bank, "session-1") == ["event-1a", "event-1c"]


def test_add_events_to_memory_with_explicit_events(service, bank):
    """ADK test_add_events_to_memory_with_explicit_events."""
    run(service.add_events_to_memory(app_name=APP, user_id=USER, session_id="session-1",
                                     events=[SESSION_1.events[0]]))
    assert stored_ids(bank, "session-1") == ["event-1a"]


def test_add_events_to_memory_without_session_id_uses_default_bucket(service, bank):
    """ADK test_add_events_to_memory_without_session_id_uses_default_bucket (ours: session "adk-events")."""
    run(service.add_events_to_memory(app_name=APP, user_id=USER, events=[SESSION_1.events[0]]))
    assert stored_ids(bank, "adk-events") == ["event-1a"]


def test_add_events_to_memory_appends_without_replacing(service, bank):
    """ADK test_add_events_to_memory_appends_without_replacing."""
    run(service.add_session_to_memory(SESSION_1))
    run(service.add_events_to_memory(app_name=APP, user_id=USER, session_id="session-1",
                                     events=[event("event-1d", "A new fact.", timestamp=1684922403.0)]))
    assert stored_ids(bank, "session-1") == ["event-1a", "event-1c", "event-1d"]


def test_add_events_to_memory_deduplicates_event_ids(service, bank):
    """ADK test_add_events_to_memory_deduplicates_event_ids: the first version stays, no error."""
    run(service.add_session_to_memory(SESSION_1))
    run(service.add_events_to_memory(app_name=APP, user_id=USER, session_id="session-1",
                                     events=[event("event-1a", "Updated duplicate text.")]))
    stored = bank.list_events({"app_name": APP, "user_id": USER}, "session-1")
    assert [(e.event_id, e.text) for e in stored] == [
        ("event-1a", "The ADK is a great toolkit."), ("event-1c", "I agree. The Agent Development Kit (ADK) rocks!")]


def test_add_session_with_no_events_to_memory(service, bank):
    """ADK test_add_session_with_no_events_to_memory: no error, nothing stored, no operation."""
    run(service.add_session_to_memory(session("session-4", [])))
    assert stored_ids(bank, "session-4") == [] and service.operations == []


def test_search_memory_simple_match(service):
    """ADK test_search_memory_simple_match (ours returns the extracted fact, not the event text)."""
    run(service.add_session_to_memory(SESSION_1))
    run(service.add_session_to_memory(SESSION_2))
    result = search(service, "Python")
    assert texts(result) == ["The user likes to code in Python."] and result.memories[0].author == "user"


def test_search_memory_case_insensitive_match(service):
    """ADK test_search_memory_case_insensitive_match (first-person text, so that a fact is extracted)."""
    run(service.add_session_to_memory(session("s", [event("e", "I love the Agent Development Kit.")])))
    assert texts(search(service, "development")) == ["The user loves the Agent Development Kit."]


def test_search_memory_multiple_matches(service):
    """ADK test_search_memory_multiple_matches."""
    run(service.add_session_to_memory(session("s", [event("e1", "I use the ADK at work."),
                                                    event("e2", "I build agents with ADK every day.")])))
    assert set(texts(search(service, "How about ADK?"))) == {"The user uses the ADK at work.",
                                                             "The user builds agents with ADK every day."}


def test_search_memory_no_match(bank):
    """ADK test_search_memory_no_match: hybrid retrieval ranks every memory by vector, so "no match" is a
    similarity threshold (min_similarity 0.8, the useful value docs/retrieval.md gives for the default model)."""
    service = MembankMemoryService(bank, wait_for_completion=True, process_in_process=True, min_similarity=0.8)
    run(service.add_session_to_memory(SESSION_2))
    assert search(service, "nonexistent").memories == []
    assert texts(search(service, "Python")) == ["The user likes to code in Python."]


def test_search_memory_is_scoped_by_user(service):
    """ADK test_search_memory_is_scoped_by_user."""
    run(service.add_session_to_memory(SESSION_2))
    run(service.add_session_to_memory(session("session-3", [event("event-3a", "I collect stamps in secret.")],
                                              user_id=OTHER_USER)))
    assert "The user collects stamps in secret." not in texts(search(service, "secret"))
    assert texts(search(service, "secret", user_id=OTHER_USER)) == ["The user collects stamps in secret."]


def test_search_memory_does_not_collide_on_slash_in_identifiers(service):
    """ADK test_search_memory_does_not_collide_on_slash_in_identifiers."""
    run(service.add_session_to_memory(session("s", [event("e", "I collect stamps in secret.")],
                                              app_name="app/other-user", user_id="user")))
    assert search(service, "secret", app_name="app", user_id="other-user/user").memories == []
    assert len(search(service, "secret", app_name="app/other-user", user_id="user").memories) == 1


def test_search_memory_returns_at_most_top_k(bank):
    """ADK test_search_memory_returns_at_most_ten_memories (ours: at most top_k, default 3)."""
    service = MembankMemoryService(bank, wait_for_completion=True, process_in_process=True)
    run(service.add_session_to_memory(session("s", [event(f"n{i}", f"I visited city number {i} for work.",
                                                          timestamp=1684922400.0 + i) for i in range(6)])))
    # A question these six near-identical facts answer: "work trips" (best similarity 0.822, "trips" unknown
    # to the scope) scores like gibberish against them, and the default floor gates it (docs/retrieval.md).
    assert len(search(service, "Which cities did I visit for work?").memories) == 3
    service.top_k = 5
    assert len(search(service, "Which cities did I visit for work?").memories) == 5


def test_search_memory_is_thread_safe_against_concurrent_writes(service):
    """ADK test_search_memory_is_thread_safe_against_concurrent_writes (fewer rounds: each one is a real
    database call and, for searches, a query embedding)."""
    run(service.add_session_to_memory(SESSION_2))
    failures: list[BaseException] = []
    barrier = threading.Barrier(3)

    def writer():
        barrier.wait()
        try:
            for i in range(5):
                run(service.add_session_to_memory(session(f"w{i}", [event(f"w{i}", f"I like fact number {i}.")])))
        except BaseException as err:  # noqa: BLE001 - the test reports it
            failures.append(err)

    def reader():
        barrier.wait()
        try:
            for _ in range(10):
                run(service.search_memory(app_name=APP, user_id=USER, query="fact"))
        except BaseException as err:  # noqa: BLE001
            failures.append(err)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


@pytest.mark.parametrize("ingest_session", [True, False])
def test_ingested_memories_do_not_follow_caller_event_mutations(service, ingest_session):
    """ADK test_ingested_memories_do_not_follow_caller_event_mutations."""
    e = event("event", "I prefer jasmine tea.")
    s = session("session", [e])
    if ingest_session:
        run(service.add_session_to_memory(s))
    else:
        run(service.add_events_to_memory(app_name=APP, user_id=USER, session_id=s.id, events=s.events))
    e.author = "changed"
    e.content.parts[0].text = "I prefer coffee."
    result = search(service, "jasmine")
    assert texts(result)[0] == "The user prefers jasmine tea." and result.memories[0].author == "user"


@pytest.mark.parametrize("ingest_session", [True, False])
def test_retrieved_memories_do_not_mutate_storage_or_session_history(service, ingest_session):
    """ADK test_retrieved_memories_do_not_mutate_storage_or_session_history."""
    s = session("session", [event("event", "I prefer jasmine tea.")])
    if ingest_session:
        run(service.add_session_to_memory(s))
    else:
        run(service.add_events_to_memory(app_name=APP, user_id=USER, session_id=s.id, events=s.events))
    first = search(service, "jasmine")
    first.memories[0].content.parts.clear()
    assert texts(search(service, "jasmine")) == ["The user prefers jasmine tea."]
    assert s.events[0].content.parts[0].text == "I prefer jasmine tea."


# -- google-adk's SQLite service cases ---------------------------------------------------------------
def test_search_memory_empty_query(service):
    """ADK sqlite test_search_memory_empty_query, with membank's one meaning of no query: the user's memories.

    (ADK's own services find nothing; membank's Python client, CLI and MCP
    server list the scope for an empty query, and so does this service.)
    """
    run(service.add_session_to_memory(SESSION_2))
    for query in ("", "   \n\t  "):
        assert texts(search(service, query)) == ["The user likes to code in Python."]


def test_duplicate_session_handling(service, bank):
    """ADK sqlite test_duplicate_session_handling: a session added twice is stored once."""
    run(service.add_session_to_memory(SESSION_2))
    run(service.add_session_to_memory(SESSION_2))
    assert stored_ids(bank, "session-2") == ["event-2a"] and len(service.operations) == 1
    assert [m.fact for m in bank.list_memories({"app_name": APP, "user_id": USER}).memories] == [
        "The user likes to code in Python."]


def test_empty_content_filtering(service, bank):
    """ADK sqlite test_empty_content_filtering: no content, empty parts and text-less parts are skipped."""
    empty_parts = Event(id="p", invocation_id="i", author="user", timestamp=1684922400.0,
                        content=types.Content(role="user", parts=[]))
    no_text = Event(id="q", invocation_id="i", author="user", timestamp=1684922400.0,
                    content=types.Content(role="user", parts=[types.Part(function_call=types.FunctionCall(
                        name="f", args={}))]))
    run(service.add_session_to_memory(session("s", [event("n", None), empty_parts, no_text,
                                                    event("v", "Valid message")])))
    assert stored_ids(bank, "s") == ["v"]


# -- the other methods of BaseMemoryService -------------------------------------------------------------
def test_delete_memory(service, bank):
    run(service.add_session_to_memory(SESSION_2))
    found = search(service, "Python").memories[0]
    run(service.delete_memory(app_name=APP, user_id=OTHER_USER, memory_id=found.id))  # not theirs: kept
    assert texts(search(service, "Python")) == ["The user likes to code in Python."]
    run(service.delete_memory(app_name=APP, user_id=USER, memory_id=found.id))
    assert search(service, "Python").memories == []
    run(service.delete_memory(app_name=APP, user_id=USER, memory_id=found.id))  # again: no error
    run(service.delete_memory(app_name=APP, user_id=USER, memory_id=None))
    assert bank.list_revisions(found.id)[-1].action == "DELETED"


def test_add_memory_direct_and_consolidated(service, bank):
    entries = [MemoryEntry(id="m-1", content=types.Content(role="user", parts=[types.Part(
        text="The user is vegetarian.")]), custom_metadata={"source": "profile-form"})]
    run(service.add_memory(app_name=APP, user_id=USER, memories=entries))
    [memory] = bank.list_memories({"app_name": APP, "user_id": USER}).memories
    assert memory.fact == "The user is vegetarian."
    assert memory.metadata == {"source": "profile-form", "adk_memory_id": "m-1"}
    run(service.add_memory(app_name=APP, user_id=USER, memories=entries,
                           custom_metadata={"enable_consolidation": True, "wait_for_completion": True}))
    assert [m.fact for m in bank.list_memories({"app_name": APP, "user_id": USER}).memories] == [
        "The user is vegetarian."]  # consolidation found it known


def test_scope_keys_are_configurable(bank):
    service = MembankMemoryService(bank, wait_for_completion=True, process_in_process=True,
                                   scope_keys=(None, "uid"))
    run(service.add_session_to_memory(SESSION_2))
    assert [m.fact for m in bank.list_memories({"uid": USER}).memories] == ["The user likes to code in Python."]
    assert texts(search(service, "Python", app_name="any-app")) == ["The user likes to code in Python."]


def test_the_example_agent_recalls_a_fact_across_sessions(db_url):
    """examples/adk_agent.py runs offline end to end: session 2 recalls session 1's fact via preload memory."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "adk_agent.py"
    out = subprocess.run([sys.executable, str(script)], env={**os.environ, "MEMBANK_DATABASE_URL": db_url},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "agent: From memory: The user is allergic to peanuts." in out.stdout
    assert "recalled the fact from session 1" in out.stdout


def test_an_agent_that_never_calls_the_memory_service_recalls_a_fact_of_an_old_session(db_url):
    """examples/adk_auto_memory.py: the session service ingests each event (event_count 4), so after two turns
    GenerateMemories starts by itself; a new session recalls the fact. The example's code holds no memory call."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "adk_auto_memory.py"
    source = script.read_text()
    for call in ("add_session_to_memory", "add_events_to_memory", "add_memory", "generate_memories",
                 "ingest_events", "search_memory"):
        assert call not in source, call
    out = subprocess.run([sys.executable, str(script)], env={**os.environ, "MEMBANK_DATABASE_URL": db_url},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "agent: From memory: The user is allergic to peanuts." in out.stdout
    assert "recalled the fact from session 1" in out.stdout


def test_session_service_with_a_trigger_generates_after_n_events(bank):
    from membank.adk import MembankSessionService

    sessions = MembankSessionService(bank, generation_trigger_config={"generation_rule": {"event_count": 4}})
    scope = {"app_name": APP, "user_id": USER}
    created = run(sessions.create_session(app_name=APP, user_id=USER, session_id="auto"))
    texts_ = ["I am allergic to peanuts.", "Noted.", "I live in Lisbon.", "Noted.", "I play chess.", "Noted."]
    counts = []
    for i, text in enumerate(texts_):
        run(sessions.append_event(created, event(f"auto-{i}", text, author="user" if i % 2 == 0 else "model",
                                                 timestamp=1684922400.0 + i)))
        counts.append(len(bank.list_operations(scope, session_id="auto")))
    assert counts == [0, 0, 0, 1, 1, 1]  # the fourth event fired the trigger; the next two wait for two more
    run(sessions.append_event(created, event("auto-3", "Noted.", author="model", timestamp=1684922403.0)))  # again
    assert len(bank.list_operations(scope, session_id="auto")) == 1


def test_services_use_an_async_memory_bank_directly_without_threads(db_url, embedder, monkeypatch):
    """With an AsyncMemoryBank both services await it on the agent's event loop: no asyncio.to_thread at all."""
    from membank import AsyncMemoryBank, AsyncPendingOperation
    from membank.adk import MembankSessionService

    def no_threads(*args, **kwargs):
        raise AssertionError("asyncio.to_thread was called")

    async def main():
        async with AsyncMemoryBank(db_url, embedder=embedder) as abank:
            monkeypatch.setattr(asyncio, "to_thread", no_threads)
            sessions = MembankSessionService(abank, generation_trigger_config={"generation_rule": {"event_count": 2}})
            memory = MembankMemoryService(abank, wait_for_completion=True, process_in_process=True)
            created = await sessions.create_session(app_name=APP, user_id=USER, session_id="async-1")
            await sessions.append_event(created, event("a1", "I am allergic to peanuts."))
            await sessions.append_event(created, event("a2", "Noted.", author="model", timestamp=1684922401.0))
            ops = await abank.list_operations({"app_name": APP, "user_id": USER}, session_id="async-1")
            assert len(ops) == 1  # the trigger fired on the second event
            await AsyncPendingOperation(abank, ops[0].name).wait(120, process=True)  # the worker's part
            await memory.add_session_to_memory(await sessions.get_session(app_name=APP, user_id=USER,
                                                                          session_id="async-1"))  # known: no-op
            await memory.add_session_to_memory(SESSION_2)
            found = await memory.search_memory(app_name=APP, user_id=USER, query="allergy")
            python = await memory.search_memory(app_name=APP, user_id=USER, query="Python")
            assert python.memories[0].content.parts[0].text == "The user likes to code in Python."
            return [m.content.parts[0].text for m in found.memories]

    assert asyncio.run(main())[0] == "The user is allergic to peanuts."
