"""LoCoMo conversations from ../shared/data/locomo (benchmark data, never copied into the repo).

Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

DATA = Path(os.environ.get("MEMBANK_LOCOMO_DIR")
            or Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo")
"""The LoCoMo files: MEMBANK_LOCOMO_DIR, else ../shared/data/locomo beside the repository."""


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    time: datetime

    @property
    def fact(self) -> str:
        """The turn as one memory: "Speaker: text", plus " [image: caption]" when it has one."""
        return f"{self.speaker}: {self.text}" + (f" [image: {self.caption}]" if self.caption else "")

    caption: str | None = None


@dataclass(frozen=True)
class QA:
    question: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    qas: list[QA]


def _session_time(text: str) -> datetime:
    # "1:56 pm on 8 May, 2023": local time with no zone; read as UTC.
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def _evidence(raw: list[str]) -> tuple[str, ...]:
    ids = []
    for entry in raw:
        ids += [p for p in re.split(r"[;\s]+", entry) if re.fullmatch(r"D\d+:\d+", p)]
    return tuple(dict.fromkeys(ids))


def load(path: Path) -> Conversation:
    """Read one LoCoMo conversation file."""
    raw = json.loads(path.read_text())
    conv = raw.get("conversation", raw)
    turns = []
    n = 1
    while f"session_{n}_date_time" in conv:
        for t in conv.get(f"session_{n}", []):
            turns.append(Turn(t["dia_id"], t["speaker"], t["text"], n, _session_time(conv[f"session_{n}_date_time"]),
                              t.get("blip_caption")))
        n += 1
    qas = [QA(q["question"], q["category"], _evidence(q.get("evidence", []))) for q in raw["qa"]]
    return Conversation(path.stem, (conv["speaker_a"], conv["speaker_b"]), turns, qas)


def conversations() -> list[Conversation]:
    """All conversations present, in file order; raises FileNotFoundError when the data is absent."""
    files = sorted(DATA.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no LoCoMo files in {DATA}; set MEMBANK_LOCOMO_DIR to the folder that holds them")
    return [load(f) for f in files]


def observations(path: Path) -> list[tuple[str, str]]:
    """The annotated per-session observations of a conversation: (fact, dia_id) pairs, fact-length texts."""
    raw = json.loads(path.read_text())
    conv = raw.get("conversation", raw)
    out = []
    for key, value in conv.items():
        if key.endswith("_observation") and isinstance(value, dict):
            for items in value.values():
                out += [(fact, str(dia)) for fact, dia in items]
    return out
