"""MembankSessionService: an ADK BaseSessionService over membank, and google-adk's own session-service cases.

The conformance cases re-express the behavioural tests of google-adk's
tests/unittests/sessions/test_session_service.py (google/adk-python; the
wheel ships no tests; there they are parametrised over the in-memory,
database and SQLite services) against this service. Each test's docstring
names the ADK case. Adapted where the backend necessarily differs:

- stale writers (test_append_event_to_stale_session,
  test_append_event_concurrent_stale_sessions_reject_stale_writer): ADK's
  database service rejects the second writer; membank's contract is that
  both appends land in commit order and both state deltas merge, so these
  cases assert that instead.
- events sharing an id: stored once (the id is the idempotency key); an
  equal re-delivery changes nothing, another payload under the id is MB020.

Not re-expressed (they test SQLAlchemy/SQLite internals: engine options,
rollback spies, prepare_tables races, _get_or_create_state, lock requests,
storage markers, the InMemory same-object case, Vertex's NotImplementedError).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import psycopg
import pytest

pytest.importorskip("google.adk")

from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.errors.session_not_found_error import SessionNotFoundError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from membank import MemoryBank, errors  # noqa: E402
from membank.adk import MembankSessionService  # noqa: E402


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def bank(db_url):
    with MemoryBank(db_url, max_size=4) as b:
        yield b


@pytest.fixture
def service(bank):
    return MembankSessionService(bank)


def test_is_a_base_session_service(service):
    assert isinstance(service, BaseSessionService)


def test_get_empty_session(service):
    """test_get_empty_session"""
    assert run(service.get_session(app_name="my_app", user_id="test_user", session_id="123")) is None


def test_create_get_session(service):
    """test_create_get_session"""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="test_user", state={"key": "value"})
        assert session.app_name == "my_app" and session.user_id == "test_user" and session.id
        assert session.state == {"key": "value"}
        assert session.last_update_time <= datetime.now().astimezone(timezone.utc).timestamp()
        got = await service.get_session(app_name="my_app", user_id="test_user", session_id=session.id)
        assert got == session
        await service.delete_session(app_name="my_app", user_id="test_user", session_id=session.id)
        assert await service.get_session(app_name="my_app", user_id="test_user", session_id=session.id) is None
    run(case())


def test_create_and_list_sessions(service):
    """test_create_and_list_sessions"""
    async def case():
        ids = [f"session{i}" for i in range(5)]
        for sid in ids:
            await service.create_session(app_name="my_app", user_id="test_user", session_id=sid,
                                         state={"key": "value" + sid})
        sessions = (await service.list_sessions(app_name="my_app", user_id="test_user")).sessions
        assert {s.id for s in sessions} == set(ids)
        for s in sessions:
            assert s.state == {"key": "value" + s.id}
            assert s.events == []
    run(case())


def test_list_sessions_all_users(service):
    """test_list_sessions_all_users"""
    async def case():
        await service.create_session(app_name="my_app", user_id="user1", session_id="session1a",
                                     state={"key": "value1a"})
        await service.create_session(app_name="my_app", user_id="user1", session_id="session1b",
                                     state={"key": "value1b"})
        await service.create_session(app_name="my_app", user_id="user2", session_id="session2a",
                                     state={"key": "value2a"})
        await service.create_session(app_name="other_app", user_id="user1", session_id="elsewhere")
        one = {s.id: s for s in (await service.list_sessions(app_name="my_app", user_id="user1")).sessions}
        assert {k: v.state for k, v in one.items()} == {"session1a": {"key": "value1a"},
                                                        "session1b": {"key": "value1b"}}
        two = (await service.list_sessions(app_name="my_app", user_id="user2")).sessions
        assert [(s.id, s.state) for s in two] == [("session2a", {"key": "value2a"})]
        every = {s.id: (s.user_id, s.state) for s in
                 (await service.list_sessions(app_name="my_app", user_id=None)).sessions}
        assert every == {"session1a": ("user1", {"key": "value1a"}), "session1b": ("user1", {"key": "value1b"}),
                         "session2a": ("user2", {"key": "value2a"})}
    run(case())


def test_app_state_is_shared_by_all_users_of_app(service):
    """test_app_state_is_shared_by_all_users_of_app"""
    async def case():
        s1 = await service.create_session(app_name="my_app", user_id="u1", session_id="s1", state={"app:k1": "v1"})
        await service.append_event(s1, Event(invocation_id="inv1", author="user",
                                             actions=EventActions(state_delta={"app:k2": "v2"})))
        s2 = await service.create_session(app_name="my_app", user_id="u2", session_id="s2")
        assert s2.state == {"app:k1": "v1", "app:k2": "v2"}
        got = await service.get_session(app_name="my_app", user_id="u1", session_id="s1")
        assert got.state["app:k1"] == "v1" and got.state["app:k2"] == "v2"
    run(case())


def test_user_state_is_shared_only_by_user_sessions(service):
    """test_user_state_is_shared_only_by_user_sessions"""
    async def case():
        s1 = await service.create_session(app_name="my_app", user_id="u1", session_id="s1", state={"user:k1": "v1"})
        await service.append_event(s1, Event(invocation_id="inv1", author="user",
                                             actions=EventActions(state_delta={"user:k2": "v2"})))
        s1b = await service.create_session(app_name="my_app", user_id="u1", session_id="s1b")
        assert s1b.state == {"user:k1": "v1", "user:k2": "v2"}
        s2 = await service.create_session(app_name="my_app", user_id="u2", session_id="s2")
        assert s2.state == {}
    run(case())


def test_session_state_is_not_shared(service):
    """test_session_state_is_not_shared"""
    async def case():
        s1 = await service.create_session(app_name="my_app", user_id="u1", session_id="s1", state={"sk1": "v1"})
        await service.append_event(s1, Event(invocation_id="inv1", author="user",
                                             actions=EventActions(state_delta={"sk2": "v2"})))
        got = await service.get_session(app_name="my_app", user_id="u1", session_id="s1")
        assert got.state == {"sk1": "v1", "sk2": "v2"}
        s1b = await service.create_session(app_name="my_app", user_id="u1", session_id="s1b")
        assert s1b.state == {}
    run(case())


def test_temp_state_is_not_persisted_in_state_or_events(service, conn):
    """test_temp_state_is_not_persisted_in_state_or_events and test_temp_state_visible_across_sequential_events"""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="u1", session_id="s1",
                                               state={"temp:t0": "gone"})
        assert "temp:t0" not in session.state
        event = Event(invocation_id="inv1", author="user",
                      actions=EventActions(state_delta={"temp:k1": "v1", "sk": "v2"}))
        await service.append_event(session, event)
        assert session.state.get("temp:k1") == "v1" and session.state.get("sk") == "v2"
        assert "temp:k1" not in event.actions.state_delta and event.actions.state_delta["sk"] == "v2"
        got = await service.get_session(app_name="my_app", user_id="u1", session_id="s1")
        assert got.state == {"sk": "v2"}
        assert got.events[0].actions.state_delta == {"sk": "v2"}
    run(case())
    # Not in any stored row either (a temp key sent straight to SQL is dropped too).
    conn.execute("""select membank.append_session_event('my_app', 'u1', 's1',
        '{"id": "raw", "author": "user", "timestamp": 1, "actions": {"state_delta": {"temp:x": 1, "y": 2}}}')""")
    rows = conn.execute("select state::text as s from membank_private.sessions union all "
                        "select payload::text from membank_private.events").fetchall()
    assert not any("temp:" in r["s"] for r in rows)


def test_get_session_respects_user_id(service):
    """test_get_session_respects_user_id"""
    async def case():
        s1 = await service.create_session(app_name="my_app", user_id="u1", session_id="s1")
        await service.append_event(s1, Event(invocation_id="inv1", author="user"))
        await service.create_session(app_name="my_app", user_id="u2", session_id="s1")
        got = await service.get_session(app_name="my_app", user_id="u2", session_id="s1")
        assert got.user_id == "u2" and got.events == []
    run(case())


def test_create_session_with_existing_id_raises_error(service):
    """test_create_session_with_existing_id_raises_error"""
    async def case():
        await service.create_session(app_name="my_app", user_id="test_user", session_id="existing_session")
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="my_app", user_id="test_user", session_id="existing_session")
    run(case())


def test_append_event_bytes(service):
    """test_append_event_bytes"""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="user")
        content = types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x89PNG\x00\xff",
                                                                          mime_type="image/png")])
        grounding = types.GroundingMetadata(search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob"))
        await service.append_event(session, Event(invocation_id="invocation", author="user", content=content,
                                                   grounding_metadata=grounding))
        assert session.events[0].content == content
        got = await service.get_session(app_name="my_app", user_id="user", session_id=session.id)
        assert len(got.events) == 1
        assert got.events[0].content == content
        assert got.events[0].grounding_metadata == grounding
    run(case())


def test_append_event_complete(service):
    """test_append_event_complete: every field of the event round-trips exactly."""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="user")
        event = Event(
            invocation_id="invocation", author="user",
            content=types.Content(role="user", parts=[types.Part(text="test_text")]),
            turn_complete=True, partial=False,
            actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
            long_running_tool_ids={"tool1"}, error_code="error_code", error_message="error_message",
            interrupted=True, grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1, candidates_token_count=1, total_token_count=2),
            citation_metadata=types.CitationMetadata(), custom_metadata={"custom_key": "custom_value"},
            timestamp=1700000000.123,
            input_transcription=types.Transcription(text="input transcription", finished=True),
            output_transcription=types.Transcription(text="output transcription", finished=True),
        )
        await service.append_event(session, event)
        assert await service.get_session(app_name="my_app", user_id="user", session_id=session.id) == session
    run(case())


def test_session_last_update_time_updates_on_event(service):
    """test_session_last_update_time_updates_on_event"""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="user")
        original = session.last_update_time
        await service.append_event(session, Event(invocation_id="invocation", author="user", timestamp=original + 10))
        assert session.last_update_time == pytest.approx(original + 10, abs=1e-6)
        got = await service.get_session(app_name="my_app", user_id="user", session_id=session.id)
        assert got.last_update_time == pytest.approx(original + 10, abs=1e-6)
        assert got.last_update_time > original
    run(case())


def test_stale_session_appends_land_and_merge(service):
    """test_append_event_to_stale_session, adapted: the stale writer's event lands after the others, deltas merge."""
    async def case():
        now = time.time()
        original = await service.create_session(app_name="my_app", user_id="user")
        await service.append_event(original, Event(invocation_id="inv1", author="user", timestamp=now + 1,
                                                   actions=EventActions(state_delta={"sk1": "v1"})))
        updated = await service.get_session(app_name="my_app", user_id="user", session_id=original.id)
        await service.append_event(updated, Event(invocation_id="inv2", author="user", timestamp=now + 2,
                                                  actions=EventActions(state_delta={"sk2": "v2"})))
        assert "sk2" not in original.state
        await service.append_event(original, Event(invocation_id="inv3", author="user", timestamp=now + 3,
                                                   actions=EventActions(state_delta={"sk3": "v3"})))
        final = await service.get_session(app_name="my_app", user_id="user", session_id=original.id)
        assert [e.invocation_id for e in final.events] == ["inv1", "inv2", "inv3"]
        assert final.state == {"sk1": "v1", "sk2": "v2", "sk3": "v3"}
    run(case())


