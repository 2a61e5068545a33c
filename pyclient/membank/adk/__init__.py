"""membank for Google's Agent Development Kit (``pip install 'membank[adk]'``).

``MembankMemoryService`` (``membank.adk.memory``) is an ADK
``BaseMemoryService`` over a membank database. Imported lazily, so that
``membank.adk`` can hold further services (a session service) side by side.
"""

from typing import TYPE_CHECKING

__all__ = ["MembankMemoryService"]


def __getattr__(name: str):
    """Import ``MembankMemoryService`` on first use (google-adk is an optional extra)."""
    if name == "MembankMemoryService":
        from membank.adk.memory import MembankMemoryService

        return MembankMemoryService
    raise AttributeError(f"module 'membank.adk' has no attribute {name!r}")


if TYPE_CHECKING:
    from membank.adk.memory import MembankMemoryService
