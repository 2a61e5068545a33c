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
    if os.environ.get(server.ENV_VALKEY_URL):
        click.echo(f"{server.ENV_VALKEY_URL} is set; the embedded server is not used", err=True)
    click.echo(server.ensure_running())


@valkey.command("stop")
def valkey_stop() -> None:
    """Stop the embedded server (its append-only file keeps every acknowledged turn)."""
    click.echo("stopped" if server.stop() else "not running")
