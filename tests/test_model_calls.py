"""Model calls a user can trust: bounded in time, named in errors, honest exit codes, local model servers.

Wire stubs answer as the servers do (pytest-httpserver, as in
test_generation_providers.py): llama-cpp-python's server refusing
``json_schema`` with HTTP 500, llama.cpp's llama-server and Ollama taking
structured output as their docs describe it. A *black hole* is a local
server that accepts each connection and never answers.

No assertion depends on how fast the machine is: a black hole never
answers, so a call that ends at all was ended by its own timeout or
deadline; where the configured timeout must have reached the request, the
black hole reports how long the client held each connection, which must be
far below the 30 s default.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from click.testing import CliRunner
from werkzeug import Request, Response

from membank import InvalidArgumentError, MemoryBank, settings
from membank.cli import main
from membank.generation import GenerationError, get_provider
from membank.generation import openai_compat
from membank.generation.gemini import GeminiProvider
from membank.generation.openai_compat import OpenAICompatProvider
from test_generation_providers import EVENTS, EXTRACTED, SCOPE, Script, chat_completion

DEFAULT_TIMEOUT_S = settings.DEFAULT_MODEL_TIMEOUT_S
"""A model request's default timeout: a configured 2 s one must end a black-hole request long before it."""

MODEL_ENV = ("MEMBANK_PROVIDER", "MEMBANK_OPENAI_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
             settings.ENV_MODEL_TIMEOUT, settings.ENV_MODEL_RETRIES, settings.ENV_MODEL_ATTEMPTS,
             settings.ENV_RESPONSE_FORMAT)


@pytest.fixture(autouse=True)
def clean_model_env(monkeypatch):
    """No model setting leaks in from the environment, nor a remembered fallback from another test."""
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(openai_compat, "_fallbacks", {}, raising=False)


@pytest.fixture
def black_hole():
    """A local server that accepts every connection and never answers.

    Yields its /v1 URL, the accepted connections and ``held``: for each
    connection the client has closed, how many seconds it stayed open after
    it was accepted (read on the server's side, so the client's start-up,
    imports and embedder do not count).
    """
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    held: list[float] = []
    stop = threading.Event()

    def drain(conn: socket.socket, since: float) -> None:
        conn.settimeout(0.2)
        while not stop.is_set():
            try:
                if not conn.recv(65536):  # the client closed it
                    held.append(time.monotonic() - since)
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except (TimeoutError, OSError):
                continue
            accepted.append(conn)
            threading.Thread(target=drain, args=(conn, time.monotonic()), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/v1", accepted, held
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def _closed(held: list[float], n: int) -> list[float]:
    """Wait (up to a minute, a hang guard) until the client has closed ``n`` connections; their held times."""
    deadline = time.monotonic() + 60
    while len(held) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(held)


def _cli_env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MODEL_ENV}
    return {**env, "MEMBANK_DATABASE_URL": db_url, "PYTHONUNBUFFERED": "1", **extra}


