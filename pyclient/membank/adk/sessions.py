"""``MembankSessionService``: an ADK session service whose sessions, events and state live in membank.

A session of ``app_name``/``user_id`` is a membank session of the scope
``{"app_name": ..., "user_id": ...}`` (the memory service's scope), so
erasing that scope removes its sessions, events and state along with its
memories. Each method is one SQL call (``db/functions/112_sessions.sql``),
which does the work: state prefixes, the state-delta merge under the
session's row lock, idempotency on the event id. Events round-trip as
``Event.model_dump(mode="json")``.

Unlike ADK's ``DatabaseSessionService``, a second writer holding an older
copy of the session is not rejected as stale: its event lands after the
first, in commit order, and both state deltas merge (the issue's contract).

With ``generation_trigger_config`` memory forms by itself: every stored
event is also ingested into the IngestEvents stream of its session
(``membank.ingest_events``), so GenerateMemories starts when the trigger
fires (e.g. ``{"generation_rule": {"event_count": 6}}``: every three
turns) and the agent's code never calls the memory service to add a session.

Every method is async: with an ``AsyncMemoryBank`` the calls are awaited on
the event loop (no thread); with a ``MemoryBank`` they run in a thread
(``asyncio.to_thread``), so an agent's event loop never waits on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
    from google.adk.sessions.session import Session
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("membank.adk needs google-adk: pip install -e '.[adk]' in the membank checkout") from err

from membank import errors
from membank.adk._calls import call

if TYPE_CHECKING:
    from membank.async_client import AsyncMemoryBank
    from membank.client import MemoryBank


def to_session(data: dict[str, Any]) -> Session:
    """An ADK Session from the JSON that membank's session functions return."""
    return Session(id=data["id"], app_name=data["app_name"], user_id=data["user_id"], state=data["state"],
                   last_update_time=float(data["last_update_time"]),
                   events=[Event.model_validate(e) for e in data.get("events") or []])


def event_json(event: Event) -> dict[str, Any]:
    """An ADK Event as the JSON stored for it (``model_dump(mode="json")``: bytes as base64, no None fields)."""
    return event.model_dump(mode="json", exclude_none=True)


class MembankSessionService(BaseSessionService):
    """ADK session service backed by membank's SQL sessions (state merged in SQL, events stored once)."""

    def __init__(self, bank: MemoryBank | AsyncMemoryBank | None = None, *, url: str | None = None,
                 generation_trigger_config: dict[str, Any] | None = None) -> None:
        """Keep sessions in ``bank``: an AsyncMemoryBank (awaited directly), a MemoryBank (called in threads),
        or None for a new ``MemoryBank(url)`` (the URL defaults as MemoryBank's does).

        ``generation_trigger_config``: when given, each appended event is
        ingested into its session's IngestEvents stream with this trigger
        (``{"generation_rule": {"event_count": n}}``, ``{"idle_duration": "600s"}``
        or ``{"fixed_interval": "3600s"}``), so memories of the scope
        ``{"app_name", "user_id"}`` are generated without ``add_session_to_memory``
        (a ``membank worker`` runs the operations and the idle/interval sweep).
        """
        if bank is None:
            from membank.client import MemoryBank

            bank = MemoryBank(url)
        self.bank = bank
        self.generation_trigger_config = generation_trigger_config

    async def create_session(self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        """Create a session (random uuid id when none is given); raises AlreadyExistsError when the id is taken."""
        try:
            data = await call(self.bank, "create_session", app_name, user_id, session_id=session_id,
                                           state=state)
        except errors.MembankError as err:
            if err.sqlstate == "23505":
                raise AlreadyExistsError(f"Session with id {session_id} already exists.") from err
            raise
        return to_session(data)

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> Session | None:
        """Return the session with merged app/user/session state and its events (limited by ``config``), or None."""
        config = config or GetSessionConfig()
        data = await call(self.bank, "get_session", app_name, user_id, session_id,
                                       num_recent_events=config.num_recent_events,
                                       after_timestamp=config.after_timestamp)
        return None if data is None else to_session(data)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """List the sessions of a user (or of every user of the app) with merged state and no events."""
        rows = await call(self.bank, "list_sessions", app_name, user_id)
        return ListSessionsResponse(sessions=[to_session(r) for r in rows])

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session with its events and its own state (no-op when it does not exist)."""
        await call(self.bank, "delete_session", app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The state shared by the user's sessions, keys without ``user:``; {} when none."""
        return await call(self.bank, "get_user_state", app_name, user_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store the event once (by id) and merge its state delta in SQL; update ``session`` in place.

        Partial events are not stored. ``temp:`` keys reach ``session.state``
        for the current invocation but are never stored. Raises
        SessionNotFoundError when the session does not exist.
        """
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        try:
            result = await call(self.bank, "append_session_event", session.app_name, session.user_id,
                                             session.id, event_json(event))
        except errors.NotFoundError as err:
            raise SessionNotFoundError(f"Session {session.id} not found.") from err
        if result["appended"] or all(e.id != event.id for e in session.events):
            self._commit_event_to_session(session, event)
        if self.generation_trigger_config is not None and result["appended"]:
            # The event is already in the session: ingesting [] counts it against the trigger.
            await call(self.bank, "ingest_events", {"app_name": session.app_name, "user_id": session.user_id},
                                    [], stream_id=session.id,
                                    generation_trigger_config=self.generation_trigger_config)
        session.last_update_time = float(result["last_update_time"])
        return event
