"""The embedded server: data directory, start, reuse, stop, restart with data kept."""

import os
import stat
import tempfile
from pathlib import Path

import psycopg
import pytest

from membank import MemoryBank, database, embedded, errors, migrate, settings


@pytest.fixture
def data_dir(sandbox, monkeypatch):
    # In the session's sandbox, not pytest's tmp_path: as root the server runs
    # as a system user, and every pytest session that starts (another run on
    # the machine) takes /tmp/pytest-of-root back to mode 0700, after which
    # pg_ctl, as that user, could no longer reach the server's folder to stop it.
    path = Path(tempfile.mkdtemp(prefix="membank-data-", dir=sandbox))
    monkeypatch.setenv("MEMBANK_DATA_DIR", str(path))
    monkeypatch.delenv("MEMBANK_DATABASE_URL", raising=False)
    yield path
    embedded.stop()


def test_root_default_data_dir_opens_nothing_private(monkeypatch):
    monkeypatch.delenv("MEMBANK_DATA_DIR", raising=False)
    if os.geteuid() == 0:
        assert settings.data_dir() == settings.Path("/var/lib/membank")
    else:
        assert str(settings.data_dir()).startswith(os.path.expanduser("~"))


def test_start_reuse_stop_restart(data_dir):
    assert embedded.pgdata() == data_dir / "pg"
    assert not embedded.is_running()
    url = database.database_url()
    assert embedded.is_running() and "membank" in url
    assert database.database_url() == url  # reused, not a second server
    migrate.upgrade(url)
    with MemoryBank(max_size=1) as bank:
        name = bank.create_memory({"u": "1"}, "kept across restarts").name
    assert embedded.stop() is True
    assert embedded.stop() is False
    with MemoryBank(max_size=1) as bank:  # starts it again, same data
        assert bank.get_memory(name).fact == "kept across restarts"
        # A long-lived bank whose server stops: its next call starts it again (as the CLI does) instead of
        # waiting out the pool's 30 s for a PoolTimeout.
        assert embedded.stop() is True
        assert bank.get_memory(name).fact == "kept across restarts" and embedded.is_running()
        # ... and when the server cannot start, the call says so at once, naming `membank db start`.
        conf = data_dir / "pg" / "postgresql.conf"
        kept = conf.read_text()
        embedded.stop()
        conf.write_text(kept + "\nnot a setting\n")
        try:
            with pytest.raises(errors.DatabaseUnavailableError, match="stopped and does not start again") as info:
                bank.get_memory(name)
            assert "`membank db start`" in info.value.hint
        finally:
            conf.write_text(kept)
        assert bank.get_memory(name).fact == "kept across restarts"
    with psycopg.connect(url) as conn:
        assert conn.execute("show listen_addresses").fetchone()[0] == ""
    assert not (os.stat(data_dir / "pg").st_mode & stat.S_IRWXO)


def test_a_long_lived_async_bank_starts_a_stopped_embedded_server_again(data_dir):
    """AsyncMemoryBank (and so the ADK services, AsyncMemory, AsyncMembankStore) as MemoryBank: a call that finds
    the embedded server stopped starts it again, or says at once that it does not start, naming `membank db start`."""
    import asyncio

    from membank import AsyncMemoryBank

    migrate.upgrade(database.database_url())

    async def main() -> None:
        async with AsyncMemoryBank(max_size=1) as bank:
            name = (await bank.create_memory({"u": "1"}, "kept across restarts")).name
            assert embedded.stop() is True
            assert (await bank.get_memory(name)).fact == "kept across restarts" and embedded.is_running()
            conf = data_dir / "pg" / "postgresql.conf"
            kept = conf.read_text()
            embedded.stop()
            conf.write_text(kept + "\nnot a setting\n")
            try:
                with pytest.raises(errors.DatabaseUnavailableError, match="stopped and does not start again") as info:
                    await bank.get_memory(name)
                assert "`membank db start`" in info.value.hint
            finally:
                conf.write_text(kept)
            assert (await bank.get_memory(name)).fact == "kept across restarts"

    asyncio.run(main())
    embedded.stop()


def test_first_use_installs_the_schema(data_dir):
    """The embedded database is membank's own: the first command works without `membank db upgrade`."""
    with MemoryBank(max_size=1) as bank:
        assert bank.create_memory({"u": "1"}, "first use").fact == "first use"
    assert migrate.current(database.database_url()) == migrate.head()
