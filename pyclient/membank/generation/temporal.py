"""Relative time resolved against the moment something was said.

"I went to Paris last week", said on 2023-05-24, becomes "... in the week of
2023-05-17": every phrase is anchored to the event's own date, never to
today. Used by the offline ``rules`` provider; model providers get the same
rule in the prompt that SQL assembles.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3,
            "several": 3}


def _month(d: date, offset: int) -> str:
    index = d.year * 12 + d.month - 1 + offset
    return f"{MONTHS[index % 12]} {index // 12}"


def _saturday_before(d: date) -> date:
    return d - timedelta(days=(d.weekday() - 5) % 7 or 7)


def _amount(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def _ago(m: re.Match, d: date) -> str:
    n, unit = _amount(m.group(1)), m.group(2).lower()
    about = "around " if m.group(1).lower() in ("a few", "few", "several") else ""
    if unit == "day":
        return f"{about}on {d - timedelta(days=n)}"
    if unit == "week":
        return f"{about}in the week of {d - timedelta(weeks=n)}"
    if unit == "month":
        return f"{about}in {_month(d, -n)}"
    return f"{about}in {d.year - n}"


def _weekday(m: re.Match, d: date) -> str:
    target = WEEKDAYS.index(m.group(2).lower())
    if m.group(1).lower() == "last":
        return f"on {d - timedelta(days=(d.weekday() - target) % 7 or 7)}"
    return f"on {d + timedelta(days=(target - d.weekday()) % 7 or 7)}"


_NUM = r"(\d+|a couple of|couple of|a few|few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
_RULES: list[tuple[str, object]] = [
    (r"\b(?:the )?day before yesterday\b", lambda m, d: f"on {d - timedelta(days=2)}"),
    (r"\byesterday\b", lambda m, d: f"on {d - timedelta(days=1)}"),
    (r"\btomorrow\b", lambda m, d: f"on {d + timedelta(days=1)}"),
    (r"\b(?:today|tonight|this morning|this afternoon|this evening)\b", lambda m, d: f"on {d}"),
    (r"\blast weekend\b", lambda m, d: f"on the weekend of {_saturday_before(d)}"),
    (r"\b(?:this|next) weekend\b",
     lambda m, d: f"on the weekend of {d + timedelta(days=(5 - d.weekday()) % 7)}"),
    (r"\blast week\b", lambda m, d: f"in the week of {d - timedelta(weeks=1)}"),
    (r"\bthis week\b", lambda m, d: f"in the week of {d}"),
    (r"\bnext week\b", lambda m, d: f"in the week of {d + timedelta(weeks=1)}"),
    (r"\blast month\b", lambda m, d: f"in {_month(d, -1)}"),
    (r"\bthis month\b", lambda m, d: f"in {_month(d, 0)}"),
    (r"\bnext month\b", lambda m, d: f"in {_month(d, 1)}"),
    (r"\blast year\b", lambda m, d: f"in {d.year - 1}"),
    (r"\bthis year\b", lambda m, d: f"in {d.year}"),
    (r"\bnext year\b", lambda m, d: f"in {d.year + 1}"),
    (rf"\b{_NUM} (day|week|month|year)s? ago\b", _ago),
    (r"\b(last|next) (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", _weekday),
    (r"\b(?:currently|right now|at the moment|these days|nowadays)\b", lambda m, d: f"as of {d}"),
    (r"\b(?:recently|lately)\b", lambda m, d: f"shortly before {d}"),
    (r"\b(?:last|previous) (?:session|conversation|time we (?:talked|spoke|chatted))\b",
     lambda m, d: f"in the conversation before {d}"),
]
_COMPILED = [(re.compile(pattern, re.IGNORECASE), replace) for pattern, replace in _RULES]


def resolve_relative_time(text: str, said_on: date) -> str:
    """Replace relative time phrases in ``text`` by absolute dates anchored to ``said_on``.

    Args:
        text: one sentence, e.g. ``"Alice went to Paris last week."``.
        said_on: the calendar date (UTC) of the event the sentence comes from.

    Returns:
        The sentence with phrases replaced: ``yesterday`` → ``on 2023-05-23``,
        ``last week`` → ``in the week of 2023-05-17`` (seven days earlier),
        ``last month`` → ``in April 2023``, ``3 days ago`` → ``on 2023-05-21``,
        ``last Friday`` → ``on 2023-05-19``, ``currently`` → ``as of 2023-05-24``,
        ``last session`` → ``in the conversation before 2023-05-24``. Text with
        no such phrase is returned unchanged.
    """
    for pattern, replace in _COMPILED:
        text = pattern.sub(lambda m, r=replace: r(m, said_on), text)  # type: ignore[operator]
    return text
