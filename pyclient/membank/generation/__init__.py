"""Generation providers: the models that carry extraction and consolidation.

``get_provider()`` builds the provider named by ``MEMBANK_PROVIDER``:

======================  ==================================================================
spec                    provider
======================  ==================================================================
``rules`` (default)     offline, deterministic rules (no model; a weaker baseline)
``gemini``              google-genai, ``gemini-2.5-flash``, JSON response schema
``gemini:<model>``      google-genai, another model
``openai:<model>``      an OpenAI-compatible endpoint (``MEMBANK_OPENAI_BASE_URL``), e.g. a local server
======================  ==================================================================
"""

from __future__ import annotations

import os
from typing import Any

from membank.errors import InvalidArgumentError
from membank.generation.base import ENV_PROVIDER, CallAbandoned, GenerationError, Provider

VALID_SPECS = ("rules", "gemini", "gemini:<model>", "openai:<model>")

__all__ = ["ENV_PROVIDER", "CallAbandoned", "GenerationError", "Provider", "VALID_SPECS", "get_provider"]


def get_provider(spec: str | None = None, *, timeout: Any = None, retries: int | None = None,
                 response_format: str | None = None) -> Provider:
    """Build the provider that ``spec`` names (None: ``MEMBANK_PROVIDER``, else ``rules``).

    ``timeout`` (seconds or ``"45s"``), ``retries`` (the SDK's own) and
    ``response_format`` (``openai`` only) default to ``MEMBANK_MODEL_TIMEOUT``,
    ``MEMBANK_MODEL_RETRIES`` and ``MEMBANK_RESPONSE_FORMAT``
    (``membank.settings``); the offline ``rules`` provider makes no request.

    Raises:
        InvalidArgumentError: an unknown or incomplete spec; the hint lists the valid ones.
        GenerationError: the provider cannot be configured (e.g. no credentials).
    """
    raw = spec if spec is not None else os.environ.get(ENV_PROVIDER, "").strip() or "rules"
    provider, sep, model = raw.strip().partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if provider == "rules" and not sep:
        from membank.generation.rules import RulesProvider

        return RulesProvider()
    if provider == "gemini" and (model or not sep):
        from membank.generation.gemini import DEFAULT_MODEL, GeminiProvider

        return GeminiProvider(model or DEFAULT_MODEL, timeout=timeout, max_retries=retries)
    if provider == "openai" and model:
        from membank.generation.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(model, timeout=timeout, max_retries=retries, response_format=response_format)
    raise InvalidArgumentError(f"{ENV_PROVIDER}: unknown or incomplete provider {raw!r}", argument=ENV_PROVIDER,
                               hint="valid specs: " + ", ".join(VALID_SPECS))