def _membank(*args: str, env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "membank.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    return done, time.monotonic() - started


EVENTS_ARG = json.dumps(EVENTS)


# -- time bounds ----------------------------------------------------------------------------------------------
def test_the_default_worst_case_of_a_dead_endpoint_is_at_most_90_seconds():
    timeout, retries, attempts = settings.model_timeout(), settings.model_retries(), settings.model_attempts()
    assert (timeout, retries, attempts) == (30.0, 0, 2)
    assert settings.model_call_bound(timeout, retries, attempts) == 62.0 <= 90
    # The arithmetic the docs give: attempts x (retries + 1) x timeout, plus the pauses.
    assert settings.model_call_bound(5, 2, 3) == 3 * (3 * 5 + 0.5 + 1) + 2 + 4


def test_settings_share_one_syntax_and_name_what_is_wrong(monkeypatch):
    assert settings.seconds("45s", "x") == 45 and settings.seconds("500ms", "x") == 0.5
    assert settings.seconds("2m", "x") == 120 and settings.seconds("7", "x") == 7
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv(settings.ENV_MODEL_TIMEOUT, "2m")
    monkeypatch.setenv(settings.ENV_MODEL_RETRIES, "1")
    monkeypatch.setenv(settings.ENV_RESPONSE_FORMAT, "json_object")
    provider = get_provider("openai:m1")
    assert (provider.timeout, provider.max_retries, provider.response_format) == (120, 1, "json_object")
    assert get_provider("openai:m1", timeout="5s").timeout == 5
    for read, variable, value in ((settings.model_timeout, settings.ENV_MODEL_TIMEOUT, "soon"),
                                  (settings.model_attempts, settings.ENV_MODEL_ATTEMPTS, "9"),
                                  (settings.model_retries, settings.ENV_MODEL_RETRIES, "-1"),
                                  (settings.response_format, settings.ENV_RESPONSE_FORMAT, "yaml")):
        monkeypatch.setenv(variable, value)
        with pytest.raises(InvalidArgumentError) as info:
            read()
        assert info.value.argument == variable and value in info.value.message and info.value.hint
        monkeypatch.delenv(variable)
    result = CliRunner().invoke(main, ["generate", "--scope", "{}", "--fact", "x", "--model-timeout", "soon"])
    assert result.exit_code == 2 and "30d, 12h, 90m, 45s" in result.output  # the CLI's one duration syntax


def test_generate_on_a_black_hole_exits_2_within_its_configured_bound(black_hole, db_url):
    url, accepted, held = black_hole
    done, _ = _membank(
        "generate", "--scope", json.dumps(SCOPE), "--events", EVENTS_ARG, "--output", "json",
        env=_cli_env(db_url, MEMBANK_PROVIDER="openai:local-model", MEMBANK_OPENAI_BASE_URL=url,
                     MEMBANK_MODEL_TIMEOUT="2s", MEMBANK_MODEL_ATTEMPTS="2"),
        timeout=120)
    assert done.returncode == 2, done.stderr
    assert len(accepted) == 2  # one request per attempt, no retries by the SDK
    # The black hole never answers: only the client's own 2 s timeout ends each
    # attempt. Held far below the 30 s default, so the setting reached the call.
    assert all(seconds < DEFAULT_TIMEOUT_S / 2 for seconds in _closed(held, 2))
    [line, hint] = done.stderr.strip().splitlines()
    assert line.startswith("error: operation ") and "failed (MODEL_CALL_FAILED, 2 attempts)" in line
    assert f"openai/local-model at {url}: no answer within the timeout" in line
    assert hint.startswith("hint: the server took the request but did not answer in time")
    assert "MEMBANK_OPENAI_BASE_URL" in hint and "MEMBANK_MODEL_TIMEOUT (now 2 s)" in hint
    assert json.loads(done.stdout)["error"]["code"] == "MODEL_CALL_FAILED"


def test_wait_returns_by_its_deadline_while_a_provider_call_runs(black_hole, db_url, conn):
    url, accepted, _ = black_hole
    provider = OpenAICompatProvider("local-model", base_url=url, timeout=60)
    with MemoryBank(db_url, provider=provider) as bank:
        bank.generation_worker  # the embedder is loaded first: the deadline is about the provider call
        pending = bank.generate_memories(SCOPE, events=EVENTS)
        # The provider would wait 60 s on a server that never answers: only
        # wait()'s own deadline raises TimeoutError (the provider's would be a
        # GenerationError), so the type alone shows the deadline ended it.
        with pytest.raises(TimeoutError) as info:
            pending.wait(5, process=True)
        assert "abandoned" in str(info.value) and url in str(info.value)
        assert len(accepted) == 1
        # The claim was rolled back: the job is due again and the abandoned call was no attempt.
        job = conn.execute("select attempts, retry_time <= now() as due from membank_private.generation_jobs"
                           ).fetchone()
        assert job == {"attempts": 0, "due": True} and not pending.get().done


def test_a_gemini_black_hole_fails_within_the_timeout(black_hole):
    url, _, _ = black_hole
    provider = GeminiProvider(api_key="test-key", base_url=url.removesuffix("/v1"), timeout=2)
    # The black hole never answers: only the provider's own 2 s timeout ends the call.
    with pytest.raises(GenerationError) as info:
        provider.complete("hello", {"type": "object"})
    assert f"gemini/gemini-2.5-flash at {url.removesuffix('/v1')}: no answer within the timeout" in info.value.message
    assert info.value.retryable


def test_ctrl_c_ends_generate_promptly_while_a_call_runs(black_hole, db_url):
    url, accepted, _ = black_hole
    process = subprocess.Popen(
        [sys.executable, "-m", "membank.cli", "generate", "--scope", json.dumps(SCOPE), "--events", EVENTS_ARG],
        env=_cli_env(db_url, MEMBANK_PROVIDER="openai:local-model", MEMBANK_OPENAI_BASE_URL=url,
                     MEMBANK_MODEL_TIMEOUT="3600s"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Ctrl-C as on a terminal: a stage that .ci/run starts in the background inherits SIGINT ignored (a
        # non-interactive shell's `&`), and Python installs no KeyboardInterrupt handler over an ignored signal.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 600  # the CLI's start took over 60 s on 2 cores at load 11
        while not accepted and time.monotonic() < deadline:  # the request is in flight
            time.sleep(0.1)
        assert accepted, "the request never reached the black hole"
        process.send_signal(signal.SIGINT)
        # The model call may take an hour; ending within a sixth of that after Ctrl-C (a hang guard, not a speed
        # limit) shows SIGINT, not the timeout, ended it.
        _, stderr = process.communicate(timeout=600)
        assert process.returncode != 0, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- honest exits and errors --------------------------------------------------------------------------------
def _json_error(status: int, message: str) -> Response:
    return Response(json.dumps({"error": {"message": message, "type": "server_error", "code": status}}),
                    status=status, content_type="application/json")


@pytest.mark.parametrize("case", ["401", "500", "refused"])
def test_generate_exits_2_with_one_line_naming_the_endpoint(httpserver, db_url, case, monkeypatch):
    if case == "refused":
        with socket.create_server(("127.0.0.1", 0)) as closed:  # a port nobody listens on once closed
            url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    else:
        status = int(case)
        httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
            lambda request: _json_error(status, "Incorrect API key provided" if status == 401 else "boom"))
        url = httpserver.url_for("/v1")
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    monkeypatch.setenv("MEMBANK_OPENAI_BASE_URL", url)
    result = CliRunner().invoke(main, ["generate", "--scope", json.dumps(SCOPE), "--events", EVENTS_ARG,
                                       "--provider", "openai:local-model", "--model-attempts", "1",
                                       "--output", "json"])
    assert result.exit_code == 2, result.output
    [line, hint] = result.stderr.strip().splitlines()
    assert f"openai/local-model at {url}: " in line and line.startswith("error: operation ")
    cause = {"401": "HTTP 401: Incorrect API key provided", "500": "HTTP 500: boom",
             "refused": "cannot connect"}[case]
    assert cause in line
    assert hint.startswith("hint: ") and "MEMBANK_OPENAI_BASE_URL" in hint
    if case == "401":
        assert "set OPENAI_API_KEY" in hint  # none was sent
    assert json.loads(result.stdout)["error"]["attempts"] == 1


def test_a_missing_key_is_named_before_any_request(db_url, conn, monkeypatch):
    with pytest.raises(GenerationError) as info:
        OpenAICompatProvider("gpt-4o-mini")
    assert "https://api.openai.com/v1: no API key (OPENAI_API_KEY is unset)" in info.value.message
    assert "OPENAI_API_KEY" in info.value.hint and "MEMBANK_OPENAI_BASE_URL" in info.value.hint
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    result = CliRunner().invoke(main, ["generate", "--scope", json.dumps(SCOPE), "--events", EVENTS_ARG,
                                       "--provider", "openai:gpt-4o-mini"])
    assert result.exit_code == 2 and "no API key" in result.stderr
    assert conn.execute("select count(*) from membank_private.operations").fetchone()["count"] == 0


def test_demo_checks_the_provider_before_clearing_anything(httpserver, db_url, monkeypatch):
    from membank import demo as demo_job

    scope = demo_job.load_shipped().scope
    with MemoryBank(db_url) as bank:
        kept = bank.create_memory(scope, "A memory of an earlier demo run.")
    httpserver.expect_request("/v1/models", method="GET").respond_with_handler(
        lambda request: _json_error(401, "Incorrect API key provided"))
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    monkeypatch.setenv("MEMBANK_OPENAI_BASE_URL", httpserver.url_for("/v1"))
    result = CliRunner().invoke(main, ["demo", "--provider", "openai:local-model"])
    assert result.exit_code == 2, result.output
    assert f"openai/local-model at {httpserver.url_for('/v1')}: HTTP 401" in result.stderr
    assert "cleared" not in result.stdout
    with MemoryBank(db_url) as bank:
        assert [m.name for m in bank.iter_memories(scope)] == [kept.name]


# -- local model servers --------------------------------------------------------------------------------------
def llama_cpp_python(script: Script):
    """llama-cpp-python's server: response_format.type must be 'text' or 'json_object' (HTTP 500 otherwise)."""
    def handle(request: Request) -> Response:
        body = request.get_json()
        script.bodies.append(body)
        kind = (body.get("response_format") or {}).get("type", "text")
        if kind not in ("text", "json_object"):
            return _json_error(500, "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
                                    f"  Input should be 'text' or 'json_object' [type=literal_error, "
                                    f"input_value='{kind}', input_type=str]")
        return Response(json.dumps(chat_completion(script.reply_for(body["messages"][-1]["content"]))),
                        content_type="application/json")
    return handle


def test_a_server_refusing_json_schema_is_asked_once_more_with_json_object(httpserver, db_url, caplog):
    script = Script(EXTRACTED, json.dumps({"actions": [{"fact_index": 0, "action": "CREATE"},
                                                      {"fact_index": 1, "action": "CREATE"}]}))
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(llama_cpp_python(script))
    caplog.set_level(logging.WARNING, logger="membank.generation")
    for run in range(2):  # a second bank in the same process remembers the refusal
        provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"))
        with MemoryBank(db_url, provider=provider) as bank:
            op = bank.generate_memories({"user_id": f"u{run}"}, events=EVENTS).wait(30, process=True)
            assert op.error is None and len(op.generated_memories) == 2 and op.model_calls == 2
    kinds = [b["response_format"]["type"] for b in script.bodies]
    assert kinds == ["json_schema"] + ["json_object"] * 4  # exactly one refused request, never repeated
    assert all(b["response_format"]["schema"]["required"] in (["memories"], ["actions"]) for b in script.bodies[1:])
    assert all("valid against this JSON schema" in b["messages"][0]["content"] for b in script.bodies[1:])
    refusals = [r for r in caplog.records if "refused response_format json_schema" in r.getMessage()]
    assert len(refusals) == 1 and "Input should be 'text' or 'json_object'" in refusals[0].getMessage()


def test_a_5xx_that_says_the_request_is_invalid_is_permanent(httpserver, db_url):
    script = Script(EXTRACTED)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
        lambda request: (script.bodies.append(request.get_json()), _json_error(
            500, "1 validation error for CreateChatCompletionRequest\nmessages.0.role\n  Input should be "
                 "'system', 'user' or 'assistant'"))[1])
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), response_format="json_object")
    with MemoryBank(db_url, provider=provider, model_attempts=5) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error["code"] == "MODEL_CALL_FAILED" and op.error["attempts"] == 1
        assert "HTTP 500: 1 validation error" in op.error["message"]
        assert len(script.bodies) == 1 and list(bank.iter_memories(SCOPE)) == []


