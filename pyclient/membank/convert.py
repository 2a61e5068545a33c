"""Convert a single-node bank onto a new Citus cluster: every row, revision and vector, and every binding.

``membank db convert --from SOURCE_URL`` runs this against the coordinator
(``MEMBANK_DATABASE_URL``) of a cluster whose workers have the database and
the citus extension. In order:

1. Check, before anything is written: the source is at the head revision;
   the target has citus and holds no bank yet (nothing distributed, no rows
   but the settings rows ``db upgrade`` writes); every role the source binds
   to scopes (``bind_role_to_scope``) exists on the coordinator by name.
   A missing role refuses the conversion, naming every missing role: a
   binding is never dropped or widened on the way.
2. ``membank db upgrade`` on the target (its tables are still local to the
   coordinator).
3. One transaction on the target: the triggers and the foreign keys between
   membank's tables are dropped (so that copying fires nothing: no second
   revision, no second embedding job), the tables are emptied, and every
   table of ``membank_private`` is copied from one repeatable-read snapshot
   of the source with COPY (text format; the stored generated columns are
   computed again), the identity sequences are set to the source's, and the
   foreign keys are added back (they check the copied rows).
4. Bindings are keyed by the role's OID (``bound_roles``), which differs
   between servers: each is re-keyed by the role's name to the
   coordinator's OID of that role. A binding of a role dropped on the source
   restricted nobody there and is left out (``pruned``).
5. ``membank db distribute`` (distribute.py): the rows move into the
   workers' shards, ``db/`` creates the triggers again; then
   ``membank.refresh_role_bindings()`` records each worker's OID of every
   bound role.
6. The row count of every table on the cluster is compared with the
   source's snapshot; a difference raises.

Writes to the source after the snapshot are not copied: stop the
applications (or point them at the cluster) first. Not copied either:
roles and their grants (cluster-wide objects: create them on the
coordinator, Citus creates them on the workers), database settings
(``alter database ... set``) and per-scope HNSW indexes (run
``membank scope-indexes`` on the cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Rows `membank db upgrade` writes into a new bank (one settings row each): a target holding only these is empty.
UPGRADE_ROWS = ("retention_settings", "ingestion_settings")
# Tables keyed by a role's OID; the role's own name and each worker's OID of it are in bound_roles.
ROLE_TABLES = ("bound_roles", "scope_bindings")
# The coordinator's index of due work (db/functions/121_due_work.sql): not copied (empty on one server), rebuilt from
# the shards by distribute.
DERIVED = ("due_scopes",)


class ConvertError(RuntimeError):
    """The conversion was refused or failed; the message says why and what to do."""


@dataclass
class ConvertResult:
    """What ``convert`` did: rows per table (equal on both sides), the roles re-keyed, and the distribution."""

    rows: dict[str, int] = field(default_factory=dict)
    roles: list[dict] = field(default_factory=list)  # {"role", "source_oid", "cluster_oid"}
    pruned: list[int] = field(default_factory=list)  # source OIDs of dropped roles whose bindings were left out
    distributed: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)


def convert(source: str, target: str | None = None) -> ConvertResult:
    """Copy the single-node bank at ``source`` onto the Citus coordinator at ``target`` and distribute it.

    ``target`` defaults to database.database_url(). Raises ConvertError, with
    nothing written to the target, when the source is not at the head
    revision, the target has no citus extension or holds a bank already, or
    a role bound to scopes on the source has no role of that name on the
    coordinator (the message names every missing role).
    """
    import psycopg

    from membank import database, distribute, migrate

    target = target or database.database_url()
    database.check_connection(source)  # a wrong URL: DatabaseUnavailableError naming it, within seconds
    if migrate.current(source) != migrate.head():
        raise ConvertError(f"the source ({database.describe(source)}) is not at membank's head revision "
                           f"{migrate.head()}: run `membank db upgrade` against it first")
    with psycopg.connect(source, autocommit=True) as src, psycopg.connect(target, autocommit=True) as dst:
        _check_target(dst)
        roles, pruned = _map_roles(src, dst)
    migrate.upgrade(target)
    result = ConvertResult(roles=[{"role": n, "source_oid": s, "cluster_oid": c} for s, (n, c) in roles.items()],
                           pruned=pruned)
    with psycopg.connect(source, autocommit=True) as src, psycopg.connect(target, autocommit=True) as dst:
        _check_target(dst)  # again, now that membank is installed there: still empty
        src.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # one snapshot for every table
        src.read_only = True
        with src.transaction(), dst.transaction():
            tables = _tables(dst)
            distribute._drop_triggers(dst)
            foreign_keys = distribute._drop_foreign_keys(dst)
            dst.execute("truncate " + ", ".join(f"membank_private.{t}" for t in tables))
            result.rows = _counts(src, tables)
            for table in tables:
                if table in ROLE_TABLES:
                    result.rows[table] = _copy_role_table(src, dst, table, roles)
                else:
                    _copy_table(src, dst, table)
            _copy_sequences(src, dst, tables)
            _add_foreign_keys(dst, foreign_keys)
    try:
        done = distribute.distribute(target)
    except Exception as err:
        raise ConvertError(f"every row is copied, but distributing failed ({err}): "
                           "fix the cause, then run `membank db distribute` against the coordinator") from err
    result.distributed, result.reference = done.distributed, done.reference
    with psycopg.connect(target, autocommit=True) as dst:
        dst.execute("select membank.refresh_role_bindings()")
        after = _counts(dst, list(result.rows))
    if after != result.rows:
        wrong = {t: (n, after.get(t)) for t, n in result.rows.items() if after.get(t) != n}
        raise ConvertError(f"rows differ after distributing (table: (source, cluster)): {wrong}")
    return result


def _check_target(dst) -> None:
    """Refuse a target without citus, or one that holds a bank (distributed tables, or rows beyond UPGRADE_ROWS)."""
    if dst.execute("select 1 from pg_extension where extname = 'citus'").fetchone() is None:
        raise ConvertError("no citus extension in the target database: convert runs against a Citus coordinator "
                           "(create extension citus there and on every worker, then citus_add_node each worker)")
    if dst.execute("select to_regclass('membank_private.memories') is null").fetchone()[0]:
        return  # membank is not installed there yet
    if dst.execute("select exists (select from pg_dist_partition where logicalrelid::regclass::text"
                   " like 'membank_private.%')").fetchone()[0]:
        raise ConvertError("the target's bank is distributed already: convert fills a new database "
                           "(create one on every node, then run convert against its coordinator)")
    full = [t for t in _tables(dst) if t not in UPGRADE_ROWS
            and dst.execute(f"select exists (select from membank_private.{t})").fetchone()[0]]  # names from catalog
    if full:
        raise ConvertError(f"the target's bank is not empty ({', '.join(full)} hold rows): convert fills a new "
                           "database")


def _tables(conn) -> list[str]:
    """membank_private's tables, by name."""
    return [r[0] for r in conn.execute(
        "select c.relname::text from pg_class as c where c.relnamespace = 'membank_private'::regnamespace"
        " and c.relkind in ('r', 'p') and not c.relispartition order by 1").fetchall() if r[0] not in DERIVED]


