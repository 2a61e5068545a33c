"""LangGraph's long-term memory store (``BaseStore``) on a membank bank: ``MembankStore`` and ``AsyncMembankStore``.

Install with the ``[langgraph]`` extra. How LangGraph's words map onto membank's (docs/langgraph.md):

- A **namespace** ``("users", "alice")`` is the exact scope
  ``{"store": "langgraph", "ns.0": "users", "ns.1": "alice"}``: the store's
  ``base_scope`` plus one key per label, by position. Every read and write of
  items goes through the exact-scope API, so a login bound to that scope
  (``bind_role_to_scope``) reaches that namespace and no other.
- An **item** is one memory of that scope: ``metadata`` holds ``{"key",
  "value", "indexed", "ttl_minutes"}``; its ``fact`` is the text of the
  indexed fields (``index``), which membank embeds with its own embedder and
  indexes for full text. ``created_at``/``updated_at`` are the memory's
  ``create_time``/``update_time``.
- **Prefix search and list_namespaces** name scopes with
  ``membank.list_scopes`` (containment of ``{"ns.0": "users"}``), which lists
  only scopes the caller may reach, and then read each scope exactly.
- **Search with a query** is membank's hybrid retrieval (vectors + full
  text, RRF); an item's ``score`` is the cosine similarity of its vector to
  the query (None while it has no vector yet).
- **TTL** (minutes) is the memory's ``expire_time``: an expired item is never
  returned; ``sweep_ttl`` (or ``membank worker``, as admin) removes it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from langgraph.store.base import (
    BaseStore, GetOp, IndexConfig, Item, ListNamespacesOp, MatchCondition, Op, PutOp, Result, SearchItem, SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path

from membank import errors
from membank.async_client import AsyncMemoryBank
from membank.client import BLANK, MemoryBank
from membank.models import Memory

__all__ = ["AsyncMembankStore", "MembankStore", "DEFAULT_BASE_SCOPE", "label_key"]

DEFAULT_BASE_SCOPE = {"store": "langgraph"}
"""The keys every namespace's scope carries besides its labels (``base_scope``)."""
MAX_SCOPE_KEYS = 16  # membank_private.validate_scope
MAX_FACT_CHARS = 32768  # create_memory's fact
SCOPES_PER_CALL = 16  # list_memories / retrieve_memories take up to 16 exact scopes
MAX_RANKED = 100  # retrieve_memories' top_k
_COMPARISONS = {
    "$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a > b, "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b,
}


def label_key(position: int) -> str:
    """The scope key of a namespace's label at ``position`` (0-based): ``"ns.0"``, ``"ns.1"``, ..."""
    return f"ns.{position}"


def _comparable(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    return (isinstance(a, numbers) and isinstance(b, numbers)) or type(a) is type(b)


def _matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter on an item's value: ``{field: value}`` equality or ``{field: {"$gt": 3, ...}}``."""
    for field, condition in (filter or {}).items():
        actual = value.get(field)
        if isinstance(condition, Mapping) and condition and all(str(k).startswith("$") for k in condition):
            for op, operand in condition.items():
                compare = _COMPARISONS.get(op)
                if compare is None:
                    raise errors.invalid("filter", f"unknown operator {op!r} on {field!r}",
                                         "use $eq, $ne, $gt, $gte, $lt or $lte")
                if op == "$ne":
                    if actual == operand:
                        return False
                elif actual is None or not _comparable(actual, operand) or not compare(actual, operand):
                    return False
        elif actual != condition:
            return False
    return True


def _containment(filter: Mapping[str, Any] | None) -> dict[str, Any]:
    """The equality part of a filter, sent to SQL as metadata containment (a pre-filter; _matches decides)."""
    return {field: condition for field, condition in (filter or {}).items()
            if not (isinstance(condition, Mapping) and condition and all(str(k).startswith("$") for k in condition))}


def _path_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[:len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path):]
    return all(p == "*" or p == n for p, n in zip(path, part))


