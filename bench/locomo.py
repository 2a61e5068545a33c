"""LoCoMo conversations from ../shared/data/locomo (benchmark data, never copied into the repo).

Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024.

Rules every bench shares:
- Evidence ids are normalised to the turns' form ``D<session>:<turn>``
  (zero padding ``D30:05`` -> ``D30:5``, a stray colon ``D:11:26`` ->
  ``D11:26``); an id that then matches no turn of the conversation
  (``D10:19`` in a session of 18 turns) is dropped. ``evidence_report``
  says how many of each.
- Scored QAs (``Conversation.scored_qas``) are those with evidence, and not
  of category 5 (adversarial: the answer is not in the conversation, so no
  evidence can be retrieved for it).
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


ADVERSARIAL = 5
"""LoCoMo's category of questions whose answer the conversation does not hold; never scored."""


@dataclass(frozen=True)
class Conversation:
    id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    qas: list[QA]
    normalised_evidence: int = 0
    """Evidence ids rewritten to the turns' form (zero padding, stray colon)."""
    dropped_evidence: tuple[str, ...] = ()
    """Evidence ids (normalised) that match no turn of the conversation, dropped from the QAs."""

    @property
    def scored_qas(self) -> list[QA]:
        """The QAs every bench scores: with evidence, not adversarial (category 5)."""
        return [q for q in self.qas if q.category != ADVERSARIAL and q.evidence]


def _session_time(text: str) -> datetime:
    # "1:56 pm on 8 May, 2023": local time with no zone; read as UTC.
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def _evidence(raw: list[str], turns: set[str], counts: dict[str, list]) -> tuple[str, ...]:
    """The QA's evidence ids in the turns' form, those that match no turn dropped (noted in ``counts``)."""
    ids = []
    for entry in raw:
        for part in re.split(r"[;\s]+", entry):
            m = re.fullmatch(r"D:?(\d+):(\d+)", part)
            if not m:
                continue  # "D", "": nothing to resolve
            dia = f"D{int(m[1])}:{int(m[2])}"
            if dia != part:
                counts["normalised"].append(part)
            if dia in turns:
                ids.append(dia)
            else:
                counts["dropped"].append(dia)
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
    dias = {t.dia_id for t in turns}
    counts: dict[str, list] = {"normalised": [], "dropped": []}
    qas = [QA(q["question"], q["category"], _evidence(q.get("evidence", []), dias, counts)) for q in raw["qa"]]
    return Conversation(path.stem, (conv["speaker_a"], conv["speaker_b"]), turns, qas,
                        len(counts["normalised"]), tuple(counts["dropped"]))


def evidence_report(conversations: list[Conversation]) -> str:
    """One line for a bench's output: how many evidence ids were normalised and dropped, and which were dropped."""
    dropped = [f"{c.id}:{d}" for c in conversations for d in c.dropped_evidence]
    skipped = sum(1 for c in conversations for q in c.qas if q.category == ADVERSARIAL)
    return (f"LoCoMo evidence: {sum(c.normalised_evidence for c in conversations)} ids normalised, "
            f"{len(dropped)} dropped (match no turn{': ' + ', '.join(dropped) if dropped else ''}); "
            f"{skipped} adversarial (category 5) QAs not scored")


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
