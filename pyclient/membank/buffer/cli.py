"""``membank valkey``: the embedded Valkey server of the session buffer (path, url, start, stop)."""

from __future__ import annotations

import os

import click

from membank.buffer import server


@click.group()
def valkey() -> None:
    """The session buffer's Valkey: MEMBANK_VALKEY_URL, else the embedded server in <data dir>/valkey."""


@valkey.command("path")
def valkey_path() -> None:
    """Print the embedded server's folder (configuration, append-only files, log)."""
    click.echo(server.valkey_dir())


@valkey.command("url")
def valkey_url() -> None:
    """Print the URL the session buffer uses (starts the embedded server unless MEMBANK_VALKEY_URL is set)."""
    click.echo(server.valkey_url())


@valkey.command("start")
def valkey_start() -> None:
    """Start the embedded server (Unix socket only, append-only file) unless it runs."""
    _refuse_with_external_url("start")
    click.echo(server.ensure_running())


@valkey.command("stop")
def valkey_stop() -> None:
    """Stop the embedded server (its append-only file keeps every acknowledged turn)."""
    _refuse_with_external_url("stop")
    click.echo("stopped" if server.stop() else "not running")


def _refuse_with_external_url(action: str) -> None:
    # With MEMBANK_VALKEY_URL the buffer never uses the embedded server:
    # starting or stopping it would only mislead.
    url = os.environ.get(server.ENV_VALKEY_URL)
    if url:
        click.echo(f"error: {server.ENV_VALKEY_URL} is set ({url}); the session buffer does not use the embedded "
                   f"server, so there is nothing to {action}", err=True)
        click.echo(f"hint: {action} that server with its own tools, or unset {server.ENV_VALKEY_URL}", err=True)
        raise SystemExit(2)
