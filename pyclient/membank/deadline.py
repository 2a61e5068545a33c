"""The client's deadline for one call: ``statement_timeout`` plus a grace, even when the server cannot keep it.

``statement_timeout`` ends a call on the server, except where the server
itself waits on a node that does not answer. On Citus, a call whose shard
command is in flight on a hung worker (stopped, or its host frozen) is
cancelled at ``statement_timeout``, but the coordinator then sends the
worker a cancel request and waits for the worker to close that request's
connection, which a hung worker never does (libpq's ``PQcancel``; Citus's
``ShutdownConnection`` says its wait "is not interruptible"). Commit is
not covered by ``statement_timeout`` at all (two-phase commit on the
workers). So the client keeps its own deadline per call: past it, the
call's connection is shut down (``shutdown(2)`` on its socket, so the read
it is blocked in returns at once, from any thread), the pool drops that
connection, and the call raises DatabaseUnavailableError naming the node
that does not answer (``silent_nodes``). The coordinator's backend stays
in its wait until the node answers or its connection breaks.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_S = 5.0
"""Seconds a call may outlive ``statement_timeout`` before the client ends it (the server's own abort first)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)?\s*$")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1e-3}


def call_deadline(statement_timeout: str) -> float | None:
    """Seconds the client lets a call run: ``statement_timeout`` (a PostgreSQL duration) + GRACE_S; None for no limit.

    A bare number is milliseconds, as in PostgreSQL; "0" (no statement_timeout) and a value this
    cannot read (the server refuses it when the connection is configured) give no deadline.
    """
    found = _DURATION.match(statement_timeout)
    if found is None:
        return None
    seconds = float(found.group(1)) * _UNIT_S[found.group(2)]
    return seconds + GRACE_S if seconds > 0 else None


def shutdown_socket(fd: int) -> None:
    """Shut the socket ``fd`` down both ways: a read blocked on it returns (end of file), in any thread."""
    try:
        with socket.socket(fileno=os.dup(fd)) as s:  # a duplicate descriptor: the connection still owns fd
            s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the call is over anyway


class Call:
    """One watched call: its deadline and whether the watchdog ended it."""

    __slots__ = ("deadline", "fd", "expired")

    def __init__(self, deadline: float, fd: int) -> None:
        self.deadline, self.fd, self.expired = deadline, fd, False


class Watchdog:
    """Ends the calls of one client that outlive their deadline: one daemon thread, started on first use.

    ``with watchdog.watch(fd) as call: ...``; afterwards ``call.expired`` says whether the
    socket was shut down. Watching costs two lock round trips per call; the thread wakes
    only at the oldest call's deadline.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._cond = threading.Condition()
        self._calls: dict[int, Call] = {}
        self._thread: threading.Thread | None = None
        self._idle = True
        self._closed = False

    @contextmanager
    def watch(self, fd: int) -> Iterator[Call]:
        """Watch the call running on socket ``fd`` for the length of the ``with`` block."""
        if self.seconds is None:
            yield Call(float("inf"), fd)
            return
        call = Call(time.monotonic() + self.seconds, fd)
        with self._cond:
            self._calls[id(call)] = call
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="membank-deadline", daemon=True)
                self._thread.start()
            elif self._idle:
                self._cond.notify()
        try:
            yield call
        finally:
            with self._cond:
                self._calls.pop(id(call), None)

    def close(self) -> None:
        """Stop the thread (calls still running are no longer watched)."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for key, call in list(self._calls.items()):
                    if call.deadline <= now:
                        call.expired = True
                        del self._calls[key]
                        shutdown_socket(call.fd)  # under the lock: the call cannot end and free fd meanwhile
                first = min((c.deadline for c in self._calls.values()), default=None)
                self._idle = first is None
                self._cond.wait(None if first is None else first - now)


def silent_nodes(url: str, timeout: float = 2.0) -> list[str]:
    """The nodes of ``url``'s database that do not answer a new connection within ``timeout`` s, as "host:port".

    The server at ``url`` itself when it does not answer; else, on a Citus
    coordinator, each active node that ``citus_check_connection_to_node``
    cannot reach (under ``citus.node_connection_timeout`` = ``timeout``);
    [] when every node answers (or on one server that answers).
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conn = psycopg.connect(url, connect_timeout=max(2, int(timeout)), autocommit=True)
    except psycopg.Error:
        params = conninfo_to_dict(url)
        return [f"{params.get('host') or params.get('hostaddr') or 'localhost'}:{params.get('port') or 5432}"]
    with conn:
        try:
            if conn.execute("select 1 from pg_extension where extname = 'citus'").fetchone() is None:
                return []
            conn.execute("select set_config('citus.node_connection_timeout', %s, false),"
                         " set_config('statement_timeout', %s, false)",
                         (str(int(timeout * 1000)), str(int(timeout * 1000) * 8)))
            return [f"{h}:{p}" for h, p in conn.execute(
                "select nodename, nodeport from pg_dist_node where isactive and noderole = 'primary'"
                " and not citus_check_connection_to_node(nodename, nodeport) order by groupid").fetchall()]
        except psycopg.Error:
            return []