def llama_server(script: Script):
    """llama.cpp's llama-server: json_schema takes the schema from response_format.json_schema.schema."""
    def handle(request: Request) -> Response:
        body = request.get_json()
        script.bodies.append(body)
        response_format = body["response_format"]
        if response_format["type"] == "json_schema" and not isinstance(
                response_format.get("json_schema", {}).get("schema"), dict):
            return _json_error(400, "\"json_schema\" must hold a \"schema\"")
        reply = chat_completion(script.reply_for(body["messages"][-1]["content"]))
        reply["timings"] = {"prompt_n": 10, "predicted_n": 20}  # llama-server's extra field
        return Response(json.dumps(reply), content_type="application/json")
    return handle


def ollama(script: Script):
    """Ollama's OpenAI-compatible endpoint (v0.5+): response_format json_schema becomes its `format`."""
    def handle(request: Request) -> Response:
        body = request.get_json()
        script.bodies.append(body)
        if request.headers.get("Authorization") is None:
            return _json_error(401, "unauthorized")  # the SDK always sends one; Ollama ignores its value
        assert body["response_format"]["json_schema"]["schema"]["type"] == "object"
        reply = chat_completion(script.reply_for(body["messages"][-1]["content"]))
        reply["system_fingerprint"] = "fp_ollama"
        return Response(json.dumps(reply), content_type="application/json")
    return handle


