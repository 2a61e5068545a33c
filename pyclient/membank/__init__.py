"""membank: long-term memory for AI agents that lives inside PostgreSQL.

The memory engine is SQL in the ``membank`` schema; this package is a thin
client over it (``MemoryBank``), plus the CLI and the embedded server.
"""

from membank.client import MemoryBank, PendingOperation
from membank.errors import (
    ConflictError,
    PermissionDeniedError,
    InvalidArgumentError,
    MembankError,
    NotFoundError,
    NotInstalledError,
)
from membank.models import (
    Event, GeneratedMemory, Memory, MemoryPage, MemoryRevision, Operation, RetrievedMemory,
)

__all__ = [
    "ConflictError",
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
]
