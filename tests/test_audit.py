"""membank audit: the eight evidence cases against the test database and a real Valkey, through the CLI."""

from __future__ import annotations

import redis
from click.testing import CliRunner

from membank import MemoryBank
from membank.audit import CASES
from membank.cli import main

EXPECTED = {"operation still running": "wait", "clean write": "allow", "no-topic no-op": "allow",
            "similarity miss with list hit": "degrade", "wrong-scope result": "block", "stale revision": "degrade",
            "deleted but still visible": "block", "created but not fetchable": "block"}


def test_audit_command_prints_the_table_passes_and_cleans_up(db_url, conn, valkey_url, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    monkeypatch.setenv("MEMBANK_VALKEY_URL", valkey_url)
    result = CliRunner().invoke(main, ["audit"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["case", "expected", "actual", "reason"]
    for case, line in zip(CASES, lines[1:9]):
        assert line.startswith(case) and line[len(case):].split()[:3] == [EXPECTED[case], EXPECTED[case], "ok"], line
    assert "8 of 8 cases as expected" in result.output
    leftover = conn.execute(
        "select count(*) as n from membank_private.memories where scope->>'app_name' = 'membank-audit'").fetchone()
    assert leftover["n"] == 0
    # the operation left running on purpose was finished before the purge: no worker can write after it
    with MemoryBank(db_url) as bank:
        assert bank.generation_backlog().pending_operations == 0
        assert bank.process_pending() == 0
    client = redis.Redis.from_url(valkey_url)
    assert not list(client.scan_iter("membank:*audit-*"))
    client.close()


def test_an_unexpected_verdict_fails_the_audit_with_exit_code_1(db_url, valkey_url, monkeypatch):
    """A boundary whose re-fetch sees nothing (say, a broken replica): each case needing a live memory fails."""
    real = MemoryBank.evidence_verdicts

    def nothing(self, *args, **kwargs):
        # The operations are seen, the memories are not: every memory reads as not fetchable.
        return [r if r["verdict"] == "block" else {**r, "verdict": "block", "reason": "not fetchable", "fact": None}
                for r in real(self, *args, **kwargs)]

    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    monkeypatch.setenv("MEMBANK_VALKEY_URL", valkey_url)
    real_context = MemoryBank.build_context

    def nothing_in_context(self, *args, **kwargs):
        # The same broken re-fetch inside membank.build_context (the context's long-term part).
        ctx = real_context(self, *args, **kwargs)
        return {**ctx, "memories": [], "verdicts": [
            v if v["verdict"] == "block" else {**v, "verdict": "block", "reason": "not fetchable"}
            for v in ctx["verdicts"]]}

    monkeypatch.setattr(MemoryBank, "evidence_verdicts", nothing)
    monkeypatch.setattr(MemoryBank, "build_context", nothing_in_context)
    result = CliRunner().invoke(main, ["audit"], catch_exceptions=False)
    assert result.exit_code == 1
    failed = {case for case in CASES for line in result.output.splitlines() if line.startswith(case) and " !! " in line}
    assert failed == {"operation still running", "clean write", "similarity miss with list hit", "stale revision"}
    assert "4 of 8 cases as expected" in result.output
