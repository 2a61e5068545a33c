"""An ADK agent with membank as its session store and long-term memory, offline end to end.

Two sessions of one user: in the first the user mentions facts; the session
is added to memory (GenerateMemories with the offline ``rules`` provider);
in the second the agent's preload-memory tool searches membank with the
user's question and the model answers from what it recalls. Sessions,
events and state live in membank too (``MembankSessionService``).

google-adk ships no stub model in its wheel (its MockModel lives in its test
tree), so the model here is a small stand-in ``BaseLlm`` that answers with
the memories the preload-memory tool put into its instructions: no network,
no key. Swap in ``model="gemini-2.5-flash"`` for a real agent.

    .venv/bin/python examples/adk_agent.py        # MEMBANK_DATABASE_URL, else the embedded server

Needs the [adk] extra (``.venv/bin/pip install -e '.[adk]'`` in the checkout). Exit
status 0 when the second session recalled the fact from the first.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from membank import MemoryBank
from membank.adk import MembankMemoryService, MembankSessionService

APP = "membank-adk-example"


class RecallingModel(BaseLlm):
    """A stand-in model: answers with the "user: ..." memory lines that the preload-memory tool added."""

    model: str = "recalling-stub"

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        """Yield one response: the recalled facts, or an acknowledgement when nothing was recalled."""
        # The preload-memory tool puts the memories into the request (as a
        # <PAST_CONVERSATIONS> block in the contents or the system instruction,
        # depending on the ADK version); read both.
        texts = [str(llm_request.config.system_instruction or "")] if llm_request.config else []
        texts += [p.text for c in llm_request.contents for p in (c.parts or []) if p.text]
        blocks = re.findall(r"<PAST_CONVERSATIONS>(.*?)</PAST_CONVERSATIONS>", "\n".join(texts), flags=re.DOTALL)
        recalled = [line.removeprefix("user: ") for block in blocks[-1:] for line in block.splitlines()
                    if line.startswith("user: ")]
        text = ("From memory: " + " ".join(recalled)) if recalled else "Noted."
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


async def say(runner: Runner, user_id: str, session_id: str, text: str) -> str:
    """Send one user turn and return the agent's final reply."""
    reply = ""
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            reply = "".join(p.text or "" for p in event.content.parts)
    print(f"  user: {text}\n  agent: {reply}")
    return reply


async def main() -> int:
    """Run the two sessions; return 0 when the fact of the first was recalled in the second."""
    user = f"user-{uuid.uuid4().hex[:8]}"  # a fresh scope each run
    with MemoryBank(provider="rules") as bank:
        # Generation runs in this process here; in production leave the defaults
        # (fire-and-forget) and run `membank worker`.
        memory = MembankMemoryService(bank, wait_for_completion=True, process_in_process=True)
        sessions = MembankSessionService(bank)
        agent = LlmAgent(name="assistant", model=RecallingModel(), instruction="You are a helpful assistant.",
                         tools=[PreloadMemoryTool()])
        runner = Runner(app_name=APP, agent=agent, session_service=sessions, memory_service=memory)

        print("session 1")
        first = await sessions.create_session(app_name=APP, user_id=user)
        await say(runner, user, first.id, "Hi! I am allergic to peanuts.")
        await say(runner, user, first.id, "I moved to Lisbon last week.")
        await memory.add_session_to_memory(await sessions.get_session(app_name=APP, user_id=user,
                                                                      session_id=first.id))
        bank.process_pending()  # embed what generation did not (search works without it, text-only)

        print("session 2")
        second = await sessions.create_session(app_name=APP, user_id=user)
        reply = await say(runner, user, second.id, "What am I allergic to?")
        found = await memory.search_memory(app_name=APP, user_id=user, query="What am I allergic to?")
        print("search_memory:", [m.content.parts[0].text for m in found.memories])
        bank.purge_memories(memory.scope(APP, user), force=True)
        for session in (first, second):
            await sessions.delete_session(app_name=APP, user_id=user, session_id=session.id)
    ok = "The user is allergic to peanuts." in reply
    print("recalled the fact from session 1" if ok else "did NOT recall the fact from session 1")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
