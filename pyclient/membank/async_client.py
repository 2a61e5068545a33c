"""AsyncMemoryBank: the client for asyncio, over psycopg's async pool, from MemoryBank's own definitions.

The methods are not written twice. Every public method of ``MemoryBank``
(listed from the class itself, so the two cannot drift) becomes a coroutine
method of ``AsyncMemoryBank`` with the same name, signature, docstring and
errors: it runs the very same body in a greenlet (the bridge SQLAlchemy's
asyncio support uses), and where that body sends a statement, the greenlet
hands the statement to the awaiting coroutine, which runs it on the async
pool. Nothing runs in a thread, and cancelling an awaiting call cancels its
statement on the server (psycopg sends the cancel request when the task is
cancelled). ``iter_memories`` is an async iterator; ``process_pending`` (the
in-process workers, which hold their own connections) runs in a thread;
``close`` is awaited; ``PendingOperation`` handles come back as
``AsyncPendingOperation`` (``await op.get()``, ``await op.wait()``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from uuid import UUID

import greenlet
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from membank import deadline
from membank.client import MemoryBank, PendingOperation, _not_restarted

T = TypeVar("T")
# Methods that are not one SQL round trip each: their async form is written below.
_SPECIAL = {"close", "iter_memories", "process_pending"}
SQL_METHODS = sorted(name for name, value in vars(MemoryBank).items()
                     if not name.startswith("_") and inspect.isfunction(value) and name not in _SPECIAL)
"""Every MemoryBank method that AsyncMemoryBank serves as a coroutine method (generated from the class)."""


class _Bridge(greenlet.greenlet):
    """A greenlet running sync client code whose statements its driver (a coroutine) awaits."""

    def __init__(self, fn: Callable[..., Any], driver: greenlet.greenlet) -> None:
        super().__init__(fn, driver)
        self.driver = driver


def _await(awaitable: Awaitable[T]) -> T:
    """From sync code inside a bridge: have the driving coroutine await ``awaitable`` and return its result."""
    current = greenlet.getcurrent()
    if not isinstance(current, _Bridge):
        raise RuntimeError("AsyncMemoryBank runs statements only inside its own calls")
    return current.driver.switch(awaitable)


async def _spawn(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run sync ``fn`` in a bridge, awaiting each awaitable it hands over; exceptions (cancellation too) go in."""
    bridge = _Bridge(fn, greenlet.getcurrent())
    result = bridge.switch(*args, **kwargs)
    while not bridge.dead:
        try:
            value = await result
        except BaseException:  # noqa: BLE001 - thrown into the body, which re-raises it (CancelledError too)
            result = bridge.throw(*sys.exc_info())
        else:
            result = bridge.switch(value)
    return result


class _SyncView(MemoryBank):
    """MemoryBank's bodies over an AsyncMemoryBank's state: statements go to its async pool through the bridge."""

    def __init__(self, owner: AsyncMemoryBank) -> None:  # noqa: D107 - shares the owner's attributes
        object.__setattr__(self, "__dict__", owner.__dict__)

    def _run(self, query: Any, params: list[Any]) -> list[dict]:
        return _await(self._owner._arun(query, params))

    def _pending(self, name: UUID) -> AsyncPendingOperation:
        return AsyncPendingOperation(self._owner, name)

    def _sleep(self, seconds: float) -> None:
        _await(asyncio.sleep(seconds))


def _coroutine_method(name: str) -> Callable[..., Any]:
    sync = getattr(MemoryBank, name)

    @functools.wraps(sync)
    async def method(self: AsyncMemoryBank, *args: Any, **kwargs: Any) -> Any:
        return await _spawn(sync, self._view, *args, **kwargs)

    return method


