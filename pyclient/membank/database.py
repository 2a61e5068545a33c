"""Which database membank uses, and a quick first contact with it.

``database_url()`` is MEMBANK_DATABASE_URL when set, otherwise the embedded
server (started or reused). ``check_connection(url)`` opens one connection
with a short timeout before anything else does: a wrong URL then fails in
seconds with one line naming the host and database (never the password) and
a hint, where a connection pool would retry for its whole timeout and log
every attempt.
"""

from __future__ import annotations

import os
from pathlib import Path

from membank import errors, settings

# libpq's connect_timeout, per address tried (its minimum is 2 s): an
# unreachable host fails in a few seconds, a refused port at once.
CONNECT_TIMEOUT = 2
URL_SHAPE = "postgresql://USER:PASSWORD@HOST:PORT/DBNAME"


def database_url() -> str:
    """Return the libpq URL of the database to use.

    ``MEMBANK_DATABASE_URL`` when set (any PostgreSQL >= 15 with pgvector);
    otherwise the embedded server is started (or reused) and its ``membank``
    database is returned (created and migrated on first use).
    """
    url = os.environ.get(settings.ENV_DATABASE_URL)
    if url:
        return url
    from membank import embedded

    return embedded.ensure_running()


def _source(url: str) -> str:
    return settings.ENV_DATABASE_URL if url == os.environ.get(settings.ENV_DATABASE_URL) else "the database URL"


def describe(url: str) -> str:
    """Return where ``url`` points as ``database "DB" on HOST:PORT``, without user or password.

    Raises DatabaseUnavailableError when ``url`` is not a URL or conninfo libpq can read.
    """
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except Exception:
        raise errors.DatabaseUnavailableError(
            f"{_source(url)} is not a PostgreSQL URL",
            hint=f"write {URL_SHAPE} (or key=value conninfo), or unset "
                 f"{settings.ENV_DATABASE_URL} to use the embedded server") from None
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    where = f"socket {host}" if host.startswith("/") else f"{host}:{params.get('port') or 5432}"
    dbname = params.get("dbname") or params.get("user") or "(your user name)"
    return f'database "{dbname}" on {where}'


def _reason(err: Exception) -> str:
    # libpq: 'connection failed: connection to server at "h", port 1 failed: Connection refused\n\tIs ...'
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    reason = first.rsplit("failed: ", 1)[-1]
    return " ".join(reason.removeprefix("FATAL:").split())


def _hint(reason: str, url: str, setting: str | None = None) -> str:
    env = setting or _source(url)
    if "does not exist" in reason and "database" in reason:
        return f"create it (createdb), or fix the database name in {env}"
    if "password" in reason or "authentication" in reason or ("role" in reason and "does not exist" in reason):
        return f"check the user and password in {env}"
    if _is_embedded_socket(url) and ("No such file" in reason or "refused" in reason):  # no server on it
        return "the embedded server is stopped (after a reboot, or membank db stop): start it with membank db start"
    if setting is not None:  # another database than the bank's (e.g. the store an import reads)
        return f"is the server running there? check {setting} ({URL_SHAPE})"
    return (f"is the server running there? check {env} ({URL_SHAPE}), or unset "
            f"{settings.ENV_DATABASE_URL} to use the embedded server")


def _is_embedded_socket(url: str) -> bool:
    # The URL `membank db url` printed (an MCP client's configuration keeps it) names the embedded
    # server's socket folder, its data directory: nothing starts that server but `membank db start`.
    from psycopg.conninfo import conninfo_to_dict

    from membank import embedded

    try:
        host = conninfo_to_dict(url).get("host") or ""
        return host.startswith("/") and Path(host).resolve() == embedded.pgdata().resolve()
    except Exception:  # a URL libpq cannot read, or a data dir setting that is not a folder: not the embedded one
        return False


def check_connection(url: str, *, timeout: float = CONNECT_TIMEOUT, setting: str | None = None) -> None:
    """Connect to ``url`` once (at most ``timeout`` seconds per address) and close again.

    Raises DatabaseUnavailableError, one line naming host and database and
    with a hint, when the URL cannot be parsed, the server refuses or does
    not answer, the database does not exist or the login is refused.
    ``setting``: where the URL came from, for the hint, when it is not the
    bank's database (e.g. ``--url``); the hint then names it alone.
    """
    import psycopg

    where = describe(url)
    try:
        psycopg.connect(url, connect_timeout=max(2, int(timeout))).close()
    except psycopg.Error as err:
        reason = _reason(err)
        raise errors.DatabaseUnavailableError(f"cannot connect to {where}: {reason}",
                                              hint=_hint(reason, url, setting)) from None
