"""The main job: a real multi-session conversation turned into memories, then recalled.

``membank demo`` ingests the conversation shipped with the package
(``conversation.json``, written for membank) or a LoCoMo conversation file
(``--locomo FILE``), generates memories session by session (GenerateMemories
with the configured provider, ``rules`` by default), prints what was
CREATED / UPDATED / DELETED, and answers recall questions by showing the
retrieved memories with their scores.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).with_name("conversation.json")


@dataclass
class Session:
    """One conversation session: its id and its events (``{"event_id", "author", "text", "timestamp"}``)."""

    session_id: str
    events: list[dict[str, Any]]

    @property
    def start(self) -> datetime:
        """When the session's first event was said."""
        return datetime.fromisoformat(self.events[0]["timestamp"])


@dataclass
class Question:
    """A recall question, with the event ids that hold its answer when known (LoCoMo's evidence)."""

    text: str
    evidence: tuple[str, ...] = ()


@dataclass
class Conversation:
    """A multi-session conversation to learn from, the exact scope its memories go to, and questions."""

    title: str
    scope: dict[str, str]
    sessions: list[Session]
    questions: list[Question] = field(default_factory=list)

    @property
    def event_count(self) -> int:
        """How many events all sessions hold."""
        return sum(len(s.events) for s in self.sessions)


def load_shipped(path: Path = SHIPPED) -> Conversation:
    """Read the demo conversation shipped with membank (turns are one minute apart within a session)."""
    raw = json.loads(path.read_text())
    sessions = []
    for s in raw["sessions"]:
        start = datetime.fromisoformat(s["start"].replace("Z", "+00:00"))
        sessions.append(Session(s["id"], [
            {"event_id": f"{s['id']}-{i}", "author": author, "text": text,
             "timestamp": (start + timedelta(minutes=i)).isoformat()}
            for i, (author, text) in enumerate(s["turns"])]))
    return Conversation(raw["title"], raw["scope"], sessions, [Question(q) for q in raw["questions"]])


def _locomo_time(text: str) -> datetime:
    # "1:56 pm on 8 May, 2023": local time without a zone; read as UTC.
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def load_locomo(path: Path, max_questions: int = 5) -> Conversation:
    """Read a LoCoMo conversation file (Maharana et al., ACL 2024): sessions, turns (dia_id as event_id), QAs.

    Turns of a session are stamped one second apart from the session's date;
    an image a speaker shared is kept as ``[shares an image: caption]``. The
    first ``max_questions`` QAs with evidence (not adversarial, category 5)
    become the recall questions. Raises ValueError, saying what is wrong, for a file of another shape
    (not JSON, the upstream list of ten conversations, no sessions).
    """
    try:
        raw = json.loads(Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    if isinstance(raw, list):
        raise ValueError(f"{path}: holds a list of {len(raw)} conversations (the upstream locomo10.json); "
                         "pass one conversation per file (one element of that list)")
    conv = raw.get("conversation", raw) if isinstance(raw, dict) else None
    if not isinstance(conv, dict) or "speaker_a" not in conv or "session_1" not in conv:
        raise ValueError(f"{path}: not a LoCoMo conversation: expected "
                         '{"conversation": {"speaker_a", "speaker_b", "session_1_date_time", "session_1": [turns]}, '
                         '"qa": [...]}')
    sessions = []
    n = 1
    while f"session_{n}" in conv:
        start = _locomo_time(conv[f"session_{n}_date_time"])
        events = []
        for i, turn in enumerate(conv[f"session_{n}"]):
            text = turn["text"] + (f" [shares an image: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
            events.append({"event_id": turn["dia_id"], "author": turn["speaker"], "text": text,
                           "timestamp": (start + timedelta(seconds=i)).isoformat()})
        sessions.append(Session(f"session_{n}", events))
        n += 1
    questions = []
    for qa in raw.get("qa", []):
        evidence = tuple(e for entry in qa.get("evidence", []) for e in re.split(r"[;\s]+", entry)
                         if re.fullmatch(r"D\d+:\d+", e))
        if qa.get("category") != 5 and evidence and len(questions) < max_questions:
            questions.append(Question(qa["question"], evidence))
    sample = raw.get("sample_id") or Path(path).stem
    return Conversation(f"LoCoMo {sample}: {conv['speaker_a']} and {conv['speaker_b']}",
                        {"app_name": "membank-demo", "conversation": f"locomo-{sample}"}, sessions, questions)


@dataclass
class SessionResult:
    """What generating one session did: the operation and its duration in seconds."""

    session: Session
    operation: Any
    seconds: float


def generate_sessions(bank: Any, conversation: Conversation, *, run_id: str | None = None,
                      on_session: Callable[[SessionResult], None] | None = None,
                      timeout: float = 600.0) -> list[SessionResult]:
    """Append each session's events and generate memories from it, in order, in this process.

    ``run_id`` makes the operations of this run distinct from an earlier
    run's (GenerateMemories is idempotent per request); default a new uuid.
    Raises whatever ``generate_memories`` raises, and GenerationError at the
    first failed provider call; an operation that failed on invalid model
    output is returned with its ``error`` set.
    """
    import time

    run_id = run_id or uuid.uuid4().hex
    results = []
    for session in conversation.sessions:
        started = time.perf_counter()
        bank.append_events(conversation.scope, session.session_id, session.events)
        pending = bank.generate_memories(conversation.scope, session_id=session.session_id,
                                         request_id=f"demo-{run_id}-{session.session_id}")
        operation = pending.wait(timeout, process=True, fail_fast=True)
        result = SessionResult(session, operation, time.perf_counter() - started)
        results.append(result)
        if on_session:
            on_session(result)
    return results
