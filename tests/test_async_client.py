"""AsyncMemoryBank: MemoryBank's API as coroutines, from the same definitions.

The API tests of test_list, test_revisions, test_events and test_generation run
here again over AsyncMemoryBank (their own files run them over MemoryBank): the
``bank`` fixture below gives AsyncMemoryBank driven from the test's sync code
on an event loop of its own (every coroutine the test's call returns is run
there), as the ``role`` marker's login when the test has one, as conftest's
``bank`` does.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import psycopg
import pytest

from membank import AsyncMemoryBank, AsyncPendingOperation, MemoryBank, PendingOperation
from membank.async_client import SQL_METHODS
from test_events import *  # noqa: F403 - the API tests, run again over both clients
from test_generation import *  # noqa: F403
from test_list import *  # noqa: F403
from test_revisions import *  # noqa: F403


class Loop:
    """An event loop on a thread of its own, for driving async code from sync tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Blocking:
    """Sync face of an async object: coroutine methods run on the loop, async iterators are collected."""

    def __init__(self, target, loop: Loop) -> None:
        self._target, self._loop = target, loop

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):
            return lambda *a, **k: self._wrap(self._loop.run(value(*a, **k)))
        if inspect.isasyncgenfunction(value):
            async def collect(*a, **k):
                return [x async for x in value(*a, **k)]
            return lambda *a, **k: iter(self._loop.run(collect(*a, **k)))
        return value

    def _wrap(self, result):
        return Blocking(result, self._loop) if isinstance(result, AsyncPendingOperation) else result


@pytest.fixture(params=["async"])
def bank(request, role_url, embedder):
    """AsyncMemoryBank (behind a sync face) on this test's database, as the ``role`` marker's login if any.

    The same tests over MemoryBank run in their own files; running them here again over it only doubled their time.
    """
    loop = Loop()
    client = AsyncMemoryBank(role_url, embedder=embedder, max_size=4)
    try:
        yield Blocking(client, loop)
    finally:
        loop.run(client.close())
        loop.close()


def test_signatures_and_docstrings_equal_the_sync_clients():
    names = SQL_METHODS + ["iter_memories", "process_pending", "close", "__init__"]
    assert len(SQL_METHODS) > 40 and "add" in SQL_METHODS and "build_context" in SQL_METHODS
    public = {n for n, v in vars(MemoryBank).items() if not n.startswith("_") and inspect.isfunction(v)}
    assert public <= set(names)
    for name in names:
        sync, coro = getattr(MemoryBank, name), getattr(AsyncMemoryBank, name)
        assert inspect.signature(coro) == inspect.signature(sync), name
        assert coro.__doc__ == sync.__doc__, name
        if name != "__init__":
            assert inspect.iscoroutinefunction(coro) or inspect.isasyncgenfunction(coro), name
    for name in ("get", "wait"):
        assert inspect.signature(getattr(AsyncPendingOperation, name)) == inspect.signature(
            getattr(PendingOperation, name))


def test_errors_are_the_same_classes(db_url):
    from membank import InvalidArgumentError, NotFoundError

    async def main():
        async with AsyncMemoryBank(db_url) as abank:
            with pytest.raises(InvalidArgumentError, match="^scope"):
                await abank.create_memory({}, "x")
            with pytest.raises(NotFoundError):
                await abank.get_memory("00000000-0000-0000-0000-000000000001")
            calls = await asyncio.gather(*(abank.create_memory({"user_id": "g"}, f"fact {i}") for i in range(8)))
            assert len({m.name for m in calls}) == 8  # concurrent calls share the async pool
            assert len([m async for m in abank.iter_memories({"user_id": "g"}, page_size=3)]) == 8

    asyncio.run(main())


def test_cancelling_an_awaiting_call_cancels_its_statement(db_url, conn):
    memory = conn.execute("select (membank.create_memory(scope => '{\"user_id\": \"c\"}', fact => 'x')).name"
                          " as n").fetchone()["n"]

    async def main():
        async with AsyncMemoryBank(db_url, lock_timeout="120s", statement_timeout="120s") as abank:
            with psycopg.connect(db_url) as holder:  # holds the memory's row lock: the update waits on it
                holder.execute("select from membank_private.memories where name = %s for update", (memory,))
                task = asyncio.create_task(abank.update_memory(memory, fact="y"))
                deadline = time.monotonic() + 60
                while not conn.execute("select count(*) as n from pg_stat_activity where wait_event_type = 'Lock'"
                                       " and query like '%%update_memory%%'").fetchone()["n"]:
                    assert time.monotonic() < deadline, "the update never waited on the lock"
                    await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                # The server ended the statement: nothing waits on the lock any more, while it is still held.
                assert conn.execute("select count(*) as n from pg_stat_activity where wait_event_type = 'Lock'"
                                    " and query like '%%update_memory%%'").fetchone()["n"] == 0
            assert (await abank.get_memory(memory)).fact == "x"

    asyncio.run(main())
