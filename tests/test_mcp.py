"""membank mcp: the MCP SDK's own client over stdio and streamable HTTP; a fixed scope is never left."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from membank import MemoryBank
from membank.mcp_server import TOOLS, build_server
from test_readme import README, fences

U1 = {"user_id": "u1", "app_name": "mcp-test"}
OTHER = {"user_id": "u2", "app_name": "mcp-test"}
SERVED_TOOLS = {"create_memory", "retrieve_memories", "list_memories", "update_memory", "delete_memory",
         "generate_memories", "add_messages", "get_operation"}


def _env(db_url: str) -> dict[str, str]:
    return {**os.environ, "MEMBANK_DATABASE_URL": db_url}


async def _round_trip(client: Client, *, per_call_scope: dict | None = None) -> dict:
    extra = {"scope": per_call_scope} if per_call_scope else {}
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) >= SERVED_TOOLS
    created = await client.call_tool("create_memory", {"fact": "User is allergic to peanuts",
                                                       "topics": ["USER_PERSONAL_INFO"], **extra})
    assert not created.is_error, created.content
    memory = created.structured_content
    found = await client.call_tool("retrieve_memories", {"query": "peanut allergy", "top_k": 5, **extra})
    assert [r["fact"] for r in found.structured_content["results"]] == ["User is allergic to peanuts"]
    # A context is searched (a word only it holds finds the memory) and never returned.
    with_context = await client.call_tool("create_memory", {"fact": "Melanie: They loved it!",
                                                            "context": "Caroline: How was the zqmuseum?", **extra})
    assert not with_context.is_error and "zqmuseum" not in json.dumps(with_context.structured_content)
    by_context = await client.call_tool("retrieve_memories", {"query": "zqmuseum", "top_k": 5, **extra})
    assert [r["fact"] for r in by_context.structured_content["results"]] == ["Melanie: They loved it!"]
    assert "zqmuseum" not in json.dumps(by_context.structured_content)
    await client.call_tool("delete_memory", {"name": with_context.structured_content["name"], **extra})
    deleted = await client.call_tool("delete_memory", {"name": memory["name"], **extra})
    assert deleted.structured_content["deleted"] is True and deleted.structured_content["name"] == memory["name"]
    listed = await client.call_tool("list_memories", {**extra})
    assert listed.structured_content == {"memories": [], "next_page_token": None}
    return {"tools": tools, "memory": memory}


def test_stdio_lists_creates_retrieves_and_deletes(db_url):
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "membank.cli", "mcp", "--scope", json.dumps(U1)], env=_env(db_url))

    async def main():
        async with Client(params, read_timeout_seconds=120) as client:
            return await _round_trip(client)

    out = anyio.run(main)
    assert out["memory"]["scope"] == U1
    schema = out["tools"]["create_memory"].input_schema
    assert "scope" not in schema["properties"]  # fixed: no tool takes one
    assert schema["properties"]["fact"]["maxLength"] == 32768 and schema["properties"]["fact"]["minLength"] == 1
    assert out["tools"]["retrieve_memories"].input_schema["properties"]["top_k"]["maximum"] == 100
    assert out["tools"]["list_memories"].input_schema["properties"]["page_size"]["maximum"] == 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_per_call_scope(db_url):
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "membank.cli", "mcp", "--http", str(port)], env=_env(db_url),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:  # wait until it listens (no timing assumption: poll until up or dead)
            assert server.poll() is None, server.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "membank mcp --http never listened"
                time.sleep(0.1)

        async def main():
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120) as client:
                out = await _round_trip(client, per_call_scope=OTHER)
                missing = await client.call_tool("create_memory", {"fact": "no scope given"})
                return out, missing

        out, missing = anyio.run(main)
        assert out["memory"]["scope"] == OTHER
        assert "scope" in out["tools"]["create_memory"].input_schema["required"]
        assert missing.is_error and "scope" in missing.content[0].text
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_fixed_scope_is_never_left(db_url, embedder):
    with MemoryBank(db_url, embedder=embedder) as bank:
        theirs = bank.create_memory(OTHER, "Other user is allergic to peanuts")
        op = bank.generate_memories(OTHER, facts=["Other user lives in Oslo"])
        op.wait(60, process=True)
        bank.process_pending()
        server = build_server(bank, scope=U1)

        async def main():
            async with Client(server) as client:
                calls = {
                    "retrieve": await client.call_tool("retrieve_memories", {"query": "peanut", "scope": OTHER}),
                    "list": await client.call_tool("list_memories", {"scope": OTHER}),
                    "update": await client.call_tool("update_memory", {"name": str(theirs.name), "fact": "hacked",
                                                                       "scope": OTHER}),
                    "delete": await client.call_tool("delete_memory", {"name": str(theirs.name), "scope": OTHER}),
                    "operation": await client.call_tool("get_operation", {"name": str(op.name), "scope": OTHER}),
                    "create": await client.call_tool("create_memory", {"fact": "mine", "scope": OTHER}),
                }
                by_name = {
                    "update": await client.call_tool("update_memory", {"name": str(theirs.name), "fact": "hacked"}),
                    "delete": await client.call_tool("delete_memory", {"name": str(theirs.name)}),
                    "operation": await client.call_tool("get_operation", {"name": str(op.name)}),
                }
                return calls, by_name

        calls, by_name = anyio.run(main)
        for name, result in calls.items():  # a scope argument is refused by name: it never reaches SQL
            text = result.content[0].text
            assert result.is_error and "argument scope: not an argument of" in text, (name, text)
            assert "this server's scope is fixed" in text and "\n" not in text
        for name, result in by_name.items():  # the fixed scope: another scope's name is not found
            assert result.is_error and "[P0002]" in result.content[0].text, name
        assert bank.get_memory(theirs.name).fact == "Other user is allergic to peanuts"
        assert [m.fact for m in bank.list_memories(OTHER).memories] == [
            "Other user is allergic to peanuts", "Other user lives in Oslo"]
        assert bank.list_memories(U1).memories == []


def test_generate_memories_and_get_operation(db_url, embedder):
    events = [{"event_id": "e1", "author": "user", "text": "I moved to Lisbon last week.",
               "timestamp": "2023-05-24T10:00:00Z"}]
    with MemoryBank(db_url, embedder=embedder) as bank:
        async def main():
            async with Client(build_server(bank, scope=U1)) as client:
                op = (await client.call_tool("generate_memories", {"events": events})).structured_content
                again = (await client.call_tool("get_operation", {"name": op["name"]})).structured_content
                queued = (await client.call_tool("generate_memories", {"facts": ["User is vegetarian"],
                                                                       "wait": False})).structured_content
                return op, again, queued

        op, again, queued = anyio.run(main)
    assert op["done"] and [(g["action"], g["memory"]["fact"]) for g in op["generated_memories"]] == [
        ("CREATED", "The user moved to Lisbon in the week of 2023-05-17.")]
    assert again["name"] == op["name"] and again["done"]
    assert queued["done"] is False and queued["name"]


def test_every_tool_is_served_and_the_server_reports_membanks_version(bank):
    from membank import package_version

    async def main():
        async with Client(build_server(bank, scope=U1)) as client:
            return client.server_info, {t.name for t in (await client.list_tools()).tools}

    info, names = anyio.run(main)
    assert names == SERVED_TOOLS | {"retrieve_profiles"} == set(TOOLS)
    assert info.name == "membank" and info.version == package_version() and info.version[0].isdigit()


def test_a_refused_argument_is_one_line_naming_it(bank):
    async def main():
        async with Client(build_server(bank, scope=U1)) as client:
            return (await client.call_tool("retrieve_memories", {"query": "x", "top_k": 500}),
                    await client.call_tool("create_memory", {"fact": ""}))

    too_many, blank = anyio.run(main)
    for result, argument in ((too_many, "top_k"), (blank, "fact")):
        text = result.content[0].text
        assert result.is_error and f"argument {argument}: " in text, text
        assert "\n" not in text and "pydantic" not in text and "http" not in text, text


def test_an_empty_query_lists_the_scope_as_everywhere(bank):
    bank.create_memory(U1, "User is allergic to peanuts")
    bank.create_memory(U1, "User lives in Lisbon")

    async def main():
        async with Client(build_server(bank, scope=U1)) as client:
            return [await client.call_tool("retrieve_memories", args) for args in ({"query": ""}, {}, {"top_k": 1})]

    empty, omitted, one = anyio.run(main)
    facts = ["User is allergic to peanuts", "User lives in Lisbon"]
    assert [r["fact"] for r in empty.structured_content["results"]] == facts
    assert [r["fact"] for r in omitted.structured_content["results"]] == facts
    assert [r["fact"] for r in one.structured_content["results"]] == facts[:1]
    assert [r.memory.fact for r in bank.retrieve_memories(U1, "")] == facts  # the Python client: the same


def test_the_readme_config_starts_a_strict_server_that_refuses_stale_writes(db_url):
    """The README's MCP client configuration, as a client runs it: its command (the checkout's path put in), its args
    and only its env (the SDK passes no other MEMBANK_* variable); over stdio, every tool's schema is closed, an
    unknown argument is named, and a stale expected_revision is MB003 with nothing written."""
    block = next(body for language, _, body in fences(README) if language == "json" and "mcpServers" in body)
    config = json.loads(block)["mcpServers"]["membank"]
    assert os.path.isabs(config["command"]) and set(config["env"]) >= {"MEMBANK_DATABASE_URL"}
    assert all(k.startswith("MEMBANK_") for k in config["env"])
    command = config["command"].replace("/path/to/membank/.venv", sys.prefix)
    assert command != config["command"]
    env = {**config["env"], "MEMBANK_DATABASE_URL": db_url}
    scope = json.loads(config["args"][config["args"].index("--scope") + 1])
    params = StdioServerParameters(command=command, args=config["args"], env=env)

    async def main():
        async with Client(params, read_timeout_seconds=120) as client:
            tools = (await client.list_tools()).tools
            created = (await client.call_tool("create_memory", {"fact": "Alan takes his coffee black"})
                       ).structured_content
            first = await client.call_tool("update_memory", {"name": created["name"], "fact": "Alan takes milk",
                                                             "expected_revision": 1})
            stale = await client.call_tool("update_memory", {"name": created["name"], "fact": "Alan takes sugar",
                                                             "expected_revision": 1})
            stale_delete = await client.call_tool("delete_memory", {"name": created["name"],
                                                                    "expected_revision": 1})
            misspelt = await client.call_tool("update_memory", {"name": created["name"], "fact": "Alan takes tea",
                                                                "expected_revison": 2})
            return tools, created, first, stale, stale_delete, misspelt

    tools, created, first, stale, stale_delete, misspelt = anyio.run(main)
    assert {t.name for t in tools} == set(TOOLS)
    assert all(t.input_schema.get("additionalProperties") is False for t in tools)
    assert created["scope"] == scope
    assert not first.is_error and first.structured_content["revision"] == 2
    for result in (stale, stale_delete):
        assert result.is_error and "[MB003]" in result.content[0].text, result.content[0].text
    text = misspelt.content[0].text
    assert misspelt.is_error and "argument expected_revison: not an argument of update_memory" in text, text
    assert "expected_revision" in text.split("takes", 1)[1]
    with MemoryBank(db_url, max_size=1) as bank:  # the env's URL reached the server: the memory is in this database
        memory = bank.get_memory(created["name"])
    assert (memory.fact, memory.revision) == ("Alan takes milk", 2)
