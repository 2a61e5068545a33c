"""``gemini``: generation through google-genai with a JSON response schema.

Credentials follow google-genai's environment (``GOOGLE_API_KEY`` /
``GEMINI_API_KEY``, or ``GOOGLE_GENAI_USE_VERTEXAI=true`` with a project and
location); ``base_url`` points the client elsewhere (a proxy, a test server).
"""

from __future__ import annotations

from typing import Any

from membank.generation.base import GenerationError, call_failed

DEFAULT_MODEL = "gemini-2.5-flash"
TIMEOUT_MS = 120_000


class GeminiProvider:
    """Calls ``client.models.generate_content`` with ``response_mime_type=application/json`` and the schema.

    Args:
        model: e.g. ``"gemini-2.5-flash"`` (default).
        client: a ready ``google.genai.Client`` (then ``api_key``, ``base_url`` are ignored).
        api_key: Developer API key; default from the environment.
        base_url: send requests to this base URL (``http_options.base_url``).

    Raises:
        GenerationError: google-genai refuses the configuration (e.g. no API key).
    """

    name = "gemini"

    def __init__(self, model: str = DEFAULT_MODEL, *, client: Any = None, api_key: str | None = None,
                 base_url: str | None = None) -> None:
        from google import genai
        from google.genai import types

        self._types = types
        self.model = model
        self.model_id = f"gemini/{model.removeprefix('models/')}"
        if client is None:
            options = types.HttpOptions(timeout=TIMEOUT_MS, base_url=base_url) if base_url \
                else types.HttpOptions(timeout=TIMEOUT_MS)
            try:
                client = genai.Client(api_key=api_key, http_options=options)
            except ValueError as err:
                raise GenerationError(f"cannot create the google-genai client for {self.model_id}: {err}",
                                      hint="set GOOGLE_API_KEY (or GEMINI_API_KEY), or GOOGLE_GENAI_USE_VERTEXAI"
                                           "=true with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION") from err
        self._client = client

    def complete(self, prompt: str, response_schema: dict[str, Any] | None = None, *,
                 input: dict[str, Any] | None = None) -> str:
        """Return the model's reply text (JSON when ``response_schema`` is given); ``input`` is unused.

        Raises GenerationError when the request fails (``retryable`` False for
        HTTP 400, 401, 403, 404, 422) or the reply holds no text.
        """
        config = self._types.GenerateContentConfig(
            temperature=0.0,
            response_mime_type="application/json" if response_schema else None,
            response_json_schema=response_schema)
        try:
            response = self._client.models.generate_content(model=self.model, contents=prompt, config=config)
        except Exception as err:  # google-genai raises its own APIError tree and httpx errors
            raise call_failed(self.model_id, err, getattr(err, "code", None)) from err
        if not response.text:
            raise GenerationError(f"{self.model_id}: the reply holds no text (finish reason "
                                  f"{getattr(response.candidates[0], 'finish_reason', None) if response.candidates else None})")
        return response.text
