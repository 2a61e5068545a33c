"""Scope ids computed client-side exactly as the SQL side computes them.

The database keys every row of a scope by ``md5(scope::jsonb::text)::uuid``
(the ``scope_id`` column). The session buffer lives in Valkey, where no SQL
runs, yet must be keyed by the same scope: ``scope_id`` reproduces
PostgreSQL's jsonb text form of a scope (keys ordered by byte length, then
bytes; ``{"k": "v", ...}``; strings escaped as ``escape_json`` does) and
hashes it the same way. ``tests/test_scope.py`` checks it against the
server.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from membank import errors

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json_string(value: str) -> str:
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def validate_scope(scope: Any, argument: str = "scope") -> dict[str, str]:
    """Check a scope as ``membank_private.validate_scope`` does; return it as a dict.

    Raises InvalidArgumentError naming ``argument``.
    """
    if not isinstance(scope, Mapping):
        raise errors.invalid(argument, f"must be a JSON object, got {type(scope).__name__}",
                             'pass an object of string keys to string values, e.g. {"user_id": "u1"}')
    if not scope:
        raise errors.invalid(argument, "must not be empty",
                             'a scope names whose memory this is, e.g. {"user_id": "u1"}')
    if len(scope) > 16:
        raise errors.invalid(argument, f"has {len(scope)} keys", "a scope has at most 16 keys")
    for key, value in scope.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or "\x00" in key:
            raise errors.invalid(argument, f"key {key!r} is not 1 to 128 characters",
                                 "scope keys are 1 to 128 characters")
        if not isinstance(value, str):
            raise errors.invalid(argument, f"value of key {key!r} must be a string, got {type(value).__name__}",
                                 "scope values are strings; nested objects, arrays, numbers and null are not allowed")
        if not 1 <= len(value) <= 1024 or "\x00" in value:
            raise errors.invalid(argument, f"value of key {key!r} has {len(value)} characters",
                                 "scope values are 1 to 1024 characters")
    return dict(scope)


def scope_text(scope: Mapping[str, str]) -> str:
    """Return PostgreSQL's text form of the scope as jsonb (``scope::jsonb::text``)."""
    scope = validate_scope(scope)
    ordered = sorted(scope.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
    return "{" + ", ".join(f"{_json_string(k)}: {_json_string(v)}" for k, v in ordered) + "}"


def scope_id(scope: Mapping[str, str]) -> str:
    """Return the scope's id, ``md5(scope::jsonb::text)::uuid`` as in the database, as text.

    Raises InvalidArgumentError naming ``scope``.
    """
    return str(uuid.UUID(hashlib.md5(scope_text(scope).encode()).hexdigest()))