def test_concurrent_stale_sessions_both_land(service):
    """test_append_event_concurrent_stale_sessions_reject_stale_writer, adapted: both writers land, deltas merge."""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="user")
        for i in range(8):
            latest = await service.get_session(app_name="my_app", user_id="user", session_id=session.id)
            copies = [latest.model_copy(deep=True), latest.model_copy(deep=True)]
            base = latest.last_update_time + 10.0
            results = await asyncio.gather(*[
                service.append_event(copies[j], Event(invocation_id=f"inv{i}-{j}", author="user",
                                                      timestamp=base + j,
                                                      actions=EventActions(state_delta={f"sk{i}-{j}": f"v{i}-{j}"})))
                for j in range(2)], return_exceptions=True)
            assert not [r for r in results if isinstance(r, Exception)]
        final = await service.get_session(app_name="my_app", user_id="user", session_id=session.id)
        assert len(final.events) == 16
        assert final.state == {f"sk{i}-{j}": f"v{i}-{j}" for i in range(8) for j in range(2)}
    run(case())


def test_get_session_with_config(service):
    """test_get_session_with_config"""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="user")
        for i in range(1, 6):
            await service.append_event(session, Event(author="user", timestamp=i))

        async def events(**config):
            got = await service.get_session(app_name="my_app", user_id="user", session_id=session.id,
                                            config=GetSessionConfig(**config) if config else None)
            return [e.timestamp for e in got.events]
        assert await events() == [1, 2, 3, 4, 5]
        assert await events(num_recent_events=0) == []
        assert await events(num_recent_events=3) == [3, 4, 5]
        assert await events(after_timestamp=4.0) == [4, 5]
        assert await events(after_timestamp=50) == []
        assert await events(after_timestamp=4.0, num_recent_events=3) == [4, 5]
    run(case())


