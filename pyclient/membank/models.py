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


@dataclass(frozen=True)
class RetrievedMemory(_Row):
    """One result of ``retrieve_memories``: the memory and how it ranked.

    ``distance`` is the cosine distance to the query (smaller is closer),
    ``similarity`` = 1 - distance; ``text_rank`` the full-text score (the
    sum of the IDF of the query's lexemes the memory holds, half for one
    only its context holds); ``vector_rank``/``text_match_rank`` its 1-based positions in
    each candidate list; ``score`` the fused score (RRF or convex);
    ``matched_signals`` ⊆ {"vector", "text"}; ``degraded`` is True when the
    memory or the query had no current vector, so only text could match it;
    ``relevance`` the estimated probability (0..1) that the memory is
    evidence for the query (a logistic model fitted on LoCoMo,
    docs/retrieval.md; None when listing without a query).
    """

    memory: Memory
    distance: float | None
    similarity: float | None
    text_rank: float | None
    vector_rank: int | None
    text_match_rank: int | None
    score: float | None
    matched_signals: list[str]
    degraded: bool
    relevance: float | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RetrievedMemory:
        """Build from a row of membank.retrieve_memories."""
        return cls(memory=Memory.from_row(row), **{f.name: row[f.name] for f in fields(cls) if f.name != "memory"})


class RetrievedMemories(list):
    """The result of ``retrieve_memories``: a list of ``RetrievedMemory`` in rank order.

    ``below_threshold``: how many of the top ``top_k`` were left out because
    none reached ``min_relevance`` (0 when one did, or without a floor);
    ``min_relevance`` the floor asked for (None: none). An empty list with
    ``below_threshold > 0`` means the scope holds nothing relevant to the query.
    """

    def __init__(self, items=(), *, below_threshold: int = 0, min_relevance: float | None = None) -> None:
        super().__init__(items)
        self.below_threshold = below_threshold
        self.min_relevance = min_relevance


@dataclass(frozen=True)
class EmbeddingBacklog(_Row):
    """State of the embedding queue (``membank.embedding_backlog()``)."""

    pending: int
    failed: int
    embedded: int
    oldest_enqueue_time: datetime | None
    model_id: str | None
    dimension: int | None
    last_error: str | None


@dataclass(frozen=True)
class Event(_Row):
    """A raw conversation event of a session: who said what, when (``event_time``), and when it was stored."""

    session_id: str
    event_id: str
    author: str
    text: str | None
    event_time: datetime
    append_time: datetime


def _memory_from_json(value: dict[str, Any]) -> Memory:
    times = ("create_time", "update_time", "expire_time")
    return Memory(**{**{f.name: value.get(f.name) for f in fields(Memory)},
                     "name": UUID(value["name"]),
                     **{t: datetime.fromisoformat(value[t]) if value.get(t) else None for t in times}})


@dataclass(frozen=True)
class GeneratedMemory:
    """One action of a GenerateMemories operation: the ``memory`` as it was stored, and CREATED/UPDATED/DELETED."""

    memory: Memory
    action: str


@dataclass(frozen=True)
class Operation(_Row):
    """A GenerateMemories operation (``membank.get_operation``).

    ``done`` is False while queued or running; ``error`` is None or
    ``{"code", "message"}``; ``generated_memories`` are the actions in the
    order applied (none, with done, is a valid no-op); ``rejected_items``
    are the model's items that did not apply, each with its ``reason``.
    """

    name: UUID
    scope: dict[str, str]
    session_id: str | None
    done: bool
    error: dict[str, Any] | None
    generated_memories: list[GeneratedMemory]
    rejected_items: list[dict[str, Any]]
    stage: str
    model_calls: int
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Operation:
        """Build from a ``membank.operation`` row (generated memories parsed into Memory objects)."""
        generated = [GeneratedMemory(_memory_from_json(g["memory"]), g["action"])
                     for g in row["generated_memories"]]
        return cls(**{**{f.name: row[f.name] for f in fields(cls)}, "generated_memories": generated})


@dataclass(frozen=True)
class GenerationBacklog(_Row):
    """State of the generation queue (``membank.generation_backlog()``)."""

    pending_operations: int
    due_jobs: int
    retrying_jobs: int
    oldest_create_time: datetime | None


@dataclass(frozen=True)
class ProfileSchema(_Row):
    """A structured-profile schema: ``memory_schema`` is the JSON Schema whose properties are the profile's fields."""

    schema_id: str
    memory_schema: dict[str, Any]
    create_time: datetime
    update_time: datetime


@dataclass(frozen=True)
class ToolDecision(_Row):
    """A tool-permission decision: ``decision`` ALLOW | BLOCK | PROMPT_USER, why, the rule and tier that decided.

    ``tier``: 0 exempt tool, 1 allow-once grant, 2 project rule, 3 global rule, None when no rule decided.
    """

    decision: str
    reason: str
    rule_id: int | None = None
    tier: int | None = None

    @property
    def allowed(self) -> bool:
        """True only for ALLOW."""
        return self.decision == "ALLOW"


@dataclass(frozen=True)
class ToolRule(_Row):
    """A tool-permission rule (``membank.create_tool_rule``); ``project_id`` None is a global rule."""

    id: int
    scope: dict[str, str]
    project_id: str | None
    tool_name: str
    pattern: str
    decision: str
    allow_operators: list[str]
    description: str | None
    revision: int
    create_time: datetime
    update_time: datetime


@dataclass(frozen=True)
class Ingestion(_Row):
    """What ``ingest_events`` did to a stream: events ``appended``, ``pending_events`` not yet generated from,
    the operation this call queued (``operation_name``, None when the trigger did not fire) and why
    (``trigger_reason``), and the stream's newest operation (``last_operation_name``)."""

    scope: dict[str, str]
    stream_id: str
    appended: int
    pending_events: int
    operation_name: UUID | None
    trigger_reason: str | None
    last_operation_name: UUID | None


@dataclass(frozen=True)
class DueStream(_Row):
    """One operation queued by the IngestEvents sweep (``generate_due_streams``): the stream, why it was due,
    and the events it covers (``first_seq``..``last_seq`` in append order, ``covered_events`` with text)."""

    scope: dict[str, str]
    stream_id: str
    trigger_reason: str
    operation_name: UUID
    first_seq: int
    last_seq: int
    covered_events: int
