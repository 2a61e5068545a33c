"""Rolling-summary writers: ``summarize(previous_summary, turns) -> str``.

The buffer calls a summarizer with the summary so far and the oldest turns
of the window just before it trims them (summarize-before-trim), and stores
what it returns as the new rolling summary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from membank import errors
from membank.buffer.models import Turn
from membank.buffer.tokenizer import Tokenizer, get_tokenizer


@runtime_checkable
class Summarizer(Protocol):
    """Anything with ``summarize(previous_summary: str, turns: Sequence[Turn]) -> str``."""

    def summarize(self, previous_summary: str, turns: Sequence[Turn]) -> str:
        """Return the new rolling summary: ``previous_summary`` ('' at first) updated with ``turns`` (oldest first)."""
        ...


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# First person: the speaker telling something about themselves.
_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|I'll|[Mm]y|[Mm]e|[Mm]ine|[Ww]e|[Oo]ur|[Uu]s)\b")
_WORD = re.compile(r"\w+")


class RulesSummarizer:
    """The offline ``rules`` summarizer: an extractive, deterministic baseline, weaker than a model.

    Keeps the first-person, declarative sentences (not questions) of at
    least ``min_words`` words said by the given ``roles``, each as one line
    ``[YYYY-MM-DD] <author or role>: <sentence>`` dated by its turn's
    timestamp, appended to the previous summary's lines; exact repeats are
    dropped, and the oldest lines go first once the summary exceeds
    ``max_tokens`` tokens (cl100k_base). It paraphrases nothing and resolves
    no contradictions: that is what a model-backed summarizer is for.
    """

    def __init__(self, *, max_tokens: int = 256, min_words: int = 4, roles: Sequence[str] = ("user",),
                 tokenizer: Tokenizer | None = None) -> None:
        """``max_tokens`` (>= 1) bounds the summary; ``roles`` whose sentences are kept. Raises InvalidArgumentError."""
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise errors.invalid("max_tokens", f"must be a positive integer, not {max_tokens!r}", "e.g. 256")
        self.max_tokens = max_tokens
        self.min_words = min_words
        self.roles = tuple(roles)
        self.tokenizer = tokenizer or get_tokenizer()

    def informative(self, sentence: str) -> bool:
        """Return True for a first-person declarative sentence of at least ``min_words`` words."""
        return (not sentence.rstrip().endswith("?") and len(_WORD.findall(sentence)) >= self.min_words
                and _FIRST_PERSON.search(sentence) is not None)

    def summarize(self, previous_summary: str, turns: Sequence[Turn]) -> str:
        """Return ``previous_summary`` with the informative sentences of ``turns`` appended, within ``max_tokens``."""
        lines = [line for line in previous_summary.splitlines() if line.strip()]
        seen = set(lines)
        for turn in turns:
            if turn.role not in self.roles:
                continue
            for sentence in _SENTENCE.split(" ".join(turn.text.split())):
                line = f"[{turn.timestamp:%Y-%m-%d}] {turn.author or turn.role}: {sentence}"
                if self.informative(sentence) and line not in seen:
                    seen.add(line)
                    lines.append(line)
        # Drop whole lines, oldest first; a single line longer than the bound is cut.
        counts = [self.tokenizer.count(line) + 1 for line in lines]
        total = sum(counts)
        start = 0
        while total > self.max_tokens and start < len(lines) - 1:
            total -= counts[start]
            start += 1
        text = "\n".join(lines[start:])
        if self.tokenizer.count(text) > self.max_tokens:
            text = self.tokenizer.truncate(text, self.max_tokens)
        return text


def get_summarizer(spec: str | Summarizer | None = None) -> Summarizer:
    """Return a summarizer: a Summarizer as is, ``"rules"`` or None for RulesSummarizer().

    Raises InvalidArgumentError naming ``summarizer`` for an unknown spec.
    """
    if spec is None or spec == "rules":
        return RulesSummarizer()
    if isinstance(spec, Summarizer):
        return spec
    raise errors.invalid("summarizer", f"unknown summarizer {spec!r}",
                         'use "rules", or pass an object with summarize(previous_summary, turns) -> str')
