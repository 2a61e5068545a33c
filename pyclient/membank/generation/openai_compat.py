"""``openai``: generation through any OpenAI-compatible chat completions endpoint.

``MEMBANK_OPENAI_BASE_URL`` (or the SDK's own ``OPENAI_BASE_URL``) points at
the server, e.g. a local one (llama.cpp's llama-server, llama-cpp-python,
Ollama, vLLM); ``OPENAI_API_KEY`` is sent when set, and is required for
OpenAI's own endpoint (refused before any request without it).

How the reply is asked for as JSON is ``MEMBANK_RESPONSE_FORMAT``
(``settings.response_format``): ``json_schema`` (the server enforces the
schema), ``json_object`` (JSON; the schema is written into the prompt and
sent as ``response_format.schema``, which llama.cpp's servers enforce)
or ``none`` (no response_format; the schema in the prompt). A server that
refuses ``json_schema`` (llama-cpp-python answers HTTP 500 "Input should be
'text' or 'json_object'") is asked again once with ``json_object``, and this
process remembers it for that endpoint and model: one refused request, then
none. Requests time out after ``MEMBANK_MODEL_TIMEOUT`` (30 s) and the SDK
repeats them ``MEMBANK_MODEL_RETRIES`` times (0): the job's attempts retry.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Any

from membank import settings
from membank.generation.base import AUTH_STATUS, GenerationError, call_failed

ENV_BASE_URL = "MEMBANK_OPENAI_BASE_URL"
OPENAI_ENDPOINT = "https://api.openai.com/v1"

log = logging.getLogger("membank.generation")

_fallbacks: dict[tuple[str, str], str] = {}
"""(endpoint, model) -> the response format used since the server refused ``json_schema`` (this process)."""
_fallbacks_lock = threading.Lock()

_REFUSES_FORMAT = re.compile(r"response_format|json_schema|json_object", re.I)

SCHEMA_IN_PROMPT = ("\n\nReply with one JSON value only, no prose and no code fence, that is valid against "
                    "this JSON schema:\n{schema}")


def _endpoint(base_url: str | None) -> tuple[str, str]:
    """The endpoint requests go to and where it was set (an argument, an environment variable, or the default)."""
    if base_url:
        return base_url.rstrip("/"), "the base_url argument"
    for variable in (ENV_BASE_URL, "OPENAI_BASE_URL"):
        if os.environ.get(variable, "").strip():
            return os.environ[variable].strip().rstrip("/"), variable
    return OPENAI_ENDPOINT, "the default"


class OpenAICompatProvider:
    """Calls ``client.chat.completions.create`` at temperature 0, asking for JSON as ``response_format`` says.

    Args:
        model: the model name the endpoint serves.
        base_url: endpoint base URL (``.../v1``); default ``MEMBANK_OPENAI_BASE_URL``, then ``OPENAI_BASE_URL``,
            then OpenAI's.
        api_key: default ``OPENAI_API_KEY``; required for OpenAI's endpoint, optional for others.
        max_retries: the SDK's own retries of a failed request (default ``MEMBANK_MODEL_RETRIES``, else 0).
        timeout: seconds (or ``"45s"``, ``"2m"``) one request may take (default ``MEMBANK_MODEL_TIMEOUT``, else 30).
        response_format: ``json_schema``, ``json_object`` or ``none`` (default ``MEMBANK_RESPONSE_FORMAT``).

    Raises:
        GenerationError: no API key for OpenAI's own endpoint (named before any request).
        InvalidArgumentError: a setting out of range, naming it.
    """

    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 max_retries: int | None = None, timeout: Any = None, response_format: str | None = None) -> None:
        import openai

        self.model = model
        self.model_id = f"openai/{model}"
        self.endpoint, self.endpoint_source = _endpoint(base_url)
        self.timeout = settings.model_timeout(timeout)
        self.max_retries = settings.model_retries(max_retries)
        self.response_format = settings.response_format(response_format)
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        self.has_key = key is not None
        if key is None and self.endpoint == OPENAI_ENDPOINT:
            raise GenerationError(
                f"{self.model_id} at {self.endpoint}: no API key (OPENAI_API_KEY is unset)",
                hint=f"set OPENAI_API_KEY, or point {ENV_BASE_URL} at a local server (e.g. http://127.0.0.1:8080/v1)")
        # Local servers need no key; the SDK insists on one, so a placeholder is sent.
        self._client = openai.OpenAI(base_url=self.endpoint, api_key=key or "no-key", timeout=self.timeout,
                                     max_retries=self.max_retries)

    def _hint(self, error: GenerationError) -> str:
        status = error.status
        where = f"the endpoint comes from {self.endpoint_source}"
        if status in (401, 403):
            return ("the endpoint refused the key: check OPENAI_API_KEY" if self.has_key else
                    "the endpoint wants a key and none was sent: set OPENAI_API_KEY") + f"; {where}"
        if status == 404:
            return f"no model {self.model!r} or no /chat/completions there: check the model name and that " \
                   f"the URL ends in /v1; {where}"
        if not error.retryable:
            return f"the server refused the request itself; try {settings.ENV_RESPONSE_FORMAT}=json_object or " \
                   f"none; {where}"
        if status is not None:
            return f"the server failed; the job tries again up to {settings.ENV_MODEL_ATTEMPTS} times; {where}"
        if "timed out" in error.message:
            return (f"the server took the request but did not answer in time: a slow model needs a longer "
                    f"{settings.ENV_MODEL_TIMEOUT} (now {self.timeout:g} s); {where} ({ENV_BASE_URL} wins over "
                    "OPENAI_BASE_URL)")
        return (f"is the server running? {where} ({ENV_BASE_URL} wins over OPENAI_BASE_URL); a slow model needs a "
                f"longer {settings.ENV_MODEL_TIMEOUT} (now {self.timeout:g} s)")

    def _format(self) -> str:
        with _fallbacks_lock:
            return _fallbacks.get((self.endpoint, self.model), self.response_format)

    def _create(self, prompt: str, response_schema: dict[str, Any] | None, response_format: str) -> Any:
        extra: dict[str, Any] = {}
        if response_schema and response_format == "json_schema":
            extra["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "membank_reply", "schema": response_schema}}
        elif response_schema:
            prompt += SCHEMA_IN_PROMPT.format(schema=json.dumps(response_schema, separators=(",", ":")))
            if response_format == "json_object":
                # llama.cpp's llama-server and llama-cpp-python constrain the reply to this schema; others ignore it.
                extra["response_format"] = {"type": "json_object", "schema": response_schema}
        return self._client.chat.completions.create(
            model=self.model, temperature=0, messages=[{"role": "user", "content": prompt}], **extra)

    def complete(self, prompt: str, response_schema: dict[str, Any] | None = None, *,
                 input: dict[str, Any] | None = None) -> str:
        """Return the reply text of one chat completion; ``input`` is unused.

        Raises GenerationError naming the model, endpoint and cause when the
        request fails (``retryable`` False for a refused request: HTTP 400,
        401, 403, 404, 422 or a 5xx that says the request is invalid), or the
        reply is empty or cut off at the token limit (not retryable: at
        temperature 0 the same request gets the same reply).
        """
        chosen = self._format()
        try:
            try:
                response = self._create(prompt, response_schema, chosen)
            except Exception as err:
                failure = call_failed(self.model_id, self.endpoint, err)
                if not (response_schema and chosen == "json_schema" and not failure.retryable
                        and failure.status not in (401, 403, 404) and _REFUSES_FORMAT.search(failure.message)):
                    raise
                with _fallbacks_lock:
                    _fallbacks[(self.endpoint, self.model)] = "json_object"
                log.warning("%s refused response_format json_schema (%s); asking with json_object and the schema "
                            "in the prompt from now on", self.model_id + " at " + self.endpoint, failure.message)
                response = self._create(prompt, response_schema, "json_object")
        except Exception as err:  # openai.APIError and its subclasses, httpx errors
            failure = call_failed(self.model_id, self.endpoint, err)
            failure.hint = self._hint(failure)
            raise failure from err
        choice = response.choices[0] if response.choices else None
        text = choice.message.content if choice is not None else None
        finish = getattr(choice, "finish_reason", None)
        if finish == "length":
            error = GenerationError(
                f"{self.model_id} at {self.endpoint}: the reply was cut off at the token limit (finish_reason "
                f"length) after {len(text or '')} characters",
                hint="raise the server's context and reply length (llama.cpp: -c and -n; Ollama: num_ctx), or "
                     "lower membank.max_prompt_tokens")
            error.retryable = False
            raise error
        if not text or not text.strip():
            error = GenerationError(f"{self.model_id} at {self.endpoint}: the reply is empty "
                                    f"(finish_reason {finish})",
                                    hint=f"try {settings.ENV_RESPONSE_FORMAT}=json_object or none, or a larger model")
            error.retryable = False
            raise error
        return text

    def check(self) -> None:
        """Ask the endpoint for its models (``GET /models``: no tokens) to know it answers and takes the key.

        Raises GenerationError naming the model, endpoint and cause, with a
        hint, when nothing answers in time or the key is refused (HTTP 401,
        403); any other answer passes (a server may lack ``/models``).
        """
        try:
            self._client.models.list()
        except Exception as err:
            failure = call_failed(self.model_id, self.endpoint, err)
            if failure.status is not None and failure.status not in AUTH_STATUS:
                return
            failure.hint = self._hint(failure)
            raise failure from err
