"""The CLI's table view (``--output table``): a compact text table of a command's JSON result, for people.

Lists of objects become one row per object with the columns a person reads
first (name, action, revision, score, relevance, fact, ...); a memory nested under
``memory`` is shown in its row. One object becomes ``key: value`` lines.
Long cells are cut with an ellipsis (never a page token, which the next
command takes); scripts should use ``--output json``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

# Columns shown for a list of objects, in this order, when the rows have them.
# A row's time is shown where it has no name (a revision's create_time is when it was written).
COLUMNS = ("name", "action", "revision", "score", "similarity", "relevance", "matched_signals", "done", "stage",
           "fact", "topics", "expire_time")
MAX_CELL = 60
MAX_FALLBACK_COLUMNS = 7


def cell(value: Any, width: int = MAX_CELL) -> str:
    """One value as short text: times to the second, floats to 4 places, lists of words joined by commas."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:.4f}"
    elif isinstance(value, datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        text = ",".join(value)
    elif isinstance(value, (dict, list, tuple)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _flatten(row: dict[str, Any]) -> dict[str, Any]:
    memory = row.get("memory")
    if isinstance(memory, dict):
        return {**memory, **{k: v for k, v in row.items() if k != "memory"}}
    return row


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    chosen = [c for c in COLUMNS if any(r.get(c) not in (None, [], "") for r in rows)]
    if not any("name" in r for r in rows) and any("create_time" in r for r in rows):
        chosen.append("create_time")
    if len(chosen) >= 2:
        return chosen
    keys: list[str] = []
    for r in rows:
        keys += [k for k, v in r.items() if k not in keys and not isinstance(v, (dict, list))]
    return keys[:MAX_FALLBACK_COLUMNS]


def rows_table(rows: list[dict[str, Any]]) -> str:
    """A list of objects as a table with a header line."""
    rows = [_flatten(r) for r in rows]
    columns = _columns(rows)
    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    return "\n".join(fmt.format(*line).rstrip() for line in [columns, *cells])


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def render(value: Any) -> str:
    """Render a command's result (what ``--output json`` prints) as text for a terminal."""
    if _is_rows(value):
        return rows_table(value)
    if isinstance(value, list):
        return "\n".join(cell(v, 200) for v in value) if value else "(none)"
    if not isinstance(value, dict):
        return cell(value, 200)
    lists = [k for k, v in value.items() if _is_rows(v)]
    width = max((len(k) for k in value), default=0)
    # A page token is copied into the next command, so it is never cut.
    lines = [f"{k:{width}}  {cell(v, 100 if not k.endswith('_token') else len(str(v))) if v != [] else '(none)'}"
             for k, v in value.items() if k not in lists and v is not None]
    for k in lists:
        lines += ["", f"{k}:", rows_table(value[k])]
    return "\n".join(lines).strip("\n")