def _columns(conn, table: str) -> list[str]:
    """The columns COPY can write (stored generated columns are computed again), in table order."""
    return [r[0] for r in conn.execute(
        "select a.attname::text from pg_attribute as a where a.attrelid = %s::regclass and a.attnum > 0"
        " and not a.attisdropped and a.attgenerated = '' order by a.attnum",
        (f"membank_private.{table}",)).fetchall()]


def _copy_table(src, dst, table: str) -> None:
    from psycopg import sql

    columns = _columns(dst, table)
    if _columns(src, table) != columns:
        raise ConvertError(f"membank_private.{table} has other columns on the source: are both at the head "
                           "revision of the same membank version?")
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    qualified = sql.Identifier("membank_private", table)
    with src.cursor().copy(sql.SQL("copy (select {} from {}) to stdout").format(names, qualified)) as out, \
            dst.cursor().copy(sql.SQL("copy {} ({}) from stdin").format(qualified, names)) as into:
        for block in out:
            into.write(block)


def _map_roles(src, dst) -> tuple[dict[int, tuple[str, int]], list[int]]:
    """Each bound role's source OID -> (its name, the coordinator's OID of that name); and dropped roles' OIDs.

    Raises ConvertError naming every bound role that has no role of its name on the coordinator.
    """
    if src.execute("select to_regclass('membank_private.bound_roles') is null").fetchone()[0]:
        return {}, []
    bound = src.execute("select b.role_oid::bigint, r.rolname::text from membank_private.bound_roles as b"
                        " left join pg_catalog.pg_roles as r on r.oid = b.role_oid order by 1").fetchall()
    names = [n for _, n in bound if n is not None]
    found = dict(dst.execute("select rolname::text, oid::bigint from pg_catalog.pg_roles where rolname = any(%s)",
                             (names,)).fetchall())
    missing = sorted(set(names) - set(found))
    if missing:
        raise ConvertError(
            f"roles bound to scopes on the source do not exist on the coordinator: {', '.join(missing)}; "
            "nothing was copied (a binding is never dropped or widened): create them there with their grants "
            "(Citus creates them on the workers), then run convert again")
    return {o: (n, found[n]) for o, n in bound if n is not None}, [o for o, n in bound if n is None]


