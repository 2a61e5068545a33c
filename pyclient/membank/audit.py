"""``membank audit``: eight synthetic cases that check the evidence verdicts end to end.

Each case writes canary data in a scope of its own run
(``{"app_name": "membank-audit", "canary": "<run id>"}``, plus a second
scope for the wrong-scope case), provokes one situation at the context
boundary and compares the verdict that ``membank.context`` gives with the
expected one:

| case | expected |
|---|---|
| operation still running | wait |
| clean write | allow |
| no-topic no-op | allow (nothing to wait for, nothing written) |
| similarity miss with list hit | degrade |
| wrong-scope result | block |
| stale revision | degrade |
| deleted but still visible | block |
| created but not fetchable | block |

Everything the run wrote is removed afterwards: the canary memories (purged;
expired ones through ``purge_expired_memories``) and the session-buffer keys.
Events and operations of the canary sessions stay (the SQL API has no call
that deletes them); they live in canary scopes that nothing else reads.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import click

from membank.buffer import BufferUnavailableError, SessionBuffer
from membank.context import ContextBuilder, judge_memories

log = logging.getLogger("membank.audit")

CASES = ["operation still running", "clean write", "no-topic no-op", "similarity miss with list hit",
         "wrong-scope result", "stale revision", "deleted but still visible", "created but not fetchable"]


@dataclass(frozen=True)
class AuditResult:
    """One audit case: the verdict expected and the one given, why, and whether that is as expected."""

    case: str
    expected: str
    actual: str
    reason: str
    ok: bool


class Audit:
    """Runs the eight cases on a MemoryBank (long-term tier) and a SessionBuffer (short-term tier, may be None)."""

    def __init__(self, bank, buffer: SessionBuffer | None, *, run_id: str | None = None) -> None:
        """Prepare the canary scopes of this run (``run_id`` defaults to a random hex id)."""
        self.bank = bank
        self.buffer = buffer
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.scope = {"app_name": "membank-audit", "canary": self.run_id}
        self.other_scope = {"app_name": "membank-audit", "canary": f"{self.run_id}-other"}
        self.sessions: list[str] = []
        self.unfinished: list = []  # operations left running on purpose, finished before the purge
        self.builder = ContextBuilder(bank, buffer, top_k=3)
        self.buffer_note: str | None = None

    # -- helpers ------------------------------------------------------------------
    def _session(self, name: str) -> str:
        sid = f"audit-{self.run_id}-{name}"
        self.sessions.append(sid)
        return sid

    def _event(self, text: str) -> dict:
        return {"event_id": uuid.uuid4().hex, "author": "user", "text": text,
                "timestamp": datetime.now(timezone.utc)}

    def _embed(self) -> None:
        # Embeddings only: a generation job run here would finish the "still running" operation.
        self.bank.process_pending(generation=False)

    def _build(self, session_id: str, query: str, *, builder: ContextBuilder | None = None):
        ctx = (builder or self.builder).build(self.scope, session_id, query, 800)
        if ctx.degraded and self.buffer_note is None:
            self.buffer_note = ctx.degraded_reason
        return ctx

    def _generate(self, session_id: str, text: str, **kwargs):
        return self.bank.generate_memories(self.scope, session_id=session_id, events=[self._event(text)], **kwargs)

    # -- the cases ----------------------------------------------------------------
    def clean_write(self) -> tuple[str, str, bool]:
        """Expect allow: a fresh, embedded memory that retrieval returns. Returns (verdict, reason, checks passed)."""
        m = self.bank.create_memory(self.scope, "The canary's favourite tea is jasmine.")
        self._embed()
        sid = self._session("clean")
        if self.buffer is not None:
            try:
                self.buffer.append(self.scope, sid, {"role": "user", "text": "Which tea should I brew for the canary?"})
            except BufferUnavailableError as err:
                self.buffer_note = err.message
        v = self._build(sid, "Which tea does the canary like?").verdict_of(m.name)
        return (v.verdict, v.reason, True) if v else ("(not retrieved)", "retrieval missed a fresh, embedded memory",
                                                     False)

    def no_topic_no_op(self) -> tuple[str, str, bool]:
        """Expect allow: an operation whose statement matches no requested topic is done with 0 actions."""
        sid = self._session("noop")
        op = self._generate(sid, "I repaired the chain of my bicycle on Sunday.",
                            topics=[{"label": "FAVOURITE_FRUIT", "description": "the user's favourite fruit"}]
                            ).wait(60, process=True)
        ctx = self._build(sid, "What fruit does the user like?")
        waits = [v for v in ctx.verdicts if v.verdict == "wait"]
        verdict = "wait" if waits or ctx.pending_operations else "allow"
        reason = (f"operation done with {len(op.generated_memories)} actions"
                  f"{' (error ' + str(op.error) + ')' if op.error else ''}; "
                  f"{'nothing to wait for' if verdict == 'allow' else 'operations still pending'}")
        return verdict, reason, op.done and not op.error and not op.generated_memories

    def similarity_miss_with_list_hit(self) -> tuple[str, str, bool]:
        """Expect degrade: a memory this session generated, which similarity (top_k=1) misses and its scope lists."""
        sid = self._session("miss")
        op = self._generate(sid, "My locker combination at the climbing gym is 31-07-22.").wait(60, process=True)
        created = [g.memory.name for g in op.generated_memories if g.action == "CREATED"]
        if not created:
            return "(none)", f"the operation created no memory (error {op.error})", False
        self._embed()
        # top_k=1: the tea memory takes the only slot, so similarity misses what this session generated.
        ctx = self._build(sid, "Which tea does the canary like?",
                          builder=ContextBuilder(self.bank, self.buffer, top_k=1))
        v = ctx.verdict_of(created[0])
        return (v.verdict, v.reason, True) if v else ("(not considered)", "the generated memory was not expected",
                                                     False)

    def wrong_scope_result(self) -> tuple[str, str, bool]:
        """Expect block: a result of another scope handed to the boundary (a leaking cache or retriever)."""
        self.bank.create_memory(self.other_scope, "The other canary's favourite tea is oolong.")
        self._embed()
        leaked = self.bank.retrieve_memories(self.other_scope, "favourite tea", top_k=1)
        verdicts, usable = judge_memories(self.bank, self.scope, leaked)
        return verdicts[0].verdict, verdicts[0].reason, not usable

    def _retrieved_then(self, fact: str, query: str, change: Callable) -> tuple[str, str, bool]:
        m = self.bank.create_memory(self.scope, fact)
        self._embed()
        retrieved = [r for r in self.bank.retrieve_memories(self.scope, query, top_k=10) if r.memory.name == m.name]
        if not retrieved:
            return "(not retrieved)", "retrieval missed the memory before the change", False
        change(m)
        verdicts, usable = judge_memories(self.bank, self.scope, retrieved)
        return verdicts[0].verdict, verdicts[0].reason, True

    def stale_revision(self) -> tuple[str, str, bool]:
        """Expect degrade: the memory is updated between retrieval and the boundary; its current revision enters."""
        return self._retrieved_then("The canary's locker is number 12.", "canary locker number",
                                    lambda m: self.bank.update_memory(m.name, fact="The canary's locker is number 14."))

    def deleted_but_still_visible(self) -> tuple[str, str, bool]:
        """Expect block: the memory is deleted between retrieval and the boundary."""
        return self._retrieved_then("The canary's spare key is under the mat.", "where is the spare key",
                                    lambda m: self.bank.delete_memory(m.name))

    def created_but_not_fetchable(self) -> tuple[str, str, bool]:
        """Expect block: this session's operation created the memory (TTL 0.5 s); it expired before the boundary."""
        sid = self._session("unfetchable")
        op = self._generate(sid, "My parking spot today is number 7 in the north garage.", ttl=0.5).wait(
            60, process=True)
        created = [g.memory for g in op.generated_memories if g.action == "CREATED"]
        if not created:
            return "(none)", f"the operation created no memory (error {op.error})", False
        expire = created[0].expire_time
        if expire is not None:
            time.sleep(max(0.0, (expire - datetime.now(timezone.utc)).total_seconds()) + 0.05)
        v = self._build(sid, "Where is the parking spot?").verdict_of(created[0].name)
        return (v.verdict, v.reason, True) if v else ("(not considered)", "the created memory was not expected", False)

    def operation_still_running(self) -> tuple[str, str, bool]:
        """Expect wait: this session's operation is queued and no worker has run it."""
        sid = self._session("running")
        pending = self._generate(sid, "I moved my desk next to the window this morning.")
        self.unfinished.append(pending)
        ctx = self._build(sid, "Which tea does the canary like?")
        waits = [v for v in ctx.verdicts if v.verdict == "wait"]
        if waits:
            return "wait", waits[0].reason, str(pending.name) in ctx.pending_operations
        done = self.bank.get_operation(pending.name).done
        why = "the operation finished before the check (is a worker running?)" if done else "no wait verdict"
        return (ctx.verdicts[0].verdict if ctx.verdicts else "(none)"), why, False

    # -- running ------------------------------------------------------------------
    def run(self) -> list[AuditResult]:
        """Run every case (the still-running one last, so that no in-process worker finishes it) and clean up.

        Returns the results in the order of ``CASES``. A case that raises is
        reported with the error as its reason, not raised.
        """
        plan = {
            "clean write": ("allow", self.clean_write),
            "no-topic no-op": ("allow", self.no_topic_no_op),
            "similarity miss with list hit": ("degrade", self.similarity_miss_with_list_hit),
            "wrong-scope result": ("block", self.wrong_scope_result),
            "stale revision": ("degrade", self.stale_revision),
            "deleted but still visible": ("block", self.deleted_but_still_visible),
            "created but not fetchable": ("block", self.created_but_not_fetchable),
            "operation still running": ("wait", self.operation_still_running),
        }
        results = {}
        try:
            for case, (expected, fn) in plan.items():
                try:
                    actual, reason, checks = fn()
                except Exception as err:  # report, keep auditing the rest
                    log.exception("audit case %r failed", case)
                    actual, reason, checks = "(error)", f"{type(err).__name__}: {err}", False
                results[case] = AuditResult(case, expected, actual, reason, actual == expected and checks)
        finally:
            self.cleanup()
        return [results[c] for c in CASES]

    def cleanup(self) -> None:
        """Purge the canary memories of this run and delete its session-buffer keys.

        The expired canary of "created but not fetchable" is invisible to
        purge_memories, so expired memories are purged too
        (``purge_expired_memories``, the bank's own maintenance; it touches only
        memories no read can see any more).
        """
        for pending in self.unfinished:  # else a worker would write its memory after the purge
            try:
                pending.wait(60, process=True)
            except TimeoutError:
                log.warning("audit: canary operation %s did not finish; its memory may outlive the purge",
                            pending.name)
        for scope in (self.scope, self.other_scope):
            self.bank.purge_memories(scope, force=True)
        self.bank.purge_expired_memories()
        if self.buffer is not None:
            for sid in self.sessions:
                try:
                    self.buffer.delete(self.scope, sid)
                except BufferUnavailableError:
                    pass


