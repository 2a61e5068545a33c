"""membank for Google's Agent Development Kit (``.venv/bin/pip install -e '.[adk]'`` in the checkout).

``MembankMemoryService`` (``membank.adk.memory``) is an ADK
``BaseMemoryService`` and ``MembankSessionService`` (``membank.adk.sessions``)
an ADK ``BaseSessionService`` over a membank database. Imported lazily
(google-adk is an optional extra).
"""

from typing import TYPE_CHECKING

__all__ = ["MembankMemoryService", "MembankSessionService"]


def __getattr__(name: str):
    """Import ``MembankMemoryService`` / ``MembankSessionService`` on first use (google-adk is an optional extra)."""
    if name == "MembankMemoryService":
        from membank.adk.memory import MembankMemoryService

        return MembankMemoryService
    if name == "MembankSessionService":
        from membank.adk.sessions import MembankSessionService

        return MembankSessionService
    raise AttributeError(f"module 'membank.adk' has no attribute {name!r}")


if TYPE_CHECKING:
    from membank.adk.memory import MembankMemoryService
    from membank.adk.sessions import MembankSessionService
