"""A scope moved to another worker keeps its writers serialised: the triggers' "this transaction holds the scope's
lock" stamp names the node as well as the transaction id (055_lexicon.sql). `pytest -m citus`.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from test_citus import distributed, workers


def next_xid(c: psycopg.Connection) -> int:
    """The node's next transaction id (64-bit, as pg_current_xact_id counts)."""
    return int(c.execute("select pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()[0])


def burn_xids(c: psycopg.Connection, count: int) -> None:
    """Consume ``count`` transaction ids on the node (one committed transaction each)."""
    if count > 0:
        c.execute(f"do $$ begin for i in 1 .. {int(count)} loop perform pg_current_xact_id(); commit; end loop; end $$")


def login(db, url: str, role: str) -> psycopg.Connection:
    """An autocommit connection to ``url`` as a new LOGIN role holding ``role`` (created through the coordinator)."""
    import uuid

    name = f"attack2_{uuid.uuid4().hex[:10]}"
    with db.connect() as c:
        c.execute(f'create role "{name}" login')  # generated name
        c.execute(f'grant "{role}" to "{name}"')
    return psycopg.connect(url.replace("postgresql://postgres@", f"postgresql://{name}@"), autocommit=True)


@pytest.mark.citus
def test_a_moved_scopes_stale_last_write_does_not_let_a_writer_skip_the_scope_lock(citus_database):
    """scope_stats_base.last_write holds the transaction id (pg_current_xact_id) of the scope's last writer on the
    node that held the shard; the triggers take it as "this transaction already holds the scope's lock". Transaction
    ids are per node: after the shard group moves to another worker (citus_move_shard_placement), a transaction of
    that worker whose id equals the stale value skipped the lock, and instead of one server's MB040 within
    membank.lock_timeout it waited, unbounded by it, on the holder's stats row (55P03 from PostgreSQL's
    lock_timeout here). The writer must meet MB040 and write nothing."""
    db = citus_database
    a, _ = distributed(db)
    w1, w2 = workers(db)
    key = json.dumps(a)
    with psycopg.connect(w1.url(db.name), autocommit=True) as s1, \
            psycopg.connect(w2.url(db.name), autocommit=True) as s2, db.connect() as admin:
        # w1's counter well ahead of w2's, so that w2 reaches w1's value after the move
        burn_xids(s1, next_xid(s2) - next_xid(s1) + 200)
        writer = login(db, db.url, "membank_writer")
        writer.execute("select membank.create_memory(scope => %s, fact => 'the first fact, written on w1')", (key,))
        # the w1 writer's transaction id: the stamp's low 40 bits (with the fix the node's group is above them)
        stale = int(admin.execute("select last_write::text from membank_private.scope_stats_base"
                                  " where scope_id = md5(%s::jsonb::text)::uuid", (key,)).fetchone()[0]) % (1 << 40)
        assert stale >= next_xid(s2) + 100
        shard = admin.execute("select get_shard_id_for_distribution_column('membank_private.memories',"
                              " md5(%s::jsonb::text)::uuid)", (key,)).fetchone()[0]
        admin.execute("select citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s,"
                      " shard_transfer_mode => 'block_writes')", (shard, w1.port, w2.port))
        admin.execute("call citus_cleanup_orphaned_resources()")
        assert admin.execute("select count(distinct nodeport) from citus_shards where shardid = %s",
                             (shard,)).fetchone() == (1,)

        holder = login(db, db.url, "membank_writer")
        holder.execute("begin")
        holder.execute("select membank.create_memory(scope => %s, fact => 'the holder writes on w2')", (key,))
        on_w2 = login(db, w2.url(db.name), "membank_writer")
        on_w2.execute("set membank.lock_timeout = '300ms'")
        on_w2.execute("set lock_timeout = '5s'")
        burn_xids(s2, stale - next_xid(s2) - 2)
        for _ in range(50):
            on_w2.execute("begin")
            xid = int(on_w2.execute("select pg_current_xact_id()::text").fetchone()[0])
            if xid >= stale:
                break
            on_w2.execute("commit")
        assert xid == stale, "another transaction on w2 took the id: rerun"
        with pytest.raises(psycopg.Error) as busy:
            on_w2.execute("select membank.create_memory(scope => %s, fact => 'the second writer on w2')", (key,))
        on_w2.execute("rollback")
        holder.execute("commit")
        assert busy.value.sqlstate == "MB040", busy.value
        facts = admin.execute("select fact from membank.list_memories(scope => %s) order by fact", (key,)).fetchall()
        assert facts == [("the first fact, written on w1",), ("the holder writes on w2",)]
        for c in (writer, holder, on_w2):
            c.close()