class AsyncMemoryBank:
    """Client of a membank database for asyncio: MemoryBank's methods as coroutines, over psycopg's async pool.

    ``async with AsyncMemoryBank(url) as bank: await bank.create_memory(...)``.
    Same arguments, results and errors as ``MemoryBank`` (see its methods).
    """

    @functools.wraps(MemoryBank.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        MemoryBank.__init__(self, *args, **kwargs)  # the same settings; _open_pool below makes the async pool
        self._owner = self
        self._view = _SyncView(self)

    def _open_pool(self, min_size: int, max_size: int) -> AsyncConnectionPool:
        return AsyncConnectionPool(self.url, min_size=min_size, max_size=max_size, open=False,
                                   kwargs={"autocommit": True, "row_factory": dict_row},
                                   configure=self._configure_connection)

    async def _configure_connection(self, conn: Any) -> None:
        await conn.execute(MemoryBank._SESSION_SETTINGS, (self._statement_timeout, self._lock_timeout))

    async def _arestart_embedded(self) -> None:
        """MemoryBank._restart_embedded on the event loop: start the stopped embedded server, open a new pool.

        Raises DatabaseUnavailableError naming ``membank db start`` when the
        server does not start.
        """
        from membank import embedded

        if embedded.is_running():  # reads postmaster.pid
            return
        lock = self.__dict__.setdefault("_arestart_lock", asyncio.Lock())
        async with lock:
            if embedded.is_running():
                return
            try:
                self.url = await asyncio.to_thread(embedded.ensure_running)
            except Exception as err:
                raise _not_restarted(err) from None
            old, self._pool = self._pool, self._open_pool(*self._pool_size)
            await old.close(timeout=1.0)

    async def _arun(self, query: Any, params: list[Any]) -> list[dict]:
        if self._embedded:  # as MemoryBank: a stopped embedded server is started again, as the CLI does
            await self._arestart_embedded()
        await self._pool.open()  # a no-op once open
        seconds = self._watchdog.seconds  # MemoryBank's deadline (deadline.py), kept by the event loop
        expired = []
        async with self._pool.connection() as conn:
            fd = conn.pgconn.socket

            def end() -> None:
                expired.append(True)
                deadline.shutdown_socket(fd)

            timer = asyncio.get_running_loop().call_later(seconds, end) if seconds is not None else None
            try:
                cursor = await conn.execute(query, params)
                return await cursor.fetchall()
            except psycopg.OperationalError:
                if not expired:
                    raise
            finally:
                if timer is not None:
                    timer.cancel()
        raise await asyncio.to_thread(self._view._no_answer)

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(bank, *args, **kwargs)``, code written against a sync MemoryBank, on this bank's async pool.

        ``bank`` is a MemoryBank view whose statements this bank awaits (no
        thread); e.g. ``await abank.run_sync(lambda b: [b.get_memory(n) for n in names])``.
        """
        return await _spawn(fn, self._view, *args, **kwargs)

    @functools.wraps(MemoryBank.iter_memories)
    async def iter_memories(self, scope: Any, **filters: Any) -> AsyncIterator[Any]:
        pages = MemoryBank.iter_memories(self._view, scope, **filters)
        end = object()
        while (memory := await _spawn(next, pages, end)) is not end:
            yield memory

    @functools.wraps(MemoryBank.process_pending)
    async def process_pending(self, *args: Any, **kwargs: Any) -> int:
        # The in-process workers hold sync connections of their own: a thread, not the event loop.
        return await asyncio.to_thread(MemoryBank.process_pending, self._view, *args, **kwargs)

    @functools.wraps(MemoryBank.close)
    async def close(self) -> None:
        for worker in (self._worker, self._generation_worker):
            if worker is not None:
                worker.close()  # closing a sync connection does not wait on the server
        await self._pool.close()

    async def __aenter__(self) -> AsyncMemoryBank:
        await self._pool.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


for _name in SQL_METHODS:
    setattr(AsyncMemoryBank, _name, _coroutine_method(_name))
for _name, _value in vars(MemoryBank).items():  # embedder, worker, generation_worker: the same properties
    if isinstance(_value, property):
        setattr(AsyncMemoryBank, _name, _value)


class AsyncPendingOperation(PendingOperation):
    """A handle on a GenerateMemories operation started by an AsyncMemoryBank: ``await get()``, ``await wait()``."""

    @functools.wraps(PendingOperation.get)
    async def get(self) -> Any:
        return await _spawn(PendingOperation.get, self._sync())

    @functools.wraps(PendingOperation.wait)
    async def wait(self, *args: Any, **kwargs: Any) -> Any:
        return await _spawn(PendingOperation.wait, self._sync(), *args, **kwargs)

    def _sync(self) -> PendingOperation:
        # The same operation over the bank's sync view (inside a bridge).
        return PendingOperation(self.bank._view, self.name)
