"""The generation provider interface.

A provider answers one request that SQL assembled: ``prompt`` (text for a
model), ``response_schema`` (the JSON schema of the reply) and ``input``
(the same request as structured data, for offline providers). It returns
the raw reply text; the database parses, validates and applies it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from membank.errors import MembankError

ENV_PROVIDER = "MEMBANK_PROVIDER"
"""Environment variable naming the provider ``get_provider(None)`` builds (default ``rules``)."""


class GenerationError(MembankError):
    """A generation provider cannot be configured, or its call failed."""


@runtime_checkable
class Provider(Protocol):
    """Anything that turns a prompt into a reply."""

    name: str
    model_id: str

    def complete(self, prompt: str, response_schema: dict[str, Any] | None = None, *,
                 input: dict[str, Any] | None = None) -> str:
        """Return the model's reply text for ``prompt``, as JSON when ``response_schema`` is given.

        Raises GenerationError when the call fails (retried by the worker).
        """
        ...
