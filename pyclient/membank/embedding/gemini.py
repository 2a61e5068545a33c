"""Gemini / Vertex AI embeddings through ``google-genai``.

Credentials follow google-genai's usual environment: ``GOOGLE_API_KEY`` or
``GEMINI_API_KEY`` for the Gemini Developer API; ``GOOGLE_GENAI_USE_VERTEXAI=true``
(or ``GOOGLE_GENAI_USE_ENTERPRISE=true``) with ``GOOGLE_CLOUD_PROJECT``,
``GOOGLE_CLOUD_LOCATION`` and Application Default Credentials for Vertex AI.
``GOOGLE_GEMINI_BASE_URL`` and ``GOOGLE_GENAI_API_VERSION`` are honoured by the
library as usual.

Passages are sent with task type ``RETRIEVAL_DOCUMENT`` and queries with
``RETRIEVAL_QUERY``. ``text-embedding-005`` is a Vertex AI model; on the
Developer API use e.g. ``gemini:gemini-embedding-001``.
"""

from __future__ import annotations

from typing import Any

from membank.embedding.base import (
    EmbeddingError,
    batches,
    check_texts,
    normalise_vectors,
)

DEFAULT_MODEL = "text-embedding-005"
KNOWN_DIMENSIONS = {
    "text-embedding-005": 768,
    "text-embedding-004": 768,
    "text-multilingual-embedding-002": 768,
    "gemini-embedding-001": 3072,
}
"""Default output dimension of models whose dimension needs no probe request."""

MAX_BATCH = 100
"""batchEmbedContents accepts at most 100 requests per call."""
MAX_BATCH_CHARS = 60_000
"""Characters per request: Vertex's predict for text-embedding-005 caps a
request at 20,000 tokens; 60,000 characters stays under it for English."""
TIMEOUT_MS = 60_000


def _short_model(model: str) -> str:
    return model.removeprefix("models/")


class GeminiEmbedder:
    """Embedder that calls ``client.models.embed_content`` of google-genai.

    Args:
        model: embedding model name, e.g. ``"text-embedding-005"`` (default)
            or ``"gemini-embedding-001"``; a ``"models/"`` prefix is dropped
            from ``model_id``.
        client: a ready ``google.genai.Client``; when given, ``api_key``,
            ``vertexai`` and ``base_url`` are ignored.
        api_key: Developer API key; default from ``GOOGLE_API_KEY`` /
            ``GEMINI_API_KEY`` (read by google-genai).
        vertexai: force Vertex AI (``True``) or the Developer API (``False``);
            default from google-genai's environment variables.
        base_url: send requests to this base URL instead of Google's
            (``http_options.base_url``), e.g. a proxy or a test server.
        dimension: ask for this output dimensionality (``output_dimensionality``)
            instead of the model's default. When neither this nor
            ``KNOWN_DIMENSIONS`` gives the dimension, the first access to
            ``dimension`` makes one probe request.
        batch_size: texts per request, 1..100.

    Raises:
        EmbeddingError: google-genai is missing or refuses the configuration
            (e.g. no API key).
        ValueError: ``batch_size`` outside 1..100 or ``dimension`` below 1.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, client: Any = None, api_key: str | None = None,
                 vertexai: bool | None = None, base_url: str | None = None,
                 dimension: int | None = None, batch_size: int = MAX_BATCH) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size: must be in 1..{MAX_BATCH}, got {batch_size}")
        if dimension is not None and dimension < 1:
            raise ValueError(f"dimension: must be >= 1, got {dimension}")
        try:
            from google import genai
            from google.genai import types
        except ImportError as err:
            raise EmbeddingError("the gemini embedder needs the google-genai package",
                                 hint="pip install google-genai") from err
        self._types = types
        self.model = model
        self.model_id = f"gemini/{_short_model(model)}"
        self.batch_size = batch_size
        self._output_dimensionality = dimension
        self._dimension = dimension or KNOWN_DIMENSIONS.get(_short_model(model))
        if client is None:
            http_options = types.HttpOptions(timeout=TIMEOUT_MS)
            if base_url:
                http_options.base_url = base_url
            try:
                client = genai.Client(api_key=api_key, vertexai=vertexai, http_options=http_options)
            except ValueError as err:
                raise EmbeddingError(
                    f"cannot create the google-genai client for {self.model_id}: {err}",
                    hint="set GOOGLE_API_KEY (or GEMINI_API_KEY), or GOOGLE_GENAI_USE_VERTEXAI=true "
                         "with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION",
                    model_id=self.model_id) from err
        self._client = client

    def __repr__(self) -> str:
        return f"GeminiEmbedder(model={self.model!r})"

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
            (vector,) = self._request(["dimension probe"], "RETRIEVAL_DOCUMENT")
            self._dimension = len(vector)
        return self._dimension

    def _request(self, texts: list[str], task_type: str) -> list[list[float]]:
        types = self._types
        # One Content per text: a list of plain strings is merged into a single
        # Content (one embedding) for multimodal Gemini embedding models.
        contents = [types.Content(parts=[types.Part(text=t)]) for t in texts]
        config = types.EmbedContentConfig(task_type=task_type,
                                          output_dimensionality=self._output_dimensionality)
        try:
            response = self._client.models.embed_content(model=self.model, contents=contents,
                                                         config=config)
        except Exception as err:  # google.genai.errors.APIError, httpx transport errors
            raise EmbeddingError(f"{self.model_id}: embed_content failed: {err}",
                                 model_id=self.model_id) from err
        embeddings = response.embeddings or []
        return [list(e.values or []) for e in embeddings]

    def _embed(self, texts: list[str], task_type: str) -> list[list[float]]:
        out: list[list[float]] = []
        for batch in batches(texts, max_items=self.batch_size, max_chars=MAX_BATCH_CHARS):
            raw = self._request(batch, task_type)
            out.extend(normalise_vectors(
                raw, expected_count=len(batch), dimension=self.dimension, model_id=self.model_id,
                hint=f"pass the model's real output dimensionality, or check that {self.model!r} "
                     "is the model the endpoint serves"))
        return out

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Embed stored facts with task type ``RETRIEVAL_DOCUMENT``.

        Args:
            texts: N non-empty strings; sent ``batch_size`` (and at most
                60,000 characters) per request.

        Returns:
            N vectors of ``dimension`` floats with unit L2 norm, in input
            order; ``[]`` for ``[]`` (no request).

        Raises:
            TypeError: an item is not a ``str``.
            ValueError: an item is the empty string (blankness is the database's rule).
            EmbeddingError: the request failed or returned the wrong number
                of vectors; ``EmbeddingDimensionError`` for a vector whose
                length is not ``dimension``.
        """
        return self._embed(check_texts(texts), "RETRIEVAL_DOCUMENT")

    def embed_query(self, text: str) -> list[float]:
        """Embed a search query with task type ``RETRIEVAL_QUERY``.

        Args:
            text: a non-empty string.

        Returns:
            One vector of ``dimension`` floats with unit L2 norm.

        Raises:
            Same as ``embed_passages``.
        """
        return self._embed(check_texts([text], what="text"), "RETRIEVAL_QUERY")[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several search queries (e.g. a decomposed question's) with ``RETRIEVAL_QUERY``, batched.

        Args:
            texts: N non-empty strings; one request per ``batch_size``.

        Returns:
            N vectors, in input order; ``[]`` for ``[]`` (no request).

        Raises:
            Same as ``embed_passages``.
        """
        return self._embed(check_texts(texts), "RETRIEVAL_QUERY")