def test_partial_events_are_not_persisted(service):
    """test_partial_events_are_not_persisted"""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="user")
        await service.append_event(session, Event(author="user", partial=True))
        assert session.events == []
        got = await service.get_session(app_name="my_app", user_id="user", session_id=session.id)
        assert got.events == []
    run(case())


def test_get_user_state(service):
    """test_get_user_state_* (empty, written via append_event, not across users or apps, before a session, latest)"""
    async def case():
        assert await service.get_user_state(app_name="my_app", user_id="u1") == {}
        session = await service.create_session(app_name="my_app", user_id="u1")
        await service.append_event(session, Event(author="system", actions=EventActions(
            state_delta={"user:profile": {"name": "Alice"}, "session_key": 1, "user:counter": 1})))
        await service.append_event(session, Event(author="system", actions=EventActions(
            state_delta={"user:counter": 2})))
        assert await service.get_user_state(app_name="my_app", user_id="u1") == {
            "profile": {"name": "Alice"}, "counter": 2}
        assert await service.get_user_state(app_name="my_app", user_id="u2") == {}
        assert await service.get_user_state(app_name="other_app", user_id="u1") == {}
    run(case())


def test_append_to_missing_session_raises(service):
    """ADK's in-memory service raises SessionNotFoundError for an unknown session; so does this one."""
    from google.adk.sessions.session import Session

    ghost = Session(app_name="my_app", user_id="u1", id="nope", last_update_time=0)
    with pytest.raises(SessionNotFoundError):
        run(service.append_event(ghost, Event(author="user")))


