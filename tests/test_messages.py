"""Chat messages in: bank.add(messages) takes OpenAI-style messages as mem0's add does (membank.add_messages)."""

from __future__ import annotations

from datetime import datetime, timezone

import anyio
import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import count_all_rows
from membank import InvalidArgumentError, MemoryBank
from conftest import connect_as as connect

A = {"user_id": "msg-a"}
B = {"user_id": "msg-b"}
STATEMENTS = ["I live in Lisbon.", "I am allergic to peanuts.", "I work as a night nurse.", "My sister is called Ana.",
              "I play the cello.", "My favourite colour is green.", "I have two cats.", "I am vegetarian.",
              "I drive a blue car.", "I was born in Porto."]
REPLIES = ["Noted.", "Thanks for telling me.", "Good to know.", "Got it.", "Lovely.", "Nice.", "Okay.", "Sure.",
           "Understood.", "I see."]


def twenty_messages() -> list[dict]:
    out = []
    for said, reply in zip(STATEMENTS, REPLIES):
        out += [{"role": "user", "content": said},
                {"role": "assistant", "content": [{"type": "text", "text": reply}]}]
    return out


@pytest.fixture
def bank(db_url, embedder):
    with MemoryBank(db_url, embedder=embedder, max_size=4) as b:
        yield b


def facts(bank, scope):
    return sorted(m.fact for m in bank.list_memories(scope).memories)


def test_twenty_messages_make_the_same_memories_as_the_equivalent_events_and_a_retry_makes_none(bank, conn):
    messages = twenty_messages()
    pending = bank.add(messages, scope=A)
    assert pending.added["appended"] == 20 and pending.added["messages"] == 20
    done = pending.wait(120, process=True)
    assert done.error is None
    now = datetime.now(timezone.utc)
    events = [{"event_id": f"e{i}", "author": m["role"],
               "text": m["content"] if isinstance(m["content"], str) else m["content"][0]["text"], "timestamp": now}
              for i, m in enumerate(messages)]
    bank.generate_memories(B, events=events).wait(120, process=True)
    assert facts(bank, A) == facts(bank, B) and len(facts(bank, A)) == 10
    before = count_all_rows(conn)
    again = bank.add(messages, scope=A)  # a retry of the same call
    assert again.name == pending.name and again.added["appended"] == 0
    assert again.added["event_ids"] == pending.added["event_ids"]
    bank.process_pending()
    assert count_all_rows(conn) == before and len(facts(bank, A)) == 10


@pytest.mark.parametrize(("message", "field"), [
    ({"role": "user"}, "messages[3].content"),
    ({"role": "user", "content": None}, "messages[3].content"),
    ({"role": "user", "content": 7}, "messages[3].content"),
    ({"role": "robot", "content": "hi"}, "messages[3].role"),
    ({"content": "hi"}, "messages[3].role"),
    ({"role": "user", "content": [{"type": "text"}]}, "messages[3].content"),
    ({"role": "user", "content": "hi", "timestamp": "yesterday"}, "messages[3].timestamp"),
    ({"role": "user", "content": "hi", "id": ""}, "messages[3].id"),
])
def test_a_malformed_message_is_refused_by_name_and_nothing_is_appended(bank, conn, message, field):
    before = count_all_rows(conn)
    with pytest.raises(InvalidArgumentError) as info:
        bank.add(twenty_messages()[:3] + [message], scope=A)
    assert info.value.message.startswith(field + ":") and info.value.hint
    assert count_all_rows(conn) == before


def test_parts_roles_ids_and_timestamps(bank, conn):
    messages = [
        {"role": "system", "content": "You are a helpful assistant. I am the system."},
        {"role": "user", "content": [{"type": "text", "text": "I live in Lisbon."},
                                     {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                                     {"type": "input_audio", "input_audio": {"data": "...", "format": "wav"}}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "content": "weather: sunny", "tool_call_id": "c1"},
        {"role": "user", "content": "I have a dog.", "id": "my-id", "timestamp": "2024-05-24T10:00:00+02:00"},
    ]
    t0 = conn.execute("select statement_timestamp() as t").fetchone()["t"]
    pending = bank.add(messages, scope=A, session_id="chat")
    assert (pending.added["skipped_parts"], pending.added["excluded_messages"]) == (2, 2)
    stored = bank.list_events(A, "chat")
    by_id = {e.event_id: e for e in stored}
    assert by_id["my-id"].event_time == datetime(2024, 5, 24, 8, 0, tzinfo=timezone.utc)
    filled = [e for e in stored if e.event_id != "my-id"]
    assert all(e.event_id.startswith("msg-") and e.event_time >= t0 for e in filled)
    assert [e.author for e in filled] == ["system", "user", "assistant", "tool"]
    assert by_id[pending.added["event_ids"][1]].text == "I live in Lisbon."
    source = conn.execute("select source_events from membank_private.operations where name = %s",
                          (pending.name,)).fetchone()["source_events"]
    assert [e["author"] for e in source] == ["user", "user"]  # system and tool kept out; assistant had no text
    asked = bank.add(messages, scope=B, session_id="chat", extract_roles=["user", "system", "tool"])
    source = conn.execute("select source_events from membank_private.operations where name = %s",
                          (asked.name,)).fetchone()["source_events"]
    assert sorted(e["author"] for e in source) == ["system", "tool", "user", "user"]


def test_sql_callers_get_the_same_mapping_as_the_writer(login, conn):  # noqa: F811
    _, url = login("membank_writer")
    with connect(url) as writer:
        row = writer.execute("select * from membank.add_messages(scope => %s, messages => %s)",
                             (Jsonb(A), Jsonb(twenty_messages()[:2]))).fetchone()
        assert row["appended"] == 2 and row["operation_name"]
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"^messages\[0\]\.content"):
            writer.execute("select * from membank.add_messages(scope => %s, messages => %s)",
                           (Jsonb(A), Jsonb([{"role": "user"}])))
    _, reader_url = login("membank_reader")
    with connect(reader_url) as reader, pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("select * from membank.add_messages(scope => %s, messages => %s)",
                       (Jsonb(A), Jsonb(twenty_messages()[:2])))


def test_mcp_add_messages(bank):
    from mcp import Client

    from membank.mcp_server import build_server

    async def main():
        async with Client(build_server(bank, scope=A)) as client:
            return (await client.call_tool("add_messages", {"messages": twenty_messages()[:4]})).structured_content

    result = anyio.run(main)
    assert result["done"] and result["appended"] == 4
    assert sorted(g["memory"]["fact"] for g in result["generated_memories"]) == [
        "The user is allergic to peanuts.", "The user lives in Lisbon."]
