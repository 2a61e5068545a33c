"""``membank import``: move memories from another memory store into membank.

Only the command group lives here (the CLI lists it without importing
psycopg or the store's reader); each source's reader is a module of its own,
imported when its command runs: ``membank.importers.mem0``.
"""

from __future__ import annotations

import click


@click.group("import")
def import_group() -> None:
    """Move memories from another memory store into membank (mem0's pgvector collections)."""


@import_group.command("mem0")
@click.option("--url", required=True, help="libpq URL of the database holding mem0's pgvector collection")
@click.option("--collection", default="mem0", show_default=True,
              help="mem0's collection_name: the table mem0's pgvector store created")
@click.option("--schema", "schema_name", default="public", show_default=True,
              help="the schema of that table (mem0's schema_name)")
@click.option("--dry-run", is_flag=True, help="read and count; write nothing")
@click.option("--embed", is_flag=True,
              help="embed the imported facts now, in this process (else `membank worker` does)")
def mem0_command(url: str, collection: str, schema_name: str, dry_run: bool, embed: bool) -> None:
    """Import a mem0 pgvector collection: every memory with its scope, metadata and times, once.

    Each row's payload gives the fact (data), the exact scope (user_id,
    agent_id, run_id), the metadata (every other key) and created_at /
    updated_at; its id becomes the memory's name, so a second run imports
    nothing twice. mem0's vectors are not kept (another model made them):
    the bank's embedder embeds the facts. Needs the admin role on the bank
    (membank.import_memory). Prints the counts; exits 1 when a row was
    refused (each on stderr, with its id).
    """
    from membank.importers import mem0

    with mem0.open_bank() as bank:
        counts = mem0.import_collection(bank, url, collection, schema_name, dry_run=dry_run,
                                        on_refused=lambda row_id, err: click.echo(
                                            f"refused {row_id}: {err}", err=True))
        if embed and not dry_run:
            counts["embedded"] = bank.process_pending(generation=False)
    click.echo(mem0.summary(counts, dry_run))
    if counts["refused"]:
        raise SystemExit(1)