@pytest.mark.parametrize("server", [llama_server, ollama], ids=["llama.cpp", "ollama"])
def test_local_servers_structured_output(httpserver, db_url, server):
    script = Script("```json\n" + EXTRACTED + "\n```",  # small models fence their JSON
                    json.dumps({"actions": [{"fact_index": 0, "action": "CREATE"},
                                            {"fact_index": 1, "action": "CREATE"}]}))
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(server(script))
    provider = OpenAICompatProvider("qwen2.5:0.5b", base_url=httpserver.url_for("/v1"))
    with MemoryBank(db_url, provider=provider) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
    assert op.error is None and len(op.generated_memories) == 2
    assert [b["response_format"]["type"] for b in script.bodies] == ["json_schema", "json_schema"]


@pytest.mark.parametrize("reply", [
    "Here is the JSON:\n```\n" + json.dumps(json.loads(EXTRACTED)["memories"]) + "\n```",
    "<think>The user moved; {\"memories\": []} would lose it.</think>\n" + EXTRACTED,
], ids=["bare array in a fence", "think block"])
def test_small_models_replies_parse_in_json_object_mode(httpserver, db_url, reply):
    script = Script(reply, json.dumps({"actions": []}))
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(llama_cpp_python(script))
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"), response_format="json_object")
    with MemoryBank(db_url, provider=provider) as bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
    assert op.error is None and len(op.generated_memories) == 2
    assert [b["response_format"]["type"] for b in script.bodies] == ["json_object", "json_object"]


