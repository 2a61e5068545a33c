"""Running jobs in process needs membank_worker or membank_admin; a writer login is refused before anything is written.

A claimed job carries the raw text of whatever scope it belongs to (docs/operations.md), so an application's
membank_writer login may queue work but not claim it. The paths that write and then run the jobs in this process
(``membank generate``, mem0's ``Memory(process=True)``, the LangGraph store's ``embed_in_process``,
``process_pending`` and ``wait(process=True)``) check the login first: one PermissionDeniedError (42501) naming
the role it lacks, with a hint, and no memory, event or operation written. Every call here runs as a login.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import count_all_rows
from membank import MemoryBank, PermissionDeniedError
from membank.cli import main
from membank.compat import Memory
from membank.langgraph import MembankStore

SCOPE = {"user_id": "writer_only"}


def assert_refused(caught: pytest.ExceptionInfo) -> None:
    err = caught.value
    assert err.sqlstate == "42501"
    assert "may not run membank's jobs in process" in err.message
    assert "membank_worker" in err.hint and "membank worker" in err.hint


@pytest.fixture
def writer_url(login) -> str:
    return login("membank_writer")[1]


def test_process_pending_and_wait_refuse_a_writer_by_name(writer_url, superuser, embedder):
    with MemoryBank(writer_url, embedder=embedder, provider="rules") as bank:
        pending = bank.add([{"role": "user", "content": "I moved to Lisbon last year."}], scope=SCOPE)
        with pytest.raises(PermissionDeniedError) as caught:
            bank.process_pending()
        assert_refused(caught)
        assert "membank.claim_generation_jobs(integer, uuid)" in caught.value.message
        with pytest.raises(PermissionDeniedError) as caught:
            pending.wait(5, process=True)
        assert_refused(caught)
    # The queued operation is untouched: a worker login can still run it.
    assert superuser.execute("select stage from membank_private.operations").fetchone()["stage"] == "EXTRACT"


def test_mem0_memory_refuses_a_writer_before_writing(writer_url, superuser, embedder):
    before = count_all_rows(superuser)
    with MemoryBank(writer_url, embedder=embedder, provider="rules") as bank:
        memory = Memory(bank=bank)
        with pytest.raises(PermissionDeniedError) as caught:
            memory.add("I love jazz.", user_id="zed", infer=False)
        assert_refused(caught)
        with pytest.raises(PermissionDeniedError) as caught:
            memory.add("I love jazz.", user_id="zed")
        assert_refused(caught)
        assert count_all_rows(superuser) == before  # nothing half-written: a retry cannot duplicate
        queued = Memory(bank=bank, process=False).add("I love jazz.", user_id="zed", infer=False)
        assert [r["memory"] for r in queued["results"]] == ["I love jazz."]


def test_langgraph_store_embedding_in_process_refuses_a_writer_before_its_puts(writer_url, superuser, embedder):
    before = count_all_rows(superuser)
    with MemoryBank(writer_url, embedder=embedder) as bank:
        store = MembankStore(bank, base_scope={"store": "s"}, embed_in_process=True)
        with pytest.raises(PermissionDeniedError) as caught:
            store.put(("users", "u"), "k", {"text": "likes tea"})
        assert_refused(caught)
        assert count_all_rows(superuser) == before
        assert MembankStore(bank, base_scope={"store": "s"}).get(("users", "u"), "k") is None


def test_cli_generate_as_a_writer_is_one_line_exit_2_and_writes_nothing(writer_url, superuser, cli_env, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", writer_url)
    before = count_all_rows(superuser)
    ran = CliRunner().invoke(main, ["generate", "--scope", json.dumps(SCOPE), "--fact", "User likes tea"],
                             catch_exceptions=False)
    assert ran.exit_code == 2, ran.output
    assert ran.output.startswith("error [42501]: this login (") and "Traceback" not in ran.output
    assert "hint: " in ran.output and "membank_worker" in ran.output
    assert count_all_rows(superuser) == before
    ran = CliRunner().invoke(main, ["generate", "--scope", json.dumps(SCOPE), "--fact", "User likes tea", "--no-wait"],
                             catch_exceptions=False)
    assert ran.exit_code == 0, ran.output  # queueing is the writer's; a worker runs it


def test_mcp_generate_and_add_messages_waiting_refuse_a_writer_before_writing(writer_url, superuser, embedder):
    """The MCP tools wait by default (wait=True runs the operation in process): a writer is refused before it writes."""
    from membank.mcp_server import MembankTools

    before = count_all_rows(superuser)
    with MemoryBank(writer_url, embedder=embedder, provider="rules") as bank:
        tools = MembankTools(bank)
        with pytest.raises(PermissionDeniedError) as caught:
            tools.generate_memories(facts=["User likes tea"], scope=SCOPE)
        assert_refused(caught)
        with pytest.raises(PermissionDeniedError) as caught:
            tools.add_messages([{"role": "user", "content": "I moved to Lisbon last year."}], scope=SCOPE)
        assert_refused(caught)
        assert count_all_rows(superuser) == before  # no event, no operation: a retry cannot duplicate
        queued = tools.generate_memories(facts=["User likes tea"], wait=False, scope=SCOPE)
        assert queued["done"] is False  # queueing is the writer's; a worker runs it


def test_adk_memory_service_processing_in_process_refuses_a_writer_before_writing(writer_url, superuser, embedder):
    """MembankMemoryService(process_in_process=True) runs the operation here: a writer is refused before it writes."""
    import asyncio

    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.adk.memory.memory_entry import MemoryEntry
    from google.genai import types

    from membank.adk import MembankMemoryService

    content = types.Content(role="user", parts=[types.Part(text="I like to code in Python.")])
    events = [Event(id="e1", invocation_id="inv-e1", author="user", timestamp=1684922400.0, content=content)]
    before = count_all_rows(superuser)
    with MemoryBank(writer_url, embedder=embedder, provider="rules") as bank:
        service = MembankMemoryService(bank, wait_for_completion=True, process_in_process=True)
        with pytest.raises(PermissionDeniedError) as caught:
            asyncio.run(service.add_events_to_memory(app_name="a", user_id="u", events=events, session_id="s"))
        assert_refused(caught)
        with pytest.raises(PermissionDeniedError) as caught:
            asyncio.run(service.add_memory(app_name="a", user_id="u", memories=[MemoryEntry(content=content)],
                                           custom_metadata={"enable_consolidation": True}))
        assert_refused(caught)
        assert count_all_rows(superuser) == before
        assert service.operations == []
        # Without waiting (a worker runs it) the writer starts the operation.
        queued = MembankMemoryService(bank, process_in_process=True)
        asyncio.run(queued.add_events_to_memory(app_name="a", user_id="u", events=events, session_id="s"))
        assert len(queued.operations) == 1


@pytest.mark.parametrize("roles", [("membank_writer", "membank_worker"), ("membank_admin",)])
def test_a_worker_or_admin_login_runs_the_jobs_in_process_everywhere(roles, login, embedder):
    """No false refusal: a login holding membank_worker (with membank_writer) or membank_admin passes every check
    and its in-process runs finish: mem0's Memory, the MCP tools waiting, the LangGraph store embedding in process,
    ADK's memory service processing in process, process_pending."""
    import asyncio

    from membank.mcp_server import MembankTools

    _, url = login(*roles)
    with MemoryBank(url, embedder=embedder, provider="rules") as bank:
        added = Memory(bank=bank).add("I love jazz.", user_id="worker_ok", infer=False)
        assert [r["memory"] for r in added["results"]] == ["I love jazz."]
        done = MembankTools(bank).generate_memories(facts=["User likes tea"], scope={"user_id": "worker_ok"})
        assert done["done"] is True and done["error"] is None, done
        store = MembankStore(bank, base_scope={"store": "w"}, embed_in_process=True)
        store.put(("users", "u"), "k", {"text": "likes tea"})
        assert store.get(("users", "u"), "k").value == {"text": "likes tea"}
        try:
            from google.adk.events.event import Event
            from google.genai import types

            from membank.adk import MembankMemoryService
        except ImportError:
            pass
        else:
            content = types.Content(role="user", parts=[types.Part(text="I like to code in Python.")])
            service = MembankMemoryService(bank, wait_for_completion=True, process_in_process=True)
            asyncio.run(service.add_events_to_memory(app_name="a", user_id="worker_ok", events=[Event(
                id="e1", invocation_id="inv-e1", author="user", timestamp=1684922400.0, content=content)]))
            assert [o.get().done for o in service.operations] == [True]
        assert bank.process_pending() == 0  # everything above ran here: nothing left
        assert bank.embedding_backlog().pending == 0


