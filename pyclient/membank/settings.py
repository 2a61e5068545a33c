"""membank's settings from the environment: the data directory, timeouts, the database URL's variable.

A leaf module (it imports no other part of membank): ``membank.database``
decides which database to use, ``membank.embedded`` runs the embedded one.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_DATABASE_URL = "MEMBANK_DATABASE_URL"
ENV_DATA_DIR = "MEMBANK_DATA_DIR"
ENV_STATEMENT_TIMEOUT = "MEMBANK_STATEMENT_TIMEOUT"
ENV_LOCK_TIMEOUT = "MEMBANK_LOCK_TIMEOUT"


def statement_timeout() -> str:
    """Return the statement_timeout the client sets on its pooled connections.

    ``MEMBANK_STATEMENT_TIMEOUT`` when set (a PostgreSQL duration such as
    ``30s`` or ``500ms``; ``0`` turns the limit off), else ``30s``.
    """
    return os.environ.get(ENV_STATEMENT_TIMEOUT, "").strip() or "30s"


def lock_timeout() -> str:
    """Return the most a write waits for its scope's write lock (setting ``membank.lock_timeout``).

    ``MEMBANK_LOCK_TIMEOUT`` when set (a positive duration: ``ms``, ``s`` or
    ``min``), else ``5s``; past it a write raises LockTimeoutError (MB040).
    """
    return os.environ.get(ENV_LOCK_TIMEOUT, "").strip() or "5s"


def data_dir() -> Path:
    """Return membank's data directory (the embedded server lives in ``pg/`` below it).

    ``MEMBANK_DATA_DIR`` when set. Otherwise, for root, ``/var/lib/membank``:
    the embedded server runs as its own system user and makes every parent
    folder of its data directory world-traversable, so a folder under
    ``/root`` would open the home folder; ``/var/lib`` is already
    traversable and holds nothing private. For other users the platform's
    user data dir (``~/.local/share/membank`` on Linux), where nothing's
    permissions change.
    """
    configured = os.environ.get(ENV_DATA_DIR)
    if configured:
        return Path(configured).expanduser().resolve()
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
