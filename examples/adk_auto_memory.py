"""An ADK agent whose memories form by themselves: no memory call anywhere in its code.

The session service ingests every event into its session's IngestEvents
stream (``generation_trigger_config``); after two turns (four events: the
user's and the agent's) the ``event_count`` trigger starts GenerateMemories
in SQL. A worker carries the operation (here ``bank.process_pending()``
stands in for ``membank worker``), and in a new session the agent's
preload-memory tool finds the fact said in the first one. Offline: the
stand-in model of ``adk_agent.py`` and the ``rules`` provider.

    python examples/adk_auto_memory.py   # MEMBANK_DATABASE_URL, else the embedded server

Exit status 0 when the second session recalled the fact from the first.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from adk_agent import RecallingModel, say  # the stand-in model and the turn helper (same folder)
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.tools.preload_memory_tool import PreloadMemoryTool

from membank import MemoryBank
from membank.adk import MembankMemoryService, MembankSessionService

APP = "membank-adk-auto-memory"
EVERY_TWO_TURNS = {"generation_rule": {"event_count": 4}}


async def main() -> int:
    """Two sessions; return 0 when the second recalled what the first said, with no memory call in between."""
    user = f"user-{uuid.uuid4().hex[:8]}"
    with MemoryBank(provider="rules") as bank:
        sessions = MembankSessionService(bank, generation_trigger_config=EVERY_TWO_TURNS)
        agent = LlmAgent(name="assistant", model=RecallingModel(), instruction="You are a helpful assistant.",
                         tools=[PreloadMemoryTool()])
        runner = Runner(app_name=APP, agent=agent, session_service=sessions,
                        memory_service=MembankMemoryService(bank))

        print("session 1")
        first = await sessions.create_session(app_name=APP, user_id=user)
        await say(runner, user, first.id, "Hi! I am allergic to peanuts.")
        await say(runner, user, first.id, "I moved to Lisbon last week.")
        ran = bank.process_pending()  # what `membank worker` does in production
        print(f"worker: ran {ran} jobs")

        print("session 2")
        second = await sessions.create_session(app_name=APP, user_id=user)
        reply = await say(runner, user, second.id, "What am I allergic to?")
        bank.erase_scope({"app_name": APP, "user_id": user}, force=True)
    ok = "The user is allergic to peanuts." in reply
    print("recalled the fact from session 1" if ok else "did NOT recall the fact from session 1")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