def test_a_bound_worker_login_is_refused_as_membanks_error_before_writing(login, superuser, embedder):
    """A tenant login bound to a scope may hold membank_worker, but a bound role may not carry every scope's jobs
    (refuse_bound_role). The checks before writing refuse it (configure_embedding refuses a bound caller) and
    process_pending / wait(process=True) raise membank's PermissionDeniedError (42501, the database's message and
    hint), not psycopg's raw InsufficientPrivilege from the generation claim."""
    from psycopg.types.json import Jsonb

    name, url = login("membank_writer", "membank_worker")
    superuser.execute("select membank.bind_role_to_scope(role => %s, scope => %s)", (name, Jsonb(SCOPE)))
    before = count_all_rows(superuser)
    with MemoryBank(url, embedder=embedder, provider="rules") as bank:
        with pytest.raises(PermissionDeniedError) as caught:
            Memory(bank=bank).add("I love jazz.", user_id=SCOPE["user_id"])
        assert caught.value.sqlstate == "42501"
        assert count_all_rows(superuser) == before
        pending = bank.add([{"role": "user", "content": "I moved to Lisbon last year."}], scope=SCOPE)
        for run in (bank.process_pending, lambda: pending.wait(5, process=True)):
            with pytest.raises(PermissionDeniedError) as caught:
                run()
            assert caught.value.sqlstate == "42501"
            assert "a role bound to scopes may not carry the jobs of every scope" in caught.value.message
            assert caught.value.hint == "run workers under a role without scope bindings"
    assert superuser.execute("select stage from membank_private.operations").fetchone()["stage"] == "EXTRACT"
