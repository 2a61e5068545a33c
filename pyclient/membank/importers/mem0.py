"""Read a mem0 pgvector collection and import its memories into membank (``membank import mem0``).

mem0's pgvector store (``mem0/vector_stores/pgvector.py``) keeps a collection
as one table ``<collection_name>(id uuid primary key, vector vector(n),
payload jsonb)``. The payload holds the fact as ``data``, its ``hash``
(md5 of data), ``created_at``/``updated_at`` (ISO 8601 text, with their
zone), the ids ``user_id``/``agent_id``/``run_id`` it was added under and,
flat beside them, ``actor_id``, ``role`` and the metadata the caller gave.

Mapping (no memory logic here: each row is one ``membank.import_memory``
call, which keeps the id as the name and skips a name it already holds):
scope = the ids present; fact = ``data``; metadata = every other key except
``hash``, ``id``, ``text_lemmatized`` and ``attributed_to`` (``actor_id`` and
``role`` stay in metadata, where ``membank.compat`` shows them as mem0
does); times = ``created_at``/``updated_at`` (a time without a zone is read
as UTC). A row without any id has no scope and is counted, not imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from datetime import datetime, timezone
from typing import Any

from membank import errors

IDS = ("user_id", "agent_id", "run_id")
# Payload keys that are not metadata: the fact, the times, the ids (the scope) and mem0's own bookkeeping.
NOT_METADATA = {"data", "hash", "created_at", "updated_at", "id", "text_lemmatized", "attributed_to", *IDS}
LABELS = {"imported_from": "mem0"}
_BATCH = 500


def open_bank() -> Any:
    """The CLI's MemoryBank (MEMBANK_DATABASE_URL or the embedded server); its embedder loads only to embed."""
    from membank.client import MemoryBank

    return MemoryBank()


