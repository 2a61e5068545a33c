"""Failures the state machine (tests/test_invariants.py) found, shrunk to the calls that show them, as plain tests.

Each test is the smallest sequence of API calls, made as the login roles apps use, that broke an invariant; the
docstring names the invariant.
"""

from __future__ import annotations

from psycopg.types.json import Jsonb

from conftest import connect_as, wait_for_database_clock

SCOPE = {"app_name": "fz", "user_id": "fz-user-a"}


def test_an_expired_memorys_fact_is_in_no_scoped_view(login, db_url):
    """An expired fact appears in no output: list_revisions redacts an expired memory's revisions, and so must the
    scoped_revisions view that set_scope drives (it showed the fact and the previous fact)."""
    _, url = login("membank_writer")
    writer = connect_as(url)
    name = writer.execute("select (membank.create_memory(scope => %s, fact => 'canary one')).name",
                          (Jsonb(SCOPE),)).fetchone()["name"]
    writer.execute("select membank.update_memory(name => %s, fact => 'canary two')", (name,))
    instant = writer.execute("select clock_timestamp() + interval '50 milliseconds' as t").fetchone()["t"]
    writer.execute("select membank.update_memory(name => %s, expire_time => %s)", (name, instant))
    wait_for_database_clock(db_url, instant)
    listed = writer.execute("select fact, previous_fact, metadata from membank.list_revisions(name => %s)",
                            (name,)).fetchall()
    writer.execute("select membank.set_scope(%s)", (Jsonb(SCOPE),))
    viewed = writer.execute("select fact, previous_fact, metadata from membank.scoped_revisions"
                            " where memory_name = %s order by revision", (name,)).fetchall()
    assert len(viewed) == 3
    assert viewed == listed == [{"fact": None, "previous_fact": None, "metadata": {}}] * 3
    writer.close()