@click.command("audit")
def audit() -> None:
    """Check the evidence verdicts with eight synthetic cases on a canary scope; exit 1 on an unexpected verdict.

    \b
    Uses the configured database (MEMBANK_DATABASE_URL or the embedded
    server), embedder (MEMBANK_EMBEDDER), generation provider, and Valkey
    (MEMBANK_VALKEY_URL or the embedded server). Runs the due generation and
    embedding jobs in this process, as `membank worker --once` would (a
    running worker may finish the "still running" canary operation first;
    the case then says so). Cleans up after itself.
    """
    from membank.buffer import valkey_url
    from membank.client import MemoryBank

    buffer = None
    try:
        buffer = SessionBuffer(valkey_url())
    except BufferUnavailableError as err:
        click.echo(f"warning: session buffer unavailable ({err.message}); contexts are built degraded", err=True)
    with MemoryBank(max_size=2) as bank:
        runner = Audit(bank, buffer)
        results = runner.run()
    if buffer is not None:
        buffer.close()
    width = max(len(r.case) for r in results)
    click.echo(f"{'case':{width}}  {'expected':8}  {'actual':8}  {'':2}  reason")
    for r in results:
        click.echo(f"{r.case:{width}}  {r.expected:8}  {r.actual:8}  {'ok' if r.ok else '!!'}  {r.reason}")
    if runner.buffer_note:
        click.echo(f"note: {runner.buffer_note}", err=True)
    failed = [r for r in results if not r.ok]
    click.echo(f"{len(results) - len(failed)} of {len(results)} cases as expected; canary scope "
               f"{json.dumps(runner.scope)} cleaned up")
    if failed:
        sys.exit(1)