def _replying(httpserver, db_url, extract: str, consolidate: str | None = None, finish: str = "stop"):
    script = Script(extract, consolidate)

    def handle(request: Request) -> Response:
        body = request.get_json()
        script.bodies.append(body)
        prompt = body["messages"][-1]["content"]
        reply = chat_completion(script.reply_for(prompt))
        # ``finish`` ends the last stage scripted: consolidation when there is one, else extraction.
        last = script.consolidate is None or not prompt.startswith("You extract")
        reply["choices"][0]["finish_reason"] = finish if last else "stop"
        return Response(json.dumps(reply), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    provider = OpenAICompatProvider("local-model", base_url=httpserver.url_for("/v1"))
    return script, MemoryBank(db_url, provider=provider, model_attempts=5)


def test_a_truncated_reply_is_refused_at_once_and_applies_nothing(httpserver, db_url):
    actions = json.dumps({"actions": [{"fact_index": 0, "action": "CREATE"}, {"fact_index": 1, "action": "CREATE"}]})
    script, bank = _replying(httpserver, db_url, EXTRACTED, actions[:40], finish="length")
    with bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error["code"] == "MODEL_CALL_FAILED" and op.error["attempts"] == 1
        assert "the reply was cut off at the token limit (finish_reason length)" in op.error["message"]
        assert op.generated_memories == [] and list(bank.iter_memories(SCOPE)) == []
    assert len(script.bodies) == 2  # extraction, then the one cut-off consolidation: not asked again


def test_an_empty_reply_is_refused_at_once_and_applies_nothing(httpserver, db_url):
    script, bank = _replying(httpserver, db_url, "")
    with bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error["code"] == "MODEL_CALL_FAILED" and op.error["attempts"] == 1
        assert "the reply is empty" in op.error["message"] and list(bank.iter_memories(SCOPE)) == []
    assert len(script.bodies) == 1


@pytest.mark.parametrize("action", ["UPDATE", "DELETE"])
def test_an_unknown_memory_name_is_rejected_and_nothing_of_it_applies(httpserver, db_url, action):
    with MemoryBank(db_url) as setup:
        rome = setup.create_memory(SCOPE, "The user lives in Rome.")
        setup.process_pending()
    unknown = str(uuid.uuid4())
    item = {"fact_index": 0, "action": action, "memory_name": unknown}
    if action == "UPDATE":
        item["fact"] = "The user lives in Lisbon."
    _, bank = _replying(httpserver, db_url, EXTRACTED, json.dumps({"actions": [item]}))
    with bank:
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(30, process=True)
        assert op.error is None
        [rejected] = op.rejected_items
        assert rejected["item"]["memory_name"] == unknown and "was not among the candidates" in rejected["reason"]
        # Fact 1 had no item and is created as it is; nothing of the rejected item applied.
        assert [(g.action, g.memory.fact) for g in op.generated_memories] == [
            ("CREATED", "The user likes green tea.")]
        assert bank.get_memory(rome.name).fact == "The user lives in Rome." and bank.get_memory(rome.name).revision == 1


# -- a real local model (opt-in) ------------------------------------------------------------------------------
LOCAL_URL = os.environ.get("MEMBANK_TEST_LOCAL_MODEL_URL")
LOCAL_MODEL = os.environ.get("MEMBANK_TEST_LOCAL_MODEL")


@pytest.mark.local_model
@pytest.mark.skipif(not (LOCAL_URL and LOCAL_MODEL),
                    reason="set MEMBANK_TEST_LOCAL_MODEL_URL and MEMBANK_TEST_LOCAL_MODEL (docs/testing.md)")
def test_generate_memories_against_a_real_local_server(db_url):
    provider = OpenAICompatProvider(LOCAL_MODEL, base_url=LOCAL_URL,
                                    timeout=os.environ.get("MEMBANK_TEST_LOCAL_MODEL_TIMEOUT", "10m"),
                                    response_format=os.environ.get("MEMBANK_TEST_LOCAL_RESPONSE_FORMAT"))
    with MemoryBank(db_url, provider=provider) as bank:
        started = time.monotonic()
        op = bank.generate_memories(SCOPE, events=EVENTS).wait(3600, process=True)
        seconds = time.monotonic() - started
        facts = [m.fact for m in bank.iter_memories(SCOPE)]
    print(f"\nlocal model {LOCAL_MODEL} at {LOCAL_URL}: {seconds:.1f} s, {op.model_calls} calls, "
          f"error {op.error}, rejected {len(op.rejected_items)}, facts {facts}")
    assert op.done and op.error is None, op.error
    assert any("Lisbon" in fact for fact in facts)
