"""``MembankMemoryService``: an ADK memory service whose memories live in membank.

Sessions and events go in as membank events (the ADK event id is the
``event_id``, so adding a session again stores nothing twice) and start a
GenerateMemories operation for the scope ``{"app_name": ..., "user_id": ...}``;
``search_memory`` is membank's hybrid RetrieveMemories over the generated
facts. Like ADK's Vertex AI Memory Bank service, it returns facts about the
user (author ``"user"``), not raw events.

Every method is async: with an ``AsyncMemoryBank`` the calls are awaited on
the event loop (no thread); with a ``MemoryBank`` they run in a thread
(``asyncio.to_thread``), so an agent's event loop never waits on them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

try:
    from google.adk.memory import BaseMemoryService
    from google.adk.memory.base_memory_service import SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.genai import types
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("membank.adk needs google-adk: pip install -e '.[adk]' in the membank checkout") from err

from membank.adk._calls import call, run
from membank.client import PendingOperation

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session

    from membank.async_client import AsyncMemoryBank
    from membank.client import MemoryBank

log = logging.getLogger("membank.adk")

# One GenerateMemories operation takes at most this many events (the SQL API's limit).
MAX_EVENTS_PER_OPERATION = 1000
# Keys of ``custom_metadata`` that add_events_to_memory / add_memory read.
SUPPORTED_METADATA = ("wait_for_completion", "ttl", "topics", "allowed_topics", "disable_consolidation",
                      "enable_consolidation", "metadata")


def event_text(event: Event) -> str | None:
    """The text parts of an ADK event joined by newlines; None when it has none (such events are skipped)."""
    content = getattr(event, "content", None)
    if content is None or not content.parts:
        return None
    texts = [part.text for part in content.parts if getattr(part, "text", None) and not getattr(part, "thought", None)]
    text = "\n".join(texts)
    return text if text.strip() else None


def to_membank_event(event: Event) -> dict[str, Any] | None:
    """An ADK event as a membank event (``event_id``, ``author``, ``text``, ``timestamp``), or None without text."""
    text = event_text(event)
    if text is None:
        return None
    return {"event_id": event.id, "author": event.author or "user", "text": text,
            "timestamp": datetime.fromtimestamp(event.timestamp, tz=timezone.utc).isoformat()}


class MembankMemoryService(BaseMemoryService):
    """ADK memory service backed by membank (GenerateMemories in, hybrid RetrieveMemories out)."""

    def __init__(self, bank: MemoryBank | AsyncMemoryBank | None = None, *, url: str | None = None, top_k: int = 3,
                 min_similarity: float | None = None, scope_keys: tuple[str | None, str] = ("app_name", "user_id"),
                 wait_for_completion: bool = False, process_in_process: bool = False,
                 wait_timeout: float = 300.0, topics: list[Any] | None = None,
                 decompose: str | None = None, min_relevance: float | None | str = "default",
                 rerank: bool = True) -> None:
        """Serve memories from ``bank``: an AsyncMemoryBank (awaited on the event loop, no thread), a
        MemoryBank (called in threads), or None for a new ``MemoryBank(url)``.

        ``top_k`` (1..100) results per search, keeping those with cosine
        similarity >= ``min_similarity`` when given, and none when no result's
        relevance reaches ``min_relevance`` (the estimated probability, 0..1,
        that a memory is evidence for the query; ``"default"``: the bank's fitted floor,
        ``membank.default_min_relevance()``, so that a query about nothing the
        user said puts no memory into the prompt; None keeps the top_k,
        whatever they are). ``scope_keys``: the
        membank scope keys for ADK's app_name and user_id (None for the first
        to share memories across apps). ``wait_for_completion``: adding
        events waits for its GenerateMemories operation (default: start it
        and return, a ``membank worker`` runs it); with
        ``process_in_process`` the wait runs the operation here instead of
        waiting for a worker. ``topics``: GenerateMemories topics (default
        the four managed ones). ``decompose`` (``"rules"``,
        ``"model:<provider>"``, ...) splits a compound search query into
        sub-queries, embedded in one call (see ``MemoryBank.retrieve_memories``).
        ``rerank`` (default True: search results go into a prompt unasked):
        retrieval's second pass orders them (``retrieve_memories(rerank=True)``,
        docs/retrieval.md); False keeps the first pass.
        """
        if bank is None:
            from membank.client import MemoryBank

            bank = MemoryBank(url)
        self.bank = bank
        self.top_k = top_k
        self.min_similarity = min_similarity
        self.min_relevance = min_relevance
        self.rerank = rerank
        self.scope_keys = scope_keys
        self.wait_for_completion = wait_for_completion
        self.process_in_process = process_in_process
        self.wait_timeout = wait_timeout
        self.topics = topics
        self.decompose = decompose
        self.operations: list[PendingOperation] = []
        """Every GenerateMemories operation this service started, oldest first."""

    def scope(self, app_name: str, user_id: str) -> dict[str, str]:
        """The membank scope of an ADK (app_name, user_id) pair."""
        app_key, user_key = self.scope_keys
        return {user_key: user_id, **({app_key: app_name} if app_key else {})}

    # -- ingestion -------------------------------------------------------------
    async def add_session_to_memory(self, session: Session) -> None:
        """Append the session's text events (once each) and start GenerateMemories for them."""
        await self.add_events_to_memory(app_name=session.app_name, user_id=session.user_id,
                                        events=session.events, session_id=session.id)

    async def add_events_to_memory(self, *, app_name: str, user_id: str, events: Sequence[Event],
                                   session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None) -> None:
        """Append events to the session (``session_id``, default ``"adk-events"``) and generate memories from them.

        Events without text are skipped; an event whose id the session
        already holds is not appended again (the first version stays) and
        not generated from again. ``custom_metadata``: ``wait_for_completion``
        (bool), ``ttl`` (seconds of the created memories),
        ``topics``/``allowed_topics``, ``disable_consolidation``.
        """
        await run(self.bank, self._add_events, self.scope(app_name, user_id), list(events),
                                session_id or "adk-events", dict(custom_metadata or {}))

    def _add_events(self, bank: MemoryBank, scope: dict[str, str], events: list[Event], session_id: str,
                    options: dict[str, Any]) -> None:
        from membank import errors

        converted = [e for e in (to_membank_event(event) for event in events) if e is not None]
        if not converted:
            return
        # Events already given to GenerateMemories: those stored no later than
        # the session's newest operation started. Events that a session
        # service (MembankSessionService) stored in the same session since
        # then are still new to memory.
        last = [o.create_time for o in bank.list_operations(scope, session_id=session_id, max_operations=50)
                if o.error is None]
        try:
            stored = {e.event_id for e in bank.list_events(scope, session_id, max_events=100000)
                      if last and e.append_time <= max(last)}
        except errors.NotFoundError:
            stored = set()
        seen: set[str] = set()
        new = []
        for e in converted:
            if e["event_id"] not in stored and e["event_id"] not in seen:
                seen.add(e["event_id"])
                new.append(e)
        wait = bool(options.get("wait_for_completion", self.wait_for_completion))
        if new:
            self._check_process(bank, wait)
        ttl = options.get("ttl")
        topics = options.get("topics") or options.get("allowed_topics") or self.topics
        for start in range(0, len(new), MAX_EVENTS_PER_OPERATION):
            pending = bank.generate_memories(
                scope, session_id=session_id, events=new[start:start + MAX_EVENTS_PER_OPERATION],
                topics=list(topics) if topics else None,
                disable_consolidation=bool(options.get("disable_consolidation", False)),
                ttl=timedelta(seconds=float(ttl)) if ttl is not None else None)
            self.operations.append(pending)
            log.info("GenerateMemories %s started for %d events of session %s", pending.name,
                     len(new[start:start + MAX_EVENTS_PER_OPERATION]), session_id)
            if wait:  # a sync handle over the bank this runs on (an AsyncMemoryBank's view gives async ones)
                operation = PendingOperation(bank, pending.name).wait(self.wait_timeout,
                                                                      process=self.process_in_process)
                if operation.error:
                    log.warning("GenerateMemories %s failed: %s", pending.name, operation.error)

    async def add_memory(self, *, app_name: str, user_id: str, memories: Sequence[MemoryEntry],
                         custom_metadata: Mapping[str, object] | None = None) -> None:
        """Store explicit memories: each entry's text becomes a fact (``create_memory``).

        With ``custom_metadata["enable_consolidation"]`` the facts go through
        GenerateMemories instead (compared with what the scope already knows).
        ``custom_metadata["metadata"]`` (a dict) and ``ttl`` (seconds) apply
        to each created memory; an entry's own ``custom_metadata`` is stored
        as its metadata, and its ``id`` as ``metadata.adk_memory_id``.
        """
        await run(self.bank, self._add_memories, self.scope(app_name, user_id), list(memories),
                                dict(custom_metadata or {}))

    def _check_process(self, bank: MemoryBank, wait: bool) -> None:
        """Refuse (PermissionDeniedError, 42501) before anything is written when the wait would run the jobs here.

        Running them needs membank_worker or membank_admin (``membank.worker.require_job_role``): a writer
        login that asked for ``process_in_process`` gets the error before its events or operation are stored.
        """
        if wait and self.process_in_process:
            bank._require_job_role()

    def _add_memories(self, bank: MemoryBank, scope: dict[str, str], memories: list[MemoryEntry],
                      options: dict[str, Any]) -> None:
        facts = [(m, event_text(m)) for m in memories]
        facts = [(m, text) for m, text in facts if text]
        ttl = options.get("ttl")
        ttl = timedelta(seconds=float(ttl)) if ttl is not None else None
        if options.get("enable_consolidation"):
            self._check_process(bank, bool(options.get("wait_for_completion", self.wait_for_completion)))
            pending = bank.generate_memories(scope, facts=[text for _, text in facts], ttl=ttl)
            self.operations.append(pending)
            if bool(options.get("wait_for_completion", self.wait_for_completion)):
                PendingOperation(bank, pending.name).wait(self.wait_timeout, process=self.process_in_process)
            return
        shared = options.get("metadata") if isinstance(options.get("metadata"), Mapping) else {}
        for entry, text in facts:
            metadata = {**shared, **(entry.custom_metadata or {})}
            if entry.id:
                metadata["adk_memory_id"] = entry.id
            bank.create_memory(scope, text, metadata=metadata or None, ttl=ttl)

    # -- retrieval ---------------------------------------------------------------
    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The ``top_k`` memories of the user closest to ``query`` (hybrid: vectors and full text, RRF, re-ranked).

        An empty or blank query means no query, as everywhere in membank: the
        user's memories, at most ``top_k``, oldest first. Each ``MemoryEntry`` carries
        the fact as content, author ``"user"``, the memory's update time
        (ISO 8601) as timestamp, its name as id, and in ``custom_metadata``
        the memory's metadata plus ``topics``, ``revision``, ``score``,
        ``similarity``, ``relevance``, ``matched_signals`` and ``degraded``
        (true while a fact has no vector yet: matched by text only). When no
        memory reaches ``min_relevance`` none is returned: a query about
        nothing the user said returns no memory.
        """
        query = query if query and query.strip() else None
        min_relevance = self.min_relevance
        if min_relevance == "default" and query is not None:
            # read from the bank once (MemoryBank keeps it)
            min_relevance = await call(self.bank, "default_min_relevance")
        results = await call(self.bank, "retrieve_memories", self.scope(app_name, user_id), query,
                             top_k=self.top_k, min_similarity=self.min_similarity if query is not None else None,
                             min_relevance=min_relevance if query is not None else None,
                             rerank=self.rerank if query is not None else None,
                             **({"decompose": self.decompose} if self.decompose and query is not None else {}))
        return SearchMemoryResponse(memories=[self._entry(r) for r in results])

    @staticmethod
    def _entry(result: Any) -> MemoryEntry:
        memory = result.memory
        return MemoryEntry(
            id=str(memory.name),
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=memory.fact)]),
            timestamp=memory.update_time.isoformat() if memory.update_time else None,
            custom_metadata={**(memory.metadata or {}), "topics": list(memory.topics or []),
                             "revision": memory.revision, "score": result.score, "similarity": result.similarity,
                             "relevance": result.relevance, "matched_signals": list(result.matched_signals or []), "degraded": result.degraded},
        )

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Delete the user's memory ``memory_id`` (the id ``search_memory`` returned).

        A missing id, or one that is not this user's live memory, deletes
        nothing (as ADK's own services do); its revisions stay readable.
        """
        if not memory_id:
            return
        await run(self.bank, self._delete, self.scope(app_name, user_id), memory_id)

    def _delete(self, bank: MemoryBank, scope: dict[str, str], memory_id: str) -> None:
        from membank import errors

        try:
            bank.delete_memory(memory_id, scope=scope)
        except (errors.NotFoundError, errors.InvalidArgumentError):
            log.info("delete_memory: %s is not a live memory of this scope; nothing deleted", memory_id)

    async def retrieve_profiles(self, *, app_name: str, user_id: str) -> list[Any]:
        """The user's profiles, when the installed membank client has them (``MemoryBank.retrieve_profiles``)."""
        if not hasattr(self.bank, "retrieve_profiles"):
            raise NotImplementedError("this membank has no profiles (MemoryBank.retrieve_profiles)")
        return await call(self.bank, "retrieve_profiles", self.scope(app_name, user_id))

    def close(self) -> Any:
        """Close the bank this service uses (with an AsyncMemoryBank, returns the awaitable of its close)."""
        return self.bank.close()