def _copy_role_table(src, dst, table: str, roles: dict[int, tuple[str, int]]) -> int:
    """Copy bound_roles or scope_bindings re-keyed to the coordinator's OIDs (rows of dropped roles left out).

    Returns the number of rows copied.
    """
    from psycopg import sql

    columns = _columns(dst, table)
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    qualified = sql.Identifier("membank_private", table)
    rows = src.execute(sql.SQL("select {} from {}").format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns), qualified)).fetchall()
    copied = 0
    with dst.cursor().copy(sql.SQL("copy {} ({}) from stdin").format(qualified, names)) as into:
        for row in rows:
            values = dict(zip(columns, row))
            key = int(values["role_oid"])
            if key not in roles:
                continue  # a dropped role's: it restricted nobody
            name, oid = roles[key]
            values["role_oid"] = str(oid)
            if "role_name" in values:
                values["role_name"] = name
            if "worker_oids" in values:
                values["worker_oids"] = "{}"  # refresh_role_bindings records them once distributed
            into.write_row([values[c] for c in columns])
            copied += 1
    return copied


def _copy_sequences(src, dst, tables: list[str]) -> None:
    """Set each identity column's sequence on the target to the source's position."""
    for table in tables:
        for (sequence,) in dst.execute(
                "select pg_get_serial_sequence(%s, a.attname) from pg_attribute as a where a.attrelid ="
                " %s::regclass and a.attidentity <> '' and not a.attisdropped",
                (f"membank_private.{table}",) * 2).fetchall():
            last, called = src.execute(f"select last_value, is_called from {sequence}").fetchone()  # catalog name
            dst.execute("select setval(%s, %s, %s)", (sequence, last, called))


def _add_foreign_keys(dst, foreign_keys: list[tuple[str, str, str]]) -> None:
    from psycopg import sql

    for table, name, definition in foreign_keys:  # definition: pg_get_constraintdef's own text
        dst.execute(sql.SQL("alter table {} add constraint {} {}").format(
            sql.Identifier("membank_private", table), sql.Identifier(name), sql.SQL(definition)))


def _counts(conn, tables: list[str]) -> dict[str, int]:
    return {t: conn.execute(f"select count(*) from membank_private.{t}").fetchone()[0] for t in tables}  # catalog
