"""Tool-permission tiers for agents: ask before a tool call runs.

The decision is SQL's (``membank.check_tool_permission``: exempt tools,
project rules, global rules, fail closed); this module carries the one tier
that lives in Valkey, **allow once**: an operator's approval of one exact
call, stored under

    <prefix>:perm:{<scope_id>:<session>}:<tool>:<sha256 of the canonical arguments>

with a TTL (default 300 s) and consumed atomically with GETDEL, so of any
number of concurrent checks of one grant exactly one is allowed by it.
``scope_id`` is the id SQL keys the scope's data by (``membank.scope_id``), so
erasure of a scope can find its grants; ``{scope_id:session}`` is the
Valkey Cluster hash tag. The canonical arguments are the call's arguments as
JSON with sorted keys and no spaces.

``PermissionGuard.check`` never raises: Valkey down, the database down, a bad
rule, all answer PROMPT_USER with the reason (a BLOCK rule still blocks).
``before_tool_callback`` has the shape Google ADK's
``Agent(before_tool_callback=...)`` expects: ``(tool, args, tool_context)``,
returning None to let the call run or ``{"status": "DENIED", ...}`` instead of
running it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from membank import errors
from membank.models import ToolDecision

log = logging.getLogger("membank.permissions")
DEFAULT_GRANT_TTL_SECONDS = 300


def canonical_arguments(args: Mapping[str, Any] | None) -> str:
    """The call's arguments as canonical JSON (sorted keys, no spaces, UTF-8 kept): what a grant is bound to."""
    return json.dumps(dict(args or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class PermissionGuard:
    """Asks membank before a tool call runs; carries allow-once grants in Valkey."""

    def __init__(self, bank: Any, *, valkey: Any = None, scope: Mapping[str, str] | None = None,
                 project_id: str | None = None, prefix: str = "membank",
                 grant_ttl_seconds: float = DEFAULT_GRANT_TTL_SECONDS, command_argument: str = "command") -> None:
        """Guard tool calls with ``bank`` (a ``MemoryBank``) and Valkey.

        ``valkey``: a redis/valkey client, a URL, or None for
        ``MEMBANK_VALKEY_URL`` / the embedded server (connected on first use).
        ``scope``: the scope every check uses (from the application's
        authenticated identity); without it ``before_tool_callback`` uses the
        ADK session's ``{"app_name", "user_id"}``. ``project_id``: the project
        whose rules decide first. ``command_argument``: the argument holding
        a shell command; other tools are checked on their canonical arguments.
        """
        if not isinstance(grant_ttl_seconds, (int, float)) or isinstance(grant_ttl_seconds, bool) \
                or grant_ttl_seconds <= 0:
            raise errors.invalid("grant_ttl_seconds", f"must be a positive number, not {grant_ttl_seconds!r}",
                                 "the default is 300 seconds")
        self.bank = bank
        self.scope = dict(scope) if scope is not None else None
        self.project_id = project_id
        self.prefix = prefix
        self.grant_ttl_seconds = float(grant_ttl_seconds)
        self.command_argument = command_argument
        self._valkey_spec = valkey
        self._valkey: Any = valkey if valkey is not None and not isinstance(valkey, str) else None
        self._scope_ids: dict[str, str] = {}

    @property
    def valkey(self) -> Any:
        """The Valkey client (connected on first use)."""
        if self._valkey is None:
            from membank.buffer.server import valkey_url
            from membank.buffer.session import _redis_client

            self._valkey = _redis_client(self._valkey_spec or valkey_url())
        return self._valkey

    def _scope_id(self, scope: Mapping[str, str]) -> str:
        key = json.dumps(dict(scope), sort_keys=True)
        if key not in self._scope_ids:
            self._scope_ids[key] = str(self.bank.scope_id(scope))
        return self._scope_ids[key]

    def grant_key(self, scope: Mapping[str, str], session_id: str, tool_name: str,
                  args: Mapping[str, Any] | None) -> str:
        """The Valkey key of an allow-once grant for this exact call (see the module's text)."""
        digest = hashlib.sha256(canonical_arguments(args).encode()).hexdigest()
        return (f"{quote(self.prefix, safe='')}:perm:{{{self._scope_id(scope)}:{quote(session_id, safe='')}}}:"
                f"{quote(tool_name, safe='')}:{digest}")

    def command_of(self, args: Mapping[str, Any] | None) -> str:
        """What the rules see: the shell command argument when there is one, else the canonical arguments."""
        value = (args or {}).get(self.command_argument)
        return value if isinstance(value, str) else canonical_arguments(args)

    def allow_once(self, scope: Mapping[str, str], session_id: str, tool_name: str,
                   args: Mapping[str, Any] | None, *, ttl_seconds: float | None = None) -> str:
        """Record an operator's approval of one exact call; the next check of it is ALLOWed once. Returns the key.

        The grant expires after ``ttl_seconds`` (default the guard's, 300 s).
        Raises BufferUnavailableError when Valkey cannot be reached (nothing stored).
        """
        from membank.buffer.server import BufferUnavailableError

        ttl = self.grant_ttl_seconds if ttl_seconds is None else ttl_seconds
        if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or ttl <= 0:
            raise errors.invalid("ttl_seconds", f"must be a positive number, not {ttl!r}", "e.g. 300")
        key = self.grant_key(scope, session_id, tool_name, args)
        try:
            self.valkey.set(key, "1", px=max(1, int(ttl * 1000)))
        except Exception as err:  # redis raises its own ConnectionError family
            raise BufferUnavailableError(f"allow_once: Valkey is unavailable ({err})",
                                         hint="start Valkey (membank valkey start) or check MEMBANK_VALKEY_URL") \
                from None
        return key

    def check(self, scope: Mapping[str, str], tool_name: str, args: Mapping[str, Any] | None = None, *,
              session_id: str | None = None, project_id: str | None = None, strict: bool = False) -> ToolDecision:
        """ALLOW, BLOCK or PROMPT_USER for one call, with the reason, rule and tier. Never raises unless ``strict``.

        With ``session_id``, a grant of this exact call (``allow_once``) is
        consumed first (GETDEL); the database then decides with it (a BLOCK
        rule still blocks). Without ``session_id`` no grant applies. Any
        failure (Valkey, the database) answers PROMPT_USER. ``strict``: a bad
        argument (an empty tool name, a malformed scope) raises
        InvalidArgumentError naming it instead (the CLI's errors are named).
        """
        project = project_id if project_id is not None else self.project_id
        consumed, grant_error = False, None
        try:
            if session_id is not None:
                consumed = self.valkey.getdel(self.grant_key(scope, session_id, tool_name, args)) is not None
        except Exception as err:
            grant_error = f"{type(err).__name__}: {err}"
            log.warning("allow-once grants unavailable: %s", grant_error)
        try:
            return self.bank.check_tool_permission(scope, tool_name, self.command_of(args), project_id=project,
                                                   session_id=session_id, allow_once=consumed,
                                                   grant_error=grant_error)
        except Exception as err:
            if strict and isinstance(err, errors.InvalidArgumentError):
                raise
            log.warning("permission check failed: %s", err)
            return ToolDecision("PROMPT_USER", f"the permission check failed ({type(err).__name__}: {err}); "
                                               "ask the user")

    def _scope_from(self, tool_context: Any) -> Mapping[str, str] | None:
        if self.scope is not None:
            return self.scope
        session = getattr(tool_context, "session", None)
        app, user = getattr(session, "app_name", None), getattr(session, "user_id", None)
        if app and user:
            return {"app_name": str(app), "user_id": str(user)}
        return None

    def before_tool_callback(self, tool: Any, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
        """Google ADK's ``before_tool_callback``: None lets the call run; a dict is returned instead of running it.

        The dict is ``{"status": "DENIED", "decision", "reason", "rule_id", "tier"}``;
        PROMPT_USER is denied too, with the reason to show the user.
        """
        name = getattr(tool, "name", None) or str(tool)
        scope = self._scope_from(tool_context)
        if scope is None:
            decision = ToolDecision("PROMPT_USER", "no scope: give PermissionGuard(scope=...) or run inside an ADK "
                                                   "session with app_name and user_id; ask the user")
        else:
            session = getattr(tool_context, "session", None)
            session_id = getattr(session, "id", None) or getattr(tool_context, "invocation_id", None)
            decision = self.check(scope, name, args, session_id=str(session_id) if session_id else None)
        if decision.decision == "ALLOW":
            return None
        return {"status": "DENIED", "decision": decision.decision, "reason": decision.reason,
                "rule_id": decision.rule_id, "tier": decision.tier}

    def callback(self) -> Callable[[Any, dict[str, Any], Any], dict[str, Any] | None]:
        """``before_tool_callback`` as a plain function, for ``Agent(before_tool_callback=guard.callback())``."""
        return self.before_tool_callback
