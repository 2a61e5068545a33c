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
    """A generation provider cannot be configured, or its call failed.

    ``retryable`` is False for a request that will never succeed (HTTP 400,
    401, 403, 404, 422): the worker then fails the operation at once instead
    of retrying with backoff (408, 429, 5xx and connection errors).
    """

    retryable: bool = True


NON_RETRYABLE_STATUS = frozenset({400, 401, 403, 404, 422})
"""HTTP statuses of a request that will never succeed: the operation fails at once."""


def call_failed(model_id: str, err: Exception, status: int | None) -> GenerationError:
    """The GenerationError for a failed provider call that answered HTTP ``status`` (None: no answer)."""
    error = GenerationError(f"{model_id}: {err}")
    error.retryable = status not in NON_RETRYABLE_STATUS
    return error


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
