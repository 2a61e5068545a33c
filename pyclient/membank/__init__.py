"""membank: long-term memory for AI agents that lives inside PostgreSQL.

The memory engine is SQL in the ``membank`` schema; this package is a thin
client over it (``MemoryBank``), plus the CLI and the embedded server.
"""

import logging
from typing import TYPE_CHECKING

# A library logs, the application decides where to: without a handler of its
# own, Python would print membank's warnings (a failed attempt) on stderr.
logging.getLogger("membank").addHandler(logging.NullHandler())

# The name on the package index ("membank" there is an unrelated project);
# the import package and the command are ``membank``.
DISTRIBUTION = "membank-pg"

# Names load on first use (PEP 562), so that ``import membank.cli`` does not
# pay for psycopg before a command needs it.
_LAZY = {
    "MemoryBank": "membank.client", "PendingOperation": "membank.client",
    "AsyncMemoryBank": "membank.async_client", "AsyncPendingOperation": "membank.async_client",
    "ConflictError": "membank.errors", "InvalidArgumentError": "membank.errors", "MembankError": "membank.errors",
    "PermissionDeniedError": "membank.errors", "DeadlockError": "membank.errors",
    "NotFoundError": "membank.errors", "NotInstalledError": "membank.errors",
    "Event": "membank.models", "GeneratedMemory": "membank.models", "Memory": "membank.models",
    "MemoryPage": "membank.models", "MemoryRevision": "membank.models", "Operation": "membank.models",
    "RetrievedMemory": "membank.models",
    "RetrievedMemories": "membank.models",
}


def package_version() -> str:
    """Return the installed version of membank (distribution ``membank-pg``), or ``"unknown"`` outside one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


def __getattr__(name: str):
    """Import a public name from its module on first use."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'membank' has no attribute {name!r}")


if TYPE_CHECKING:
    from membank.async_client import AsyncMemoryBank, AsyncPendingOperation
    from membank.client import MemoryBank, PendingOperation
    from membank.errors import (
        ConflictError, DeadlockError, InvalidArgumentError, MembankError, NotFoundError, NotInstalledError,
        PermissionDeniedError,
    )
    from membank.models import (
        Event, GeneratedMemory, Memory, MemoryPage, MemoryRevision, Operation, RetrievedMemories, RetrievedMemory,
    )

__all__ = [
    "AsyncMemoryBank",
    "AsyncPendingOperation",
    "ConflictError",
    "DeadlockError",
    "PermissionDeniedError",
    "Event",
    "GeneratedMemory",
    "InvalidArgumentError",
    "Memory",
    "MemoryBank",
    "MemoryPage",
    "MemoryRevision",
    "MembankError",
    "NotFoundError",
    "NotInstalledError",
    "Operation",
    "PendingOperation",
    "RetrievedMemory",
    "RetrievedMemories",
]
