"""Turns, the rolling summary and a session's state, as small dataclasses."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from membank import errors

ROLES = ("user", "assistant", "system", "tool")
MAX_TEXT_CHARS = 262_144  # 256 Ki characters per turn


@dataclass(frozen=True)
class Turn:
    """One message of a live session.

    ``role`` is one of ``user``, ``assistant``, ``system``, ``tool``;
    ``author`` an optional display name (e.g. the speaker's name) used in
    place of the role when the turn is rendered; ``timestamp`` an aware
    datetime (UTC when read back). ``seq`` is the turn's sequence number in
    its session (1, 2, ...), assigned by the buffer when it is stored;
    ``tokens`` the token count of its rendered line; ``event_id`` identifies
    it for idempotent retries (a random one is given when omitted).
    """

    role: str
    text: str
    timestamp: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    event_id: str | None = None
    author: str | None = None
    seq: int | None = None
    tokens: int | None = None

    def render(self) -> str:
        """Return the turn as one prompt line: ``"<author or role>: <text>"``."""
        return f"{self.author or self.role}: {self.text}"

    def _body(self) -> str:
        return json.dumps({"role": self.role, "text": self.text, "timestamp": self.timestamp.isoformat(),
                           "event_id": self.event_id, "author": self.author}, ensure_ascii=False)

    @classmethod
    def _from_body(cls, body: str, seq: int, tokens: int) -> Turn:
        raw = json.loads(body)
        return cls(raw["role"], raw["text"], datetime.fromisoformat(raw["timestamp"]).astimezone(timezone.utc),
                   raw["event_id"], raw.get("author"), seq, tokens)


def coerce_turn(value: Turn | Mapping[str, Any], index: int) -> Turn:
    """Validate one turn given as a Turn or a mapping with role, text, optional timestamp, event_id, author.

    ``index`` names it in errors (``turns[2].role: ...``). A timestamp may be
    an aware datetime or ISO 8601 text with an offset. Raises
    InvalidArgumentError naming the field.
    """
    where = f"turns[{index}]"
    if isinstance(value, Turn):
        fields_ = {"role": value.role, "text": value.text, "timestamp": value.timestamp,
                   "event_id": value.event_id, "author": value.author}
    elif isinstance(value, Mapping):
        unknown = set(value) - {"role", "text", "timestamp", "event_id", "author"}
        if unknown:
            raise errors.invalid(f"{where}.{sorted(unknown)[0]}", "is not a turn field",
                                 "a turn has role, text, and optionally timestamp, event_id, author")
        fields_ = dict(value)
    else:
        raise errors.invalid(where, f"must be a Turn or a mapping, not {type(value).__name__}",
                             'e.g. {"role": "user", "text": "I moved to Lisbon"}')
    role = fields_.get("role")
    if role not in ROLES:
        raise errors.invalid(f"{where}.role", f"must be one of {', '.join(ROLES)}, not {role!r}",
                             "put a speaker's name in author and their role in role")
    text = fields_.get("text")
    if not isinstance(text, str) or not text.strip():
        raise errors.invalid(f"{where}.text", "must be a non-blank string", "give the message's text")
    if len(text) > MAX_TEXT_CHARS or "\x00" in text:
        raise errors.invalid(f"{where}.text", f"must be at most {MAX_TEXT_CHARS} characters, without NUL",
                             "split a long document into several turns, or store it elsewhere")
    stamp = fields_.get("timestamp")
    if stamp is None:
        stamp = datetime.now(timezone.utc)
    elif isinstance(stamp, str):
        try:
            stamp = datetime.fromisoformat(stamp)
        except ValueError:
            raise errors.invalid(f"{where}.timestamp", f"is not ISO 8601: {stamp!r}",
                                 'e.g. "2023-05-08T13:56:00+00:00"') from None
    if not isinstance(stamp, datetime):
        raise errors.invalid(f"{where}.timestamp", f"must be a datetime or ISO 8601 text, not {type(stamp).__name__}",
                             "pass datetime.now(timezone.utc)")
    if stamp.tzinfo is None or stamp.utcoffset() is None:
        raise errors.invalid(f"{where}.timestamp", "must be timezone-aware", "attach a zone, e.g. tzinfo=timezone.utc")
    for name in ("event_id", "author"):
        v = fields_.get(name)
        if v is not None and (not isinstance(v, str) or not v.strip() or len(v) > 200 or "\x00" in v):
            raise errors.invalid(f"{where}.{name}", "must be a non-blank string of at most 200 characters",
                                 "omit it, or give a short identifier")
    return Turn(role, text, stamp.astimezone(timezone.utc), fields_.get("event_id"), fields_.get("author"))


@dataclass(frozen=True)
class RollingSummary:
    """The rolling summary of a session: what was folded in from turns trimmed off the window.

    It covers the turns with sequence numbers ``first_seq``..``last_seq``
    (both 0 when nothing has been folded yet); ``version`` counts the
    summaries written; ``carried_from`` names the session whose summary it
    started from, if any; ``tokens`` is the token count of ``text``.
    """

    text: str = ""
    tokens: int = 0
    first_seq: int = 0
    last_seq: int = 0
    version: int = 0
    update_time: datetime | None = None
    carried_from: str | None = None

    @property
    def turn_count(self) -> int:
        """How many turns of this session the summary covers."""
        return self.last_seq - self.first_seq + 1 if self.last_seq else 0

    @classmethod
    def _from_hash(cls, raw: Mapping[str, str]) -> RollingSummary:
        if not raw:
            return cls()
        stamp = raw.get("update_time")
        return cls(raw.get("text", ""), int(raw.get("tokens", 0)), int(raw.get("first_seq", 0)),
                   int(raw.get("last_seq", 0)), int(raw.get("version", 0)),
                   datetime.fromisoformat(stamp) if stamp else None, raw.get("carried_from") or None)


@dataclass(frozen=True)
class SessionState:
    """A consistent snapshot of one session: its rolling summary and its window (oldest turn first)."""

    session_id: str
    summary: RollingSummary
    turns: list[Turn]
    window_tokens: int
    ttl_seconds: float | None

    def render_turns(self) -> str:
        """Return the window as prompt lines, oldest first."""
        return "\n".join(t.render() for t in self.turns)
