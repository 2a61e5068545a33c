"""Rows of the SQL API as small dataclasses (times are aware datetimes in UTC)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID


class _Row:
    @classmethod
    def from_row(cls, row: dict[str, Any]):
        """Build the dataclass from a dict row, ignoring columns it does not know."""
        return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})


@dataclass(frozen=True)
class Memory(_Row):
    """A memory: ``fact`` (NATURAL_LANGUAGE) or ``structured_content`` (STRUCTURED_PROFILE) in an exact ``scope``."""

    name: UUID
    scope: dict[str, str]
    memory_type: str
    fact: str | None
    structured_content: dict[str, Any] | None
    topics: list[str]
    metadata: dict[str, Any]
    revision: int
    create_time: datetime
    update_time: datetime
    expire_time: datetime | None


@dataclass(frozen=True)
class MemoryPage:
    """One page of ``list_memories``; pass ``next_page_token`` to get the next (None: last page)."""

    memories: list[Memory]
    next_page_token: str | None


@dataclass(frozen=True)
class MemoryRevision(_Row):
    """An immutable snapshot written on every create (CREATED), update (UPDATED) and delete (DELETED)."""

    memory_name: UUID
    revision: int
    scope: dict[str, str]
    action: str
    memory_type: str
    fact: str | None
    previous_fact: str | None
    structured_content: dict[str, Any] | None
    previous_structured_content: dict[str, Any] | None
    topics: list[str]
    metadata: dict[str, Any]
    expire_time: datetime | None
    labels: dict[str, Any]
    source_event_ids: list[str]
    extracted_memories: Any
    create_time: datetime
