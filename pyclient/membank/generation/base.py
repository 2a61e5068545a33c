"""The generation provider interface.

A provider answers one request that SQL assembled: ``prompt`` (text for a
model), ``response_schema`` (the JSON schema of the reply) and ``input``
(the same request as structured data, for offline providers). It returns
the raw reply text; the database parses, validates and applies it.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from membank.errors import MembankError

ENV_PROVIDER = "MEMBANK_PROVIDER"
"""Environment variable naming the provider ``get_provider(None)`` builds (default ``rules``)."""


class GenerationError(MembankError):
    """A generation provider cannot be configured, or its call failed.

    ``retryable`` is False for a request that will never succeed (HTTP 400,
    401, 403, 404, 422, or any status whose body says the request itself is
    invalid, e.g. llama-cpp-python's HTTP 500 "Input should be 'text' or
    'json_object'"): the worker then fails the operation at once instead of
    retrying with backoff (408, 429, other 5xx, timeouts and connection
    errors). ``hint`` says what to change.
    """

    retryable: bool = True
    status: int | None = None
    """The HTTP status the provider answered (None: no answer, or not an HTTP failure)."""


class CallAbandoned(TimeoutError):
    """A provider call outlived its caller's deadline (``wait(timeout)``): its result will be ignored.

    The worker rolls its job's transaction back: the job stays due, not
    counted as an attempt, for the next worker (or the next ``wait``).
    """


NON_RETRYABLE_STATUS = frozenset({400, 401, 403, 404, 422})
"""HTTP statuses of a request that will never succeed: the operation fails at once."""

# What a server writes when it refuses the request itself, whatever status it
# chose (llama-cpp-python answers pydantic's validation errors with HTTP 500).
_INVALID_REQUEST = re.compile(
    r"validation error|input should be|invalid[_ ]request|unsupported|not supported|unrecognized|"
    r"unknown (field|parameter|argument)|extra inputs are not permitted|response_format|json_schema", re.I)

AUTH_STATUS = frozenset({401, 403})


def refuses_request(status: int | None, message: str) -> bool:
    """Whether an answer with HTTP ``status`` and error ``message`` refuses the request for good (never retried)."""
    if status is None:
        return False
    if status in NON_RETRYABLE_STATUS:
        return True
    return status >= 500 and bool(_INVALID_REQUEST.search(message or ""))


def describe_failure(err: BaseException) -> tuple[int | None, str]:
    """The HTTP status (None: no answer) and a one-line cause of a failed SDK call (openai, google-genai, httpx)."""
    status = getattr(err, "status_code", None) or getattr(err, "code", None)
    status = status if isinstance(status, int) else None
    kind = type(err).__name__
    if "timeout" in kind.lower() or isinstance(err, TimeoutError):
        return None, "no answer within the timeout (timed out)"
    cause = getattr(err, "__cause__", None) or getattr(err, "__context__", None)
    if status is None and "connect" in kind.lower():
        inner = " ".join(str(cause or "").split()) or " ".join(str(err).split()) or kind
        if "timeout" in type(cause).__name__.lower():
            return None, "no answer within the timeout (timed out)"
        return None, f"cannot connect ({inner})"
    body = getattr(err, "body", None)
    detail = body.get("error", body) if isinstance(body, dict) else None
    detail = detail.get("message") if isinstance(detail, dict) else detail
    text = " ".join(str(detail if isinstance(detail, str) and detail else
                        getattr(err, "message", None) or err).split()) or kind
    return status, (f"HTTP {status}: {text}" if status is not None and not text.startswith(str(status))
                    else text)


def call_failed(model_id: str, endpoint: str, err: BaseException, *, hint: str | None = None) -> GenerationError:
    """The GenerationError for a failed provider call to ``endpoint``: one line naming the model, endpoint and cause.

    ``retryable`` is False when the answer refuses the request for good
    (``refuses_request``).
    """
    status, cause = describe_failure(err)
    error = GenerationError(f"{model_id} at {endpoint}: {cause[:500]}", hint=hint)
    error.retryable = not refuses_request(status, cause)
    error.status = status
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
