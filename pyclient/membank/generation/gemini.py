"""``gemini``: generation through google-genai with a JSON response schema.

Credentials follow google-genai's environment (``GOOGLE_API_KEY`` /
``GEMINI_API_KEY``, or ``GOOGLE_GENAI_USE_VERTEXAI=true`` with a project and
location); ``base_url`` points the client elsewhere (a proxy, a test server).
Requests time out after ``MEMBANK_MODEL_TIMEOUT`` (30 s) and google-genai
repeats them ``MEMBANK_MODEL_RETRIES`` times (0): the job's attempts retry.
"""

from __future__ import annotations

from typing import Any

from membank import settings
from membank.generation.base import GenerationError, call_failed

DEFAULT_MODEL = "gemini-2.5-flash"
GEMINI_ENDPOINT = "https://generativelanguage.googleapis.com"


class GeminiProvider:
    """Calls ``client.models.generate_content`` with ``response_mime_type=application/json`` and the schema.

    Args:
        model: e.g. ``"gemini-2.5-flash"`` (default).
        client: a ready ``google.genai.Client`` (then ``api_key``, ``base_url``, ``timeout``, ``max_retries``
            are ignored).
        api_key: Developer API key; default from the environment.
        base_url: send requests to this base URL (``http_options.base_url``).
        timeout: seconds (or ``"45s"``, ``"2m"``) one request may take (default ``MEMBANK_MODEL_TIMEOUT``, else 30).
        max_retries: google-genai's own retries of a failed request (default ``MEMBANK_MODEL_RETRIES``, else 0).

    Raises:
        GenerationError: google-genai refuses the configuration (e.g. no API key), before any request.
        InvalidArgumentError: a setting out of range, naming it.
    """

    name = "gemini"

    def __init__(self, model: str = DEFAULT_MODEL, *, client: Any = None, api_key: str | None = None,
                 base_url: str | None = None, timeout: Any = None, max_retries: int | None = None) -> None:
        from google import genai
        from google.genai import types

        self._types = types
        self.model = model
        self.model_id = f"gemini/{model.removeprefix('models/')}"
        self.timeout = settings.model_timeout(timeout)
        self.max_retries = settings.model_retries(max_retries)
        self.endpoint = (base_url or GEMINI_ENDPOINT).rstrip("/")
        if client is None:
            options = types.HttpOptions(
                timeout=int(self.timeout * 1000), base_url=base_url,
                retry_options=types.HttpRetryOptions(attempts=self.max_retries + 1))
            try:
                client = genai.Client(api_key=api_key, http_options=options)
            except ValueError as err:
                raise GenerationError(f"{self.model_id} at {self.endpoint}: no credentials ({err})",
                                      hint="set GOOGLE_API_KEY (or GEMINI_API_KEY), or GOOGLE_GENAI_USE_VERTEXAI"
                                           "=true with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION") from err
            if getattr(client, "vertexai", False) and not base_url:
                self.endpoint = "Vertex AI"
        self._client = client

    def _hint(self, error: GenerationError) -> str:
        if error.status in (401, 403):
            return "check GOOGLE_API_KEY / GEMINI_API_KEY (or the Vertex AI project's credentials)"
        if error.status == 404:
            return f"no model {self.model!r} there: check the model name (e.g. {DEFAULT_MODEL})"
        if not error.retryable:
            return "the API refused the request itself"
        if "timed out" in error.message:
            return (f"no answer in time: a slow model needs a longer {settings.ENV_MODEL_TIMEOUT} "
                    f"(now {self.timeout:g} s)")
        return f"is {self.endpoint} reachable? A slow model needs a longer {settings.ENV_MODEL_TIMEOUT} " \
               f"(now {self.timeout:g} s)"

    def complete(self, prompt: str, response_schema: dict[str, Any] | None = None, *,
                 input: dict[str, Any] | None = None) -> str:
        """Return the model's reply text (JSON when ``response_schema`` is given); ``input`` is unused.

        Raises GenerationError naming the model, endpoint and cause when the
        request fails (``retryable`` False for HTTP 400, 401, 403, 404, 422 or
        a 5xx that says the request is invalid) or the reply holds no text.
        """
        config = self._types.GenerateContentConfig(
            temperature=0.0,
            response_mime_type="application/json" if response_schema else None,
            response_json_schema=response_schema)
        try:
            response = self._client.models.generate_content(model=self.model, contents=prompt, config=config)
        except Exception as err:  # google-genai raises its own APIError tree and httpx errors
            failure = call_failed(self.model_id, self.endpoint, err)
            failure.hint = self._hint(failure)
            raise failure from err
        if not response.text:
            finish = getattr(response.candidates[0], "finish_reason", None) if response.candidates else None
            error = GenerationError(f"{self.model_id} at {self.endpoint}: the reply holds no text "
                                    f"(finish reason {finish})")
            error.retryable = False
            raise error
        return response.text

    def check(self) -> None:
        """Ask the API for the model (``models.get``: no tokens) to know it answers and takes the credentials.

        Raises GenerationError naming the model, endpoint and cause, with a
        hint, when nothing answers in time, the credentials are refused (HTTP
        401, 403) or there is no such model (404); any other answer passes.
        """
        try:
            self._client.models.get(model=self.model)
        except Exception as err:
            failure = call_failed(self.model_id, self.endpoint, err)
            if failure.status is not None and failure.status not in (401, 403, 404):
                return
            failure.hint = self._hint(failure)
            raise failure from err
