"""Distribute a membank database on a Citus coordinator: one scope, one shard.

``membank db distribute`` runs this after ``membank db upgrade`` (on a new or
an existing single-node bank). The scoped tables are distributed by
``scope_id`` in one colocation group with ``memories`` (all of a scope's rows
on one worker); the small bank-wide tables become reference tables (a copy on
every node). ``create_distributed_table`` moves the rows a table already holds
into its shards, so an existing bank keeps every memory, revision and vector.
Then ``db/`` is re-applied, one statement at a time (paths.run_sql).

The steps in SQL, for a DBA without the CLI: drop the foreign keys between
membank's tables; ``select create_distributed_table('membank_private.memories',
'scope_id')``, then the other DISTRIBUTED tables with ``colocate_with =>
'membank_private.memories'``; ``select create_reference_table(t)`` for each
REFERENCE table; add the foreign keys back; ``membank db upgrade``;
``select membank_private.rebuild_due_scopes()`` (the jobs already queued, into the coordinator's index of due work). The
triggers are dropped first, so that moving the rows fires none of them, and
``db/`` creates them again (with ``citus.enable_unsafe_triggers`` for that
DDL; README, "Scale out on Citus", says why and what it covers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The colocation anchor first; the rest in any order (foreign keys are
# dropped before and added back after, so that no order constraint applies).
DISTRIBUTED = (
    "memories", "memory_revisions", "memory_embeddings", "embedding_jobs", "scope_lexicon_base",
    "scope_lexicon_delta", "scope_stats_base", "scope_stats_delta", "scope_locks", "scope_states", "operations",
    "generation_jobs", "tool_rules", "tool_rule_changes", "tool_decisions", "tool_permission_settings", "sessions",
    "events", "retired_sources", "ingest_streams",
)
REFERENCE = (
    "embedding_config", "retention_settings", "profile_schemas", "bound_roles", "scope_bindings",
    "app_state_entries", "ingestion_settings",
)


@dataclass
class DistributeResult:
    """What ``distribute`` did: tables newly distributed or made reference tables, and those already so.

    ``warnings``: what the cluster must change before it is safe to run,
    one line each (a node whose commits are asynchronous).
    """

    distributed: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def distribute(url: str | None = None) -> DistributeResult:
    """Distribute membank's tables on the Citus coordinator at ``url`` (default: database.database_url()).

    Idempotent: tables Citus already knows are left as they are. Raises
    RuntimeError when the database has no citus extension or is not at the
    head revision (run ``membank db upgrade`` first). Every run also reports,
    in ``warnings``, each node where ``synchronous_commit`` is ``off`` (the
    workers by host and port, then the coordinator): a shard move
    (``citus_rebalance_start()``) loses writes acknowledged there just before
    it switches (docs/scale-out.md, Rebalancing).
    """
    import psycopg
    from psycopg import sql

    from membank import database, migrate

    url = url or database.database_url()
    if migrate.current(url) != migrate.head():
        raise RuntimeError("membank is not at the head revision here: run `membank db upgrade` first")
    result = DistributeResult()
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("select 1 from pg_extension where extname = 'citus'").fetchone() is None:
            raise RuntimeError("no citus extension in this database: distribute runs on a Citus coordinator")
        known = {r[0] for r in conn.execute(
            "select logicalrelid::regclass::text from pg_dist_partition").fetchall()}
        result.already = [t for t in REFERENCE + DISTRIBUTED if f"membank_private.{t}" in known]
        result.warnings = _asynchronous_nodes(conn)
        if len(result.already) == len(REFERENCE + DISTRIBUTED):
            return result
        with conn.transaction():
            # Without triggers while the rows move into the shards (they would
            # fire there: a second revision, a second embedding job); db/
            # creates them again below.
            _drop_triggers(conn)
            # One connection per node: the foreign key between two reference
            # tables is added after work on the distributed ones (Citus's rule).
            conn.execute("set local citus.multi_shard_modify_mode to 'sequential'")
            foreign_keys = _drop_foreign_keys(conn)
            for table in REFERENCE + DISTRIBUTED:
                qualified = f"membank_private.{table}"
                if qualified in known:
                    continue
                if table in DISTRIBUTED:
                    conn.execute("select create_distributed_table(%s, 'scope_id', colocate_with => %s)",
                                 (qualified, "none" if table == "memories" else "membank_private.memories"))
                    result.distributed.append(table)
                else:
                    conn.execute("select create_reference_table(%s)", (qualified,))
                    result.reference.append(table)
            for table, name, definition in foreign_keys:  # definition: pg_get_constraintdef's own text
                conn.execute(sql.SQL("alter table {} add constraint {} {}").format(
                    sql.Identifier("membank_private", table), sql.Identifier(name), sql.SQL(definition)))
    migrate.upgrade(url)  # db/ again: triggers and functions on the distributed tables
    with psycopg.connect(url, autocommit=True) as conn:
        # Jobs queued before distributing: into the coordinator's index of due work (121_due_work.sql).
        conn.execute("select membank_private.rebuild_due_scopes()")
    return result


def _asynchronous_nodes(conn) -> list[str]:
    # What a new connection to each worker's database gets (server, database and role settings included),
    # and the coordinator's own default for this database.
    rows = conn.execute("select nodename || ':' || nodeport, result from run_command_on_workers("
                        "$$select current_setting('synchronous_commit')$$) where success"
                        " order by nodename, nodeport").fetchall()  # one order, whatever Citus's
    local = conn.execute("select coalesce((select split_part(c, '=', 2) from pg_db_role_setting as s,"
                         " unnest(s.setconfig) as c where s.setdatabase = (select oid from pg_database"
                         " where datname = current_database()) and s.setrole = 0"
                         " and c like 'synchronous_commit=%'), current_setting('synchronous_commit'))").fetchone()
    rows.append(("the coordinator", local[0]))
    return [f"synchronous_commit is off on {node}: a shard move loses writes acknowledged there just before it "
            "switches; set it to on (ALTER SYSTEM or ALTER DATABASE) before rebalancing"
            for node, value in rows if value == "off"]


def _drop_triggers(conn) -> None:
    """Drop the triggers of membank's tables not distributed yet (db/ defines every one of them)."""
    from psycopg import sql

    for table, name in conn.execute("""
            select t.relname::text, g.tgname::text from pg_trigger as g join pg_class as t on t.oid = g.tgrelid
            where not g.tgisinternal and t.relnamespace = 'membank_private'::regnamespace
              and not exists (select from pg_dist_partition as p where p.logicalrelid = t.oid)
            order by 1, 2""").fetchall():
        conn.execute(sql.SQL("drop trigger {} on {}").format(
            sql.Identifier(name), sql.Identifier("membank_private", table)))


def _drop_foreign_keys(conn) -> list[tuple[str, str, str]]:
    """Drop the foreign keys between membank's tables; returns (table, name, definition) to add them back."""
    from psycopg import sql

    rows = conn.execute("""
        select t.relname::text, c.conname::text, pg_get_constraintdef(c.oid)
        from pg_constraint as c join pg_class as t on t.oid = c.conrelid
        where c.contype = 'f' and t.relnamespace = 'membank_private'::regnamespace
        order by 1, 2""").fetchall()
    for table, name, _ in rows:
        conn.execute(sql.SQL("alter table {} drop constraint {}").format(
            sql.Identifier("membank_private", table), sql.Identifier(name)))
    return rows