class _StoreCore:
    """What both stores share: the mapping and every operation, written against a sync ``MemoryBank``."""

    supports_ttl = True

    def _setup(self, base_scope: Mapping[str, str] | None, index: IndexConfig | None, ttl: TTLConfig | None,
               embed_in_process: bool) -> None:
        base = dict(DEFAULT_BASE_SCOPE if base_scope is None else base_scope)
        if not base or any(k.startswith("ns.") for k in base):
            raise errors.invalid("base_scope", "must be a non-empty scope whose keys do not start with 'ns.'",
                                 'e.g. {"store": "langgraph"}; the labels of a namespace are the keys ns.0, ns.1, ...')
        from membank.scopes import validate_scope

        self.base_scope = validate_scope(base, "base_scope")
        self.max_depth = MAX_SCOPE_KEYS - len(self.base_scope)
        fields = (index or {}).get("fields") or ["$"]
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise errors.invalid("index", "fields must be a list of JSON paths", 'e.g. {"fields": ["text", "$"]}')
        self._fields = list(fields)
        self._index = dict(index or {})
        self.ttl_config = ttl
        self.embed_in_process = embed_in_process
        self._unembedded = False  # this store put items since it last embedded

    # -- the mapping ------------------------------------------------------------
    def scope_of(self, namespace: tuple[str, ...]) -> dict[str, str]:
        """The exact membank scope of ``namespace``: ``base_scope`` plus ``{"ns.<i>": label}``.

        Raises InvalidArgumentError naming ``namespace`` when it is deeper than
        16 - len(base_scope) labels or a label is not 1..1024 characters.
        """
        if len(namespace) > self.max_depth:
            raise errors.invalid("namespace", f"has {len(namespace)} labels",
                                 f"a namespace has at most {self.max_depth} labels here (a scope has at most 16 keys, "
                                 f"{len(self.base_scope)} of them base_scope's)")
        for label in namespace:
            if not isinstance(label, str) or not 1 <= len(label) <= 1024 or "." in label:
                raise errors.invalid("namespace", f"label {label!r} is not 1..1024 characters without '.'",
                                     'labels are non-empty strings, e.g. ("users", "alice")')
        return {**self.base_scope, **{label_key(i): label for i, label in enumerate(namespace)}}

    def namespace_of(self, scope: Mapping[str, str]) -> tuple[str, ...] | None:
        """The namespace whose scope is ``scope``, or None when ``scope`` is not one of this store's."""
        depth = len(scope) - len(self.base_scope)
        if depth < 1 or any(scope.get(k) != v for k, v in self.base_scope.items()):
            return None
        labels = tuple(scope.get(label_key(i)) for i in range(depth))
        return None if None in labels else labels

    @property
    def index_config(self) -> dict[str, Any]:
        """The index: ``fields`` embedded per item, ``dims`` and ``embed`` of the bank's own embedder."""
        embedder = self.bank.embedder
        return {**self._index, "fields": self._fields, "dims": embedder.dimension, "embed": embedder}

    def _text(self, key: str, value: Mapping[str, Any], index: Any) -> tuple[str, bool]:
        """(fact, indexed): the text of the indexed fields, or the key for an item that is not indexed."""
        if index is False:
            return key, False
        fields = index if isinstance(index, list) else self._fields
        texts = [t for path in fields for t in get_text_at_path(value, path) if t.strip(BLANK)]
        if not texts:
            return key, False
        return "\n".join(texts)[:MAX_FACT_CHARS], True

    def _item(self, memory: Memory, namespace: tuple[str, ...], score: float | None = None,
              search: bool = False) -> Item:
        meta = memory.metadata
        cls_args = dict(namespace=namespace, key=meta["key"], value=meta["value"], created_at=memory.create_time,
                        updated_at=memory.update_time)
        return SearchItem(**cls_args, score=score) if search else Item(**cls_args)

    @staticmethod
    def _segments(ops: list[Op]) -> list[list[Op]]:
        """``ops`` split before each search with a query (where the store's pending puts may need embedding)."""
        segments: list[list[Op]] = []
        current: list[Op] = []
        for op in ops:
            if current and isinstance(op, SearchOp) and op.query:
                segments.append(current)
                current = []
            current.append(op)
        return segments + [current] if current else segments

    def _embeds_puts(self, ops: list[Op]) -> bool:
        """Whether this batch writes items that this store will embed in process (needs membank_worker)."""
        return self.embed_in_process and any(isinstance(op, PutOp) and op.value is not None for op in ops)

    def _embed_first(self, segment: list[Op]) -> bool:
        """Whether the pending puts of this store must be embedded before ``segment`` runs."""
        first = segment[0] if segment else None
        return self.embed_in_process and self._unembedded and isinstance(first, SearchOp) and bool(first.query)

    # -- operations (on a sync bank: a MemoryBank, or an AsyncMemoryBank's view inside run_sync) --------
    def _run(self, bank: MemoryBank, ops: Iterable[Op]) -> tuple[list[Result], bool]:
        results: list[Result] = []
        wrote = False
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(bank, op))
            elif isinstance(op, SearchOp):
                results.append(self._search(bank, op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(bank, op))
            elif isinstance(op, PutOp):
                wrote = self._put(bank, op) or wrote
                results.append(None)
            else:
                raise errors.invalid("ops", f"unknown operation {type(op).__name__}",
                                     "pass GetOp, PutOp, SearchOp or ListNamespacesOp")
        return results, wrote

    @staticmethod
    def _find(bank: MemoryBank, scope: dict[str, str], key: str) -> list[Memory]:
        # Newest first: two first puts of one key racing leave two memories; the newest is the item,
        # and the next put of that key deletes the other.
        page = bank.list_memories(scope, metadata_filter={"key": key}, page_size=100)
        return sorted(page.memories, key=lambda m: (m.update_time, str(m.name)), reverse=True)

    def _refresh(self, bank: MemoryBank, scope: dict[str, str], memory: Memory) -> None:
        minutes = memory.metadata.get("ttl_minutes")
        if minutes is not None:
            with contextlib.suppress(errors.NotFoundError):  # deleted or expired meanwhile: nothing to refresh
                bank.update_memory(memory.name, scope=scope, ttl=timedelta(minutes=minutes))

    def _get(self, bank: MemoryBank, op: GetOp) -> Item | None:
        scope = self.scope_of(tuple(op.namespace))
        found = self._find(bank, scope, op.key)
        if not found:
            return None
        if op.refresh_ttl:
            self._refresh(bank, scope, found[0])
        return self._item(found[0], tuple(op.namespace))

    def _put(self, bank: MemoryBank, op: PutOp) -> bool:
        scope = self.scope_of(tuple(op.namespace))
        found = self._find(bank, scope, op.key)
        if op.value is None:
            for memory in found:
                with contextlib.suppress(errors.NotFoundError):
                    bank.delete_memory(memory.name, scope=scope, labels={"reason": "langgraph delete"})
            return False
        if not isinstance(op.value, Mapping):
            raise errors.invalid("value", f"must be a dict, got {type(op.value).__name__}", "LangGraph items are dicts")
        fact, indexed = self._text(op.key, op.value, op.index)
        metadata = {"key": op.key, "value": dict(op.value), "indexed": indexed}
        ttl = None
        if op.ttl is not None:
            metadata["ttl_minutes"] = op.ttl
            ttl = timedelta(minutes=op.ttl)
        if not found:
            bank.create_memory(scope, fact, metadata=metadata, ttl=ttl)
            return True
        current, *extra = found
        bank.update_memory(current.name, scope=scope, fact=fact, metadata=metadata, ttl=ttl,
                           clear_expiry=ttl is None and current.expire_time is not None)
        for memory in extra:
            with contextlib.suppress(errors.NotFoundError):
                bank.delete_memory(memory.name, scope=scope, labels={"reason": "langgraph duplicate key"})
        return True

    def _scopes(self, bank: MemoryBank, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], dict[str, str]]]:
        """(namespace, scope) of every namespace under ``prefix`` that holds items the caller may reach."""
        if len(prefix) > self.max_depth:
            return []
        pattern = {**self.base_scope, **{label_key(i): label for i, label in enumerate(prefix)}}
        found, after = [], None
        while True:
            rows = bank.list_scopes(pattern, max_scopes=10000, after_scope=after)
            for row in rows:
                namespace = self.namespace_of(row["scope"])
                if namespace is not None:
                    found.append((namespace, row["scope"]))
            if len(rows) < 10000:
                return found
            after = rows[-1]["scope"]

    def _search(self, bank: MemoryBank, op: SearchOp) -> list[SearchItem]:
        scopes = self._scopes(bank, tuple(op.namespace_prefix))
        namespaces = {tuple(sorted(scope.items())): ns for ns, scope in scopes}
        equal = _containment(op.filter)
        query = op.query if op.query and op.query.strip(BLANK) else None
        hits: list[tuple[Memory, float | None, float]] = []
        chunks = [[s for _, s in scopes[i:i + SCOPES_PER_CALL]] for i in range(0, len(scopes), SCOPES_PER_CALL)]
        for chunk in chunks:
            if query is None:
                metadata_filter = {"value": equal} if equal else None
                hits.extend((m, None, 0.0) for m in bank.iter_memories(chunk, metadata_filter=metadata_filter)
                            if _matches(m.metadata["value"], op.filter))
            else:
                exact = len(equal) == len(op.filter or {})  # every condition went to SQL: rank only what is needed
                top_k = min(MAX_RANKED, op.offset + op.limit) if exact else MAX_RANKED
                metadata_filter = {"indexed": True, **({"value": equal} if equal else {})}
                for r in bank.retrieve_memories(chunk, query[:4000], top_k=max(top_k, 1),
                                                metadata_filter=metadata_filter):
                    if _matches(r.memory.metadata["value"], op.filter):
                        hits.append((r.memory, r.similarity, r.score or 0.0))
        if query is None:  # newest first, as PostgresStore lists them
            hits.sort(key=lambda h: (h[0].update_time, h[0].metadata["key"]), reverse=True)
        elif len(chunks) > 1:  # RRF scores of separate calls are on one scale (1 / (k + rank))
            hits.sort(key=lambda h: h[2], reverse=True)
        page = hits[op.offset:op.offset + op.limit]
        items = []
        for memory, similarity, _ in page:
            namespace = namespaces[tuple(sorted(memory.scope.items()))]
            if op.refresh_ttl:
                self._refresh(bank, memory.scope, memory)
            items.append(self._item(memory, namespace, similarity, search=True))
        return items

    def _list_namespaces(self, bank: MemoryBank, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = list(op.match_conditions or ())
        prefix: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix":
                fixed = []
                for label in condition.path:
                    if label == "*":
                        break
                    fixed.append(label)
                prefix = max(prefix, tuple(fixed), key=len)
        namespaces = set()
        for namespace, _ in self._scopes(bank, prefix):
            if all(_path_matches(namespace, c) for c in conditions):
                namespaces.add(namespace[:op.max_depth] if op.max_depth is not None else namespace)
        return sorted(namespaces)[op.offset:op.offset + op.limit]


def _setup_error(err: errors.MembankError) -> errors.MembankError:
    if err.sqlstate == "42883":  # undefined_function: a schema older than the store
        return errors.SetupError("the bank's schema has no membank.list_scopes, which the LangGraph store needs",
                                 hint="run `membank db upgrade` as the database owner")
    return err


class MembankStore(_StoreCore, BaseStore):
    """LangGraph's ``BaseStore`` on a ``MemoryBank``: namespaces are exact scopes, items are memories.

    ``store = MembankStore(bank, index={"fields": ["text"]}, ttl={"default_ttl": 60})``;
    then LangGraph's ``put``/``get``/``delete``/``search``/``list_namespaces``
    (and their ``a``-prefixed twins, run in a thread) or ``batch``.
    """

    def __init__(self, bank: MemoryBank, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 base_scope: Mapping[str, str] | None = None, embed_in_process: bool = False) -> None:
        """A store on ``bank`` (which the caller keeps open and closes).

        ``index``: ``{"fields": [JSON paths]}`` whose text is embedded and
        searched per item (default ``["$"]``, the whole value as JSON); ``dims``
        and ``embed`` are the bank's own embedder's and are ignored if given.
        ``ttl``: LangGraph's TTLConfig (``default_ttl`` minutes,
        ``refresh_on_read``, ``sweep_interval_minutes``). ``base_scope``: the
        scope keys every namespace carries (default ``{"store": "langgraph"}``).
        ``embed_in_process``: before a search with a query that follows puts
        of this store, embed the bank's queue in this process
        (``bank.process_pending(generation=False)``, which needs the
        ``membank_worker`` role), so the search ranks them by vector too;
        otherwise a ``membank worker`` embeds them and until then they are
        found by full text only.
        Raises InvalidArgumentError naming ``base_scope`` or ``index``.
        """
        self.bank = bank
        self._setup(base_scope, index, ttl, embed_in_process)
        self._sweeper: threading.Thread | None = None
        self._sweep_stop = threading.Event()

    def setup(self) -> None:
        """Check that the bank's schema serves the store (membank's migrations install it; nothing to create).

        Raises SetupError with a hint to run ``membank db upgrade`` when ``membank.list_scopes`` is missing.
        """
        try:
            self.bank.list_scopes(self.base_scope, max_scopes=1)
        except errors.MembankError as err:
            raise _setup_error(err) from None

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, url: str | None = None, **kwargs: Any) -> Iterator[MembankStore]:
        """``with MembankStore.from_conn_string(url) as store:`` a store on its own MemoryBank, closed after.

        ``url`` None: ``MEMBANK_DATABASE_URL``, else the embedded server. ``kwargs`` go to ``MembankStore``.
        """
        with MemoryBank(url) as bank:
            store = cls(bank, **kwargs)
            try:
                yield store
            finally:
                store.stop_ttl_sweeper()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order (each one or a few SQL calls) and return one result per op.

        Raises the bank's errors: PermissionDeniedError for a namespace the
        login is not bound to, InvalidArgumentError naming the argument.
        """
        ops = list(ops)
        if self._embeds_puts(ops):
            self.bank.worker.configure()  # a login that may not embed is refused before its puts are written
        results: list[Result] = []
        for segment in self._segments(ops):
            if self._embed_first(segment):
                self.bank.process_pending(generation=False)
                self._unembedded = False
            done, wrote = self._run(self.bank, segment)
            results += done
            self._unembedded = self._unembedded or wrote
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread (the bank's pool is thread-safe)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def sweep_ttl(self) -> int:
        """Remove expired memories (``purge_expired_memories``, bank-wide; needs ``membank_admin``); return how many.

        Expired items are never returned before that; this only frees their rows.
        """
        return self.bank.purge_expired_memories()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future:
        """Run ``sweep_ttl`` every ``sweep_interval_minutes`` (default the TTL config's) in a thread until stopped.

        Returns a Future that is done when the sweeper stops. With no interval, nothing runs (done at once).
        """
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        future: concurrent.futures.Future = concurrent.futures.Future()
        if not minutes or self._sweeper is not None:
            future.set_result(None)
            return future
        self._sweep_stop.clear()

        def loop() -> None:
            try:
                while not self._sweep_stop.wait(minutes * 60):
                    self.sweep_ttl()
                future.set_result(None)
            except BaseException as err:  # noqa: BLE001 - handed to the future's owner
                future.set_exception(err)

        self._sweeper = threading.Thread(target=loop, name="membank-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; return whether it stopped within ``timeout`` seconds (True when none ran)."""
        if self._sweeper is None:
            return True
        self._sweep_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped


class AsyncMembankStore(_StoreCore, BaseStore):
    """LangGraph's ``BaseStore`` on an ``AsyncMemoryBank``: ``abatch`` and the ``a``-prefixed methods on its pool.

    The same mapping and behaviour as ``MembankStore`` (one body of code, run
    through ``AsyncMemoryBank.run_sync``). The sync methods work from another
    thread than the event loop's, as ``AsyncPostgresStore``'s do.
    """

    def __init__(self, bank: AsyncMemoryBank, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 base_scope: Mapping[str, str] | None = None, embed_in_process: bool = False) -> None:
        """A store on ``bank``; the arguments are ``MembankStore``'s."""
        self.bank = bank
        self._setup(base_scope, index, ttl, embed_in_process)
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, url: str | None = None, **kwargs: Any) -> AsyncIterator[AsyncMembankStore]:
        """``async with AsyncMembankStore.from_conn_string(url) as store:`` on its own AsyncMemoryBank."""
        async with AsyncMemoryBank(url) as bank:
            yield cls(bank, **kwargs)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order on the bank's async pool; one result per op (errors as ``MembankStore.batch``)."""
        self.loop = self.loop or asyncio.get_running_loop()
        ops = list(ops)
        if self._embeds_puts(ops):
            # A login that may not embed is refused before its puts are written (a sync connection: a thread).
            await asyncio.to_thread(lambda: self.bank.worker.configure())
        results: list[Result] = []
        for segment in self._segments(ops):
            if self._embed_first(segment):
                await self.bank.process_pending(generation=False)
                self._unembedded = False
            done, wrote = await self.bank.run_sync(self._run, segment)
            results += done
            self._unembedded = self._unembedded or wrote
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """``abatch`` from a thread other than the event loop's (raises InvalidStateError on the loop's own)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self.loop is None or running is self.loop:
            raise asyncio.InvalidStateError(
                "AsyncMembankStore's sync methods run from another thread than its event loop's: "
                "use await store.abatch / aget / aput / asearch here")
        return asyncio.run_coroutine_threadsafe(self.abatch(list(ops)), self.loop).result()

    async def setup(self) -> None:
        """``MembankStore.setup`` for the async bank (awaited)."""
        try:
            await self.bank.list_scopes(self.base_scope, max_scopes=1)
        except errors.MembankError as err:
            raise _setup_error(err) from None

    async def asweep_ttl(self) -> int:
        """Remove expired memories (bank-wide; needs ``membank_admin``); return how many."""
        return await self.bank.purge_expired_memories()