def test_event_id_is_idempotent(service, bank):
    """An equal re-delivery stores nothing and merges nothing twice; another payload under the id is MB020."""
    async def case():
        session = await service.create_session(app_name="my_app", user_id="u1", session_id="s")
        event = Event(author="user", actions=EventActions(state_delta={"user:n": 1}),
                      content=types.Content(role="user", parts=[types.Part(text="hello")]))
        await service.append_event(session, event)
        await service.append_event(session, event.model_copy(deep=True))
        got = await service.get_session(app_name="my_app", user_id="u1", session_id="s")
        assert [e.id for e in got.events] == [event.id]
        assert session.events == got.events
        other = event.model_copy(update={"author": "someone-else"})
        with pytest.raises(errors.ConflictError):
            await service.append_event(session, other)
    run(case())
    # The text parts are membank events too: list_events and GenerateMemories read them.
    [stored] = bank.list_events({"app_name": "my_app", "user_id": "u1"}, "s")
    assert (stored.author, stored.text) == ("user", "hello")


def test_bad_input_names_the_argument(conn):
    cases = [
        ("select membank.create_session('', 'u', 's')", "app_name"),
        ("select membank.create_session('a', null, 's')", "user_id"),
        ("select membank.create_session('a', 'u', repeat('x', 201))", "session_id"),
        ("select membank.create_session('a', 'u', 's', '[1]')", "state"),
        ("select membank.get_session('a', 'u', 's', -1)", "num_recent_events"),
        ("select membank.get_session('a', 'u', 's', null, 'NaN')", "after_timestamp"),
        ("select membank.append_session_event('a', 'u', 's', '[]')", "event"),
        ("select membank.append_session_event('a', 'u', 's', '{\"author\": \"x\", \"timestamp\": 1}')", "event.id"),
        ("select membank.append_session_event('a', 'u', 's', '{\"id\": \"e\", \"timestamp\": 1}')", "event.author"),
        ("select membank.append_session_event('a', 'u', 's', '{\"id\": \"e\", \"author\": \"x\"}')",
         "event.timestamp"),
    ]
    for query, argument in cases:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
            conn.execute(query)
        assert info.value.diag.message_primary.startswith(argument + ":"), query
        assert info.value.diag.message_hint
    assert conn.execute("select count(*) as n from membank_private.sessions").fetchone()["n"] == 0


