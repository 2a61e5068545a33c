"""How the ADK services reach the bank: an AsyncMemoryBank directly on the event loop, a MemoryBank in a thread."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any


async def call(bank: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``bank.method(*args, **kwargs)``: awaited on an AsyncMemoryBank, in a thread on a MemoryBank."""
    bound = getattr(bank, method)
    if inspect.iscoroutinefunction(bound):
        return await bound(*args, **kwargs)
    return await asyncio.to_thread(bound, *args, **kwargs)


async def run(bank: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(sync_bank, *args)``, code of several sync bank calls: on an AsyncMemoryBank's pool (its
    ``run_sync``, no thread), or in a thread with a MemoryBank."""
    if hasattr(bank, "run_sync"):
        return await bank.run_sync(fn, *args)
    return await asyncio.to_thread(fn, bank, *args)