def _time(value: Any, key: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        raise errors.invalid(f"payload.{key}", f"is not ISO 8601: {value!r}",
                             "mem0 writes datetime.isoformat() text; fix or remove it in the payload") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def to_import(row_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """``membank.import_memory`` arguments for one mem0 row, or None when it has no id to scope it.

    Raises InvalidArgumentError naming ``payload.<key>`` for a payload that is not an object or a time
    that is not ISO 8601.
    """
    if not isinstance(payload, Mapping):
        raise errors.invalid("payload", f"must be a JSON object, got {type(payload).__name__}",
                             "mem0 stores each memory's payload as a JSON object")
    scope = {k: str(payload[k]) for k in IDS if payload.get(k) not in (None, "")}
    if not scope:
        return None
    return dict(scope=scope, fact=payload.get("data"), name=row_id,
                metadata={k: v for k, v in payload.items() if k not in NOT_METADATA},
                create_time=_time(payload.get("created_at"), "created_at"),
                update_time=_time(payload.get("updated_at"), "updated_at"), labels=LABELS)


def read_collection(url: str, collection: str, schema_name: str = "public") -> Iterator[tuple[str, Any]]:
    """Yield (id, payload) of every row of mem0's table ``schema_name.collection`` at ``url``, by id.

    Raises DatabaseUnavailableError (the URL cannot be reached) and
    InvalidArgumentError naming ``--collection`` (no such table, or not mem0's layout).
    """
    import psycopg
    from psycopg import sql

    from membank import database

    database.check_connection(url, setting="--url")
    with psycopg.connect(url) as conn:
        conn.read_only = True
        columns = {r[0]: r[1] for r in conn.execute(
            "select a.attname, format_type(a.atttypid, a.atttypmod) from pg_catalog.pg_attribute as a"
            " where a.attrelid = to_regclass(%s) and a.attnum > 0 and not a.attisdropped",
            (sql.Identifier(schema_name, collection).as_string(conn),)).fetchall()}
        where = f"{database.describe(url)}"
        if not columns:
            raise errors.invalid("--collection", f"no table {schema_name}.{collection} in {where}",
                                 "give mem0's collection_name (default mem0) and, if not public, --schema")
        if columns.get("id") != "uuid" or columns.get("payload") != "jsonb":
            raise errors.invalid("--collection", f"{schema_name}.{collection} is not a mem0 pgvector collection: "
                                 f"columns {sorted(columns)}",
                                 "mem0's pgvector store creates (id uuid, vector vector(n), payload jsonb)")
        with conn.cursor(name="membank_import_mem0") as cursor:
            cursor.itersize = _BATCH
            cursor.execute(sql.SQL("select id::text, payload from {} order by id").format(
                sql.Identifier(schema_name, collection)))
            yield from cursor


def import_collection(bank: Any, url: str, collection: str, schema_name: str = "public", *, dry_run: bool = False,
                      on_refused: Callable[[str, Exception], None] | None = None) -> dict[str, int]:
    """Import every row of the collection into ``bank``; return the counts.

    Counts: ``read``, ``imported`` (with ``dry_run``: would be), ``already``
    (its id is held: imported before), ``unscoped`` (no user_id, agent_id
    or run_id), ``refused`` (bad data: ``on_refused(id, error)`` is called).
    With ``dry_run`` nothing is written: each row's import runs in a
    transaction that is rolled back, so the counts are the import's own. Raises what ``read_collection`` raises, and
    PermissionDeniedError when the bank's login is not an admin.
    """
    counts = dict(read=0, imported=0, already=0, unscoped=0, refused=0)
    with _dry_run_connection(bank) if dry_run else nullcontext() as dry:
        for row_id, payload in read_collection(url, collection, schema_name):
            counts["read"] += 1
            try:
                args = to_import(row_id, payload)
                if args is None:
                    counts["unscoped"] += 1
                    continue
                imported = _import_rolled_back(dry, args) if dry else bank.import_memory(**args) is not None
                counts["imported" if imported else "already"] += 1
            except errors.InvalidArgumentError as err:
                counts["refused"] += 1
                if on_refused is not None:
                    on_refused(row_id, err)
    return counts


def _dry_run_connection(bank: Any) -> Any:
    # The bank's own session settings (statement_timeout, membank.lock_timeout): every wait stays bounded.
    import psycopg

    conn = psycopg.connect(bank.url)
    bank._configure_connection(conn)
    return conn


def _import_rolled_back(conn: Any, args: Mapping[str, Any]) -> bool:
    """Run ``membank.import_memory`` on ``args`` in a transaction that is rolled back: True when it would import.

    The dry run makes the very call the import makes, so it refuses what the
    import would refuse (an empty fact, a bad time) rather than a guess of it.
    """
    import psycopg
    from psycopg.types.json import Jsonb

    try:
        with conn.transaction(force_rollback=True):
            return conn.execute(
                "select (membank.import_memory(scope => %s, fact => %s, name => %s, metadata => %s,"
                " create_time => %s, update_time => %s, labels => %s)).name is not null",
                (Jsonb(args["scope"]), args["fact"], args["name"], Jsonb(args["metadata"]), args["create_time"],
                 args["update_time"], Jsonb(args["labels"]))).fetchone()[0]
    except psycopg.Error as err:
        if err.sqlstate is None:
            raise
        raise errors.from_psycopg(err) from None


def summary(counts: Mapping[str, int], dry_run: bool) -> str:
    """The one line ``membank import mem0`` prints."""
    line = (f"read {counts['read']}, {'would import' if dry_run else 'imported'} {counts['imported']}, "
            f"already imported {counts['already']}, without user_id/agent_id/run_id {counts['unscoped']}, "
            f"refused {counts['refused']}")
    if "embedded" in counts:
        line += f", embedded {counts['embedded']}"
    elif counts["imported"] and not dry_run:
        line += " (facts queued for embedding: `membank worker`, or --embed)"
    return line + (" (dry run: nothing written)" if dry_run else "")