def test_two_processes_append_to_one_session_in_commit_order(db_url, bank):
    """Two connections append to one session: the second waits on the first's row lock; both land in commit order."""
    bank.create_session("my_app", "u1", session_id="s", state={"n": 0})
    ev = '{{"id": "{0}", "author": "user", "timestamp": {1}, "actions": {{"state_delta": {{"{0}": true}}}}}}'
    with psycopg.connect(db_url) as first, psycopg.connect(db_url, autocommit=True) as second:
        first.execute("select membank.append_session_event('my_app', 'u1', 's', %s)", (ev.format("a", 2),))
        # second's append blocks on the session row until first commits; run it in a thread.
        import threading

        done = threading.Event()

        def append_second():
            second.execute("select membank.append_session_event('my_app', 'u1', 's', %s)", (ev.format("b", 1),))
            done.set()
        t = threading.Thread(target=append_second)
        t.start()
        assert not done.wait(0.5)  # still waiting for the lock (a wait, not a timing assertion on speed)
        first.execute("select membank.append_session_event('my_app', 'u1', 's', %s)", (ev.format("c", 3),))
        first.commit()
        t.join(30)
        assert done.is_set()
    got = bank.get_session("my_app", "u1", "s")
    # Commit order: first's two events, then second's, although second's timestamp is the earliest.
    assert [e["id"] for e in got["events"]] == ["a", "c", "b"]
    assert got["state"] == {"n": 0, "a": True, "b": True, "c": True}


def test_erased_user_leaves_no_session_event_or_state_row(service, conn):
    """Erasing the scope {"app_name", "user_id"} removes its sessions, events and user state."""
    async def case():
        s = await service.create_session(app_name="my_app", user_id="u1", state={"user:k": "CANARY-1", "k": "v"})
        await service.append_event(s, Event(author="user", content=types.Content(
            role="user", parts=[types.Part(text="my secret is CANARY-2")]),
            actions=EventActions(state_delta={"user:j": "CANARY-3"})))
        await service.create_session(app_name="my_app", user_id="u2", state={"user:k": "keep"})
    run(case())
    erase_scope(conn, {"app_name": "my_app", "user_id": "u1"})
    for table in ("sessions", "events", "scope_states"):
        rows = conn.execute(f"select t::text as t from membank_private.{table} as t").fetchall()
        assert not any("CANARY" in r["t"] or '"u1"' in r["t"] for r in rows), table
    assert run(service.get_user_state(app_name="my_app", user_id="u2")) == {"k": "keep"}
    assert run(service.list_sessions(app_name="my_app", user_id="u1")).sessions == []


def erase_scope(conn, scope):
    """membank.erase_scope(force => true) of ``scope``."""
    conn.execute("select membank.erase_scope(scope => %s::jsonb, force => true)", (psycopg.types.json.Jsonb(scope),))


def test_a_held_session_lock_is_a_bounded_wait(db_url, bank):
    """An append waits at most membank.lock_timeout for another append to the session, then MB040, nothing written."""
    bank.create_session("my_app", "u1", session_id="s")
    ev = '{{"id": "{0}", "author": "user", "timestamp": 1, "actions": {{"state_delta": {{"{0}": 1}}}}}}'
    with psycopg.connect(db_url) as holder, psycopg.connect(db_url, autocommit=True) as waiter:
        holder.execute("select membank.append_session_event('my_app', 'u1', 's', %s)", (ev.format("a"),))
        waiter.execute("set membank.lock_timeout = '200ms'")
        with pytest.raises(psycopg.Error) as info:
            waiter.execute("select membank.append_session_event('my_app', 'u1', 's', %s)", (ev.format("b"),))
        assert info.value.sqlstate == "MB040" and info.value.diag.message_hint
        holder.rollback()
    got = bank.get_session("my_app", "u1", "s")
    assert got["events"] == [] and got["state"] == {}
