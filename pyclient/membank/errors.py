"""Exceptions raised by the client, mapped from the SQLSTATEs of the SQL API.

| SQLSTATE            | exception            |
|---------------------|----------------------|
| class 22 (22023, 22P02, 22P05, ...) | InvalidArgumentError |
| P0002 no_data_found | NotFoundError        |
| MB001, MB002, MB003, MB010, MB020, MB021 | ConflictError |
| MB040 scope lock wait over membank.lock_timeout | LockTimeoutError (retryable) |
| 40P01 deadlock_detected, 40001 serialization_failure | DeadlockError (retryable; the client retried it first) |
| 23505 (profile schema exists), 2BP01 (schema still has field memories) | ConflictError |
| 42501 (role may not call this, or is bound to other scopes) | PermissionDeniedError |
| 3F000/42883 on membank objects | NotInstalledError |
| class 08 (08006 a Citus node is unavailable, ...), 57P01-57P03 | DatabaseUnavailableError (``node``: "host:port") |
| anything else       | MembankError         |

Raised before any SQL runs: SetupError (an optional extra is missing) and
its subclass DatabaseUnavailableError (the database URL cannot be parsed or
reached); both carry a hint and no SQLSTATE. DatabaseUnavailableError is
also raised by a call that loses its database: a Citus node that cannot be
reached (the SQLSTATEs above), or no answer within the call's deadline
(deadline.py: ``statement_timeout`` + 5 s), naming the node in ``node``.

Each carries ``sqlstate``, the server's ``message`` (which names the
argument), ``hint`` and ``argument``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # psycopg is imported by whoever raises; the CLI starts faster without it
    import psycopg


class MembankError(Exception):
    """Base class of membank errors; ``str(err)`` is the server's message."""

    def __init__(self, message: str, *, sqlstate: str | None = None, hint: str | None = None,
                 argument: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.hint = hint
        self.argument = argument

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class InvalidArgumentError(MembankError, ValueError):
    """An argument was rejected (SQLSTATE class 22); nothing was written."""


class NotFoundError(MembankError, LookupError):
    """The memory or revision does not exist in the caller's scope (P0002)."""


class ConflictError(MembankError):
    """A rule of the bank forbids the change (MB001 scope change, MB002 revision edit, MB003 revision mismatch,
    MB021 request_id reuse, ...)."""


class LockTimeoutError(MembankError, TimeoutError):
    """Another write held the scope's write lock longer than ``membank.lock_timeout`` (MB040).

    Nothing was written; the call is safe to retry once the holder commits.
    """

    retryable = True


class DeadlockError(MembankError):
    """The server aborted the call's transaction to break a deadlock (40P01) or a serialization conflict (40001).

    Nothing of the call was written. ``MemoryBank`` retries such a call a few
    times itself (every call is one transaction); this is raised only when
    every attempt was aborted, and the call is safe to retry.
    """

    retryable = True


class PermissionDeniedError(MembankError, PermissionError):
    """The role may not call this function, or is bound to other scopes (SQLSTATE 42501)."""


# The server aborted the whole transaction, so the same call can run again (the client does, a few times).
RETRIED_SQLSTATES = ("40P01", "40001")
# A server going away: shut down by its administrator, crashed, starting up or shutting down (besides class 08).
UNAVAILABLE_SQLSTATES = ("57P01", "57P02", "57P03")
# Where Citus names the node it could not reach: "remote node user@host:port", "to the node host:port",
# "for node host:port" (errmsg), "while executing command on host:port" (errcontext).
_NODE = re.compile(r"(?:\bnode|command on) (?:[^@\s]+@)?([^\s@]+):(\d+)\b")


def _class_for(sqlstate: str | None) -> type[MembankError]:
    if not sqlstate:
        return MembankError
    if sqlstate.startswith("22"):
        return InvalidArgumentError
    if sqlstate == "P0002":
        return NotFoundError
    if sqlstate == "MB040":
        return LockTimeoutError
    if sqlstate in RETRIED_SQLSTATES:
        return DeadlockError
    if sqlstate.startswith("MB") or sqlstate in ("23505", "2BP01"):
        return ConflictError
    if sqlstate == "42501":
        return PermissionDeniedError
    if sqlstate.startswith("08") or sqlstate in UNAVAILABLE_SQLSTATES:
        return DatabaseUnavailableError
    return MembankError


class SetupError(MembankError):
    """membank cannot start here: an optional extra is missing, or the database cannot be reached.

    Nothing was done. The CLI prints it as one line with its hint and exits 2.
    """


class DatabaseUnavailableError(SetupError, ConnectionError):
    """The database URL cannot be parsed, or no connection to it opened within a few seconds; or a call lost it.

    The message names host and database (never the password); the hint says what to check.
    Raised by a call: a node of a Citus cluster cannot be reached (SQLSTATE class 08, e.g. 08006
    "connection to the remote node ... failed", or 57P01-57P03: shut down, starting up), or the
    call had no answer within its deadline (``statement_timeout`` + 5 s, a hung node). ``node`` is
    the unavailable node as "host:port" when known. A call cut at its deadline may have committed
    (Citus commits on the workers after the statement): read before you write again.
    """

    def __init__(self, message: str, *, node: str | None = None, **kwargs: str | None) -> None:
        super().__init__(message, **kwargs)
        self.node = node


class NotInstalledError(MembankError):
    """The database has no membank schema (or an older one): run ``membank db upgrade``."""


def from_psycopg(err: psycopg.Error) -> MembankError:
    """Translate a psycopg error raised by the SQL API into a membank exception."""
    diag = err.diag
    if err.sqlstate in ("3F000", "42883") and "membank" in (diag.message_primary or ""):
        return NotInstalledError(
            f"membank is not installed in this database, or is older than this client ({diag.message_primary})",
            sqlstate=err.sqlstate,
            hint="run `membank db upgrade` (or `alembic upgrade head`) against it; `membank db current` shows where "
                 "it stands")
    detail = diag.message_detail or ""
    argument = detail.removeprefix("argument: ") if detail.startswith("argument: ") else None
    message = diag.message_primary or str(err)
    kind = _class_for(err.sqlstate)
    if kind is DatabaseUnavailableError:
        found = _NODE.search(message) or _NODE.search(diag.context or "")
        node = f"{found.group(1)}:{found.group(2)}" if found else None
        if node and node not in message:
            message = f"{message} (node {node})"
        return DatabaseUnavailableError(
            " ".join(message.split()), sqlstate=err.sqlstate, node=node,
            hint=diag.message_hint or (f"the database node {node} is down or unreachable: start it (or fail over), "
                                       "then retry" if node else "the database is down or restarting: retry"))
    hint = diag.message_hint
    if hint is None and err.sqlstate == "42501" and message.startswith(("permission denied for function",
                                                                         "permission denied for procedure",
                                                                         "permission denied for schema membank")):
        # PostgreSQL's own refusal: the login holds none of the roles that may call it
        hint = ("grant the login the membank role this call needs: membank_reader reads, membank_writer writes, "
                "membank_worker runs jobs, membank_admin maintains (the grant table: docs/operations.md#roles)")
    return kind(message, sqlstate=err.sqlstate, hint=hint, argument=argument)


def invalid(argument: str, message: str, hint: str) -> InvalidArgumentError:
    """Build the error the client raises itself, worded like the server's (22023)."""
    return InvalidArgumentError(f"{argument}: {message}", sqlstate="22023", hint=hint, argument=argument)
