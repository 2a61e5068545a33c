"""``openai``: generation through any OpenAI-compatible chat completions endpoint.

``MEMBANK_OPENAI_BASE_URL`` (or ``OPENAI_BASE_URL``) points at the server,
e.g. a local one; ``OPENAI_API_KEY`` is sent when set. The reply is asked
for with ``response_format`` ``json_schema``.
"""

from __future__ import annotations

import os
from typing import Any

from membank.generation.base import GenerationError, call_failed

TIMEOUT_S = 120.0


class OpenAICompatProvider:
    """Calls ``client.chat.completions.create`` at temperature 0 with a JSON schema response format.

    Args:
        model: the model name the endpoint serves.
        base_url: endpoint base URL (``.../v1``); default ``MEMBANK_OPENAI_BASE_URL``, then the library's own.
        api_key: default ``OPENAI_API_KEY``, or a placeholder for local servers that need none.
        max_retries: the library's own retries of a failed request (the worker retries the job later anyway).
    """

    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 max_retries: int = 2) -> None:
        import openai

        self.model = model
        self.model_id = f"openai/{model}"
        self._client = openai.OpenAI(
            base_url=base_url or os.environ.get("MEMBANK_OPENAI_BASE_URL") or None,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "unused", timeout=TIMEOUT_S, max_retries=max_retries)

    def complete(self, prompt: str, response_schema: dict[str, Any] | None = None, *,
                 input: dict[str, Any] | None = None) -> str:
        """Return the reply text of one chat completion; ``input`` is unused.

        Raises GenerationError when the request fails (``retryable`` False for
        HTTP 400, 401, 403, 404, 422) or the reply is empty.
        """
        extra: dict[str, Any] = {}
        if response_schema:
            extra["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "membank_reply", "schema": response_schema}}
        try:
            response = self._client.chat.completions.create(
                model=self.model, temperature=0, messages=[{"role": "user", "content": prompt}], **extra)
        except Exception as err:  # openai.APIError and its subclasses, httpx errors
            raise call_failed(self.model_id, err, getattr(err, "status_code", None)) from err
        text = response.choices[0].message.content if response.choices else None
        if not text:
            raise GenerationError(f"{self.model_id}: the reply is empty")
        return text
