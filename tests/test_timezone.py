"""Instants survive any client time zone: UTC on the wire, aware datetimes in Python."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import dict_row

from membank import MemoryBank

LA = ZoneInfo("America/Los_Angeles")


def test_los_angeles_client_and_utc_server_agree(db_url, conn):
    assert conn.execute("show timezone").fetchone()["TimeZone"] == "UTC"
    expire = datetime(2031, 3, 9, 1, 30, tzinfo=LA)  # the night US DST starts
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row,
                         options="-c TimeZone=America/Los_Angeles") as la:
        created = la.execute(
            "select * from membank.create_memory(scope => '{\"u\":\"1\"}', fact => 'f', expire_time => %s)",
            (expire,)).fetchone()
        assert created["expire_time"] == expire
        assert created["expire_time"].utcoffset() == timedelta(hours=-8)
    with MemoryBank(db_url, max_size=1) as bank:
        seen = bank.get_memory(created["name"])
    assert seen.expire_time == expire and seen.create_time == created["create_time"]
    assert seen.expire_time.utcoffset() == timedelta(0)
    row = conn.execute("select expire_time from membank.get_memory(name => %s)", (str(created["name"]),)).fetchone()
    assert row["expire_time"] == expire


def test_client_in_los_angeles_process_zone(db_url, monkeypatch):
    # A client whose libpq default zone (PGTZ) is Los Angeles still reads UTC instants.
    monkeypatch.setenv("PGTZ", "America/Los_Angeles")
    with MemoryBank(db_url, max_size=1) as bank:
        m = bank.create_memory({"u": "1"}, "f", expire_time=datetime(2030, 7, 1, 12, tzinfo=LA))
        assert m.expire_time == datetime(2030, 7, 1, 19, tzinfo=ZoneInfo("UTC"))
        assert m.expire_time.utcoffset() == timedelta(0)
