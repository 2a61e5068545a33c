"""Tool-permission tiers: rules in SQL (tiers 2 and 3), allow-once grants in Valkey (tier 1), fail closed."""

from __future__ import annotations

import threading

import psycopg
import pytest

SCOPE = '{"user_id": "u1"}'


def rule(conn, pattern, decision, project_id=None, tool="run_shell", allow_operators=None):
    return conn.execute(
        "select (membank.create_tool_rule(scope => %s, tool_name => %s, pattern => %s, decision => %s,"
        " project_id => %s, allow_operators => coalesce(%s::text[], '{}'))).id",
        (SCOPE, tool, pattern, decision, project_id, allow_operators)).fetchone()["id"]


def check(conn, command, project_id="p1", tool="run_shell", **kwargs):
    extra = "".join(f", {k} => %({k})s" for k in kwargs)
    return conn.execute(
        "select * from membank.check_tool_permission(scope => %(scope)s, project_id => %(project)s,"
        f" tool_name => %(tool)s, command => %(command)s{extra})",
        {"scope": SCOPE, "project": project_id, "tool": tool, "command": command, **kwargs}).fetchone()


CHAINED = [
    "pytest -q; rm -rf /",
    "pytest -q && curl x | sh",
    "pytest $(rm -rf /)",
    "pytest `id`",
    "pytest -q\nrm -rf /",
    "pytest -q > /etc/passwd",
    "pytest -q || rm -rf /",
    "pytest -q & rm -rf /",
    "pytest -q < /etc/shadow",
]


@pytest.mark.parametrize("command", CHAINED)
def test_chaining_never_passes_an_allow_rule(conn, command):
    allow = rule(conn, "pytest .*", "ALLOW", project_id="p1")
    got = check(conn, command)
    assert got["decision"] != "ALLOW", (command, got)
    assert got["decision"] == "PROMPT_USER"
    assert check(conn, "pytest -q tests/") == {
        "decision": "ALLOW", "reason": f'rule {allow} allows "pytest -q tests/"', "rule_id": allow, "tier": 2}


def test_pattern_matches_the_whole_command_not_a_substring(conn):
    rule(conn, "pytest .*", "ALLOW", project_id="p1")
    assert check(conn, "rm -rf / ; pytest x")["decision"] == "PROMPT_USER"
    assert check(conn, "xpytest -q")["decision"] == "PROMPT_USER"
    assert check(conn, "echo pytest -q")["decision"] == "PROMPT_USER"


def test_explicitly_allowed_operator_passes_each_part_checked(conn):
    rule(conn, "pytest .*", "ALLOW", project_id="p1", allow_operators=["|"])
    tee = rule(conn, "tee [a-z./]+", "ALLOW", project_id="p1", allow_operators=["|"])
    assert check(conn, "pytest -q | tee log.txt")["decision"] == "ALLOW"
    # Every part is checked: an allowed operator does not carry an unknown part through.
    got = check(conn, "pytest -q | sh")
    assert (got["decision"], got["rule_id"]) == ("PROMPT_USER", None)
    assert '"sh"' in got["reason"]
    # An operator the rule does not list still stops it.
    got = check(conn, "pytest -q | tee log.txt; id")
    assert got["decision"] == "PROMPT_USER"
    assert check(conn, "tee log.txt; id")["reason"] == (
        f'rule {tee} would allow "tee log.txt", but the command uses ;, which it does not allow')
    # A BLOCK on any part wins over the ALLOW of the others.
    block = rule(conn, "rm .*", "BLOCK", project_id="p1")
    got = check(conn, "pytest -q | rm -rf x")
    assert (got["decision"], got["rule_id"], got["tier"]) == ("BLOCK", block, 2)


def test_block_beats_allow_within_a_tier(conn):
    block = rule(conn, "rm .*", "BLOCK", project_id="p1")
    rule(conn, ".*", "ALLOW", project_id="p1")
    got = check(conn, "rm -rf x")
    assert (got["decision"], got["rule_id"], got["tier"]) == ("BLOCK", block, 2)
    assert check(conn, "ls -la")["decision"] == "ALLOW"
    # The same in the global tier.
    gblock = rule(conn, "curl .*", "BLOCK")
    rule(conn, ".*", "ALLOW")
    got = check(conn, "curl x", project_id=None)
    assert (got["decision"], got["rule_id"], got["tier"]) == ("BLOCK", gblock, 3)


def test_project_rule_decides_before_global_rule(conn):
    gblock = rule(conn, "git push.*", "BLOCK")
    pallow = rule(conn, "git push origin main", "ALLOW", project_id="p1")
    # As documented: a project ALLOW beats a global BLOCK for the same part ...
    got = check(conn, "git push origin main")
    assert (got["decision"], got["rule_id"], got["tier"]) == ("ALLOW", pallow, 2)
    # ... only in that project, and only for what the project rule matches.
    got = check(conn, "git push origin main", project_id="p2")
    assert (got["decision"], got["rule_id"], got["tier"]) == ("BLOCK", gblock, 3)
    got = check(conn, "git push --force")
    assert (got["decision"], got["rule_id"], got["tier"]) == ("BLOCK", gblock, 3)
    # Without project_id only global rules apply.
    assert check(conn, "git push origin main", project_id=None)["decision"] == "BLOCK"


def test_no_rule_fails_closed(conn):
    got = check(conn, "ls")
    assert got == {"decision": "PROMPT_USER", "reason": 'no rule decides "ls"; ask the user', "rule_id": None,
                   "tier": None}
    rule(conn, "ls", "ALLOW", tool="other_tool")
    assert check(conn, "ls")["decision"] == "PROMPT_USER"   # a rule of another tool does not apply
    star = rule(conn, "ls", "ALLOW", tool="*")
    assert check(conn, "ls")["rule_id"] == star


def test_matching_is_case_sensitive(conn):
    rule(conn, "rm .*", "BLOCK", project_id="p1")
    rule(conn, "ls.*", "ALLOW", project_id="p1")
    assert check(conn, "RM -rf x")["decision"] == "PROMPT_USER"
    assert check(conn, "LS")["decision"] == "PROMPT_USER"
    assert check(conn, "rm -rf x")["decision"] == "BLOCK"


def test_patterns_are_validated_when_stored(conn):
    for pattern, words in [("(", "PostgreSQL refuses"), ("a" * 1001, "1 to 1000"), ("", "1 to 1000"),
                           ("(a+)\\1", "back-references")]:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            rule(conn, pattern, "ALLOW")
        assert err.value.diag.message_primary.startswith("pattern: ") and words in err.value.diag.message_primary
        assert err.value.diag.message_hint
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="decision: must be ALLOW or BLOCK"):
        rule(conn, "ls", "MAYBE")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="allow_operators: unknown operator"):
        rule(conn, "ls", "ALLOW", allow_operators=["&&&"])
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="tool_name"):
        rule(conn, "ls", "ALLOW", tool=" x")
    assert conn.execute("select count(*) from membank_private.tool_rules").fetchone()["count"] == 0


def test_catastrophic_pattern_is_decided_within_the_bound(conn):
    # The bound is the server's: the call fails (and the test with it) if it runs past it.
    conn.execute("set statement_timeout = '5s'")
    block = rule(conn, "(a+)+$", "BLOCK", project_id="p1")
    assert check(conn, "a" * 30 + "X")["decision"] == "PROMPT_USER"
    assert check(conn, "a" * 5000 + "X")["decision"] == "PROMPT_USER"
    assert check(conn, "a" * 30)["rule_id"] == block
    # A command past the bound is never evaluated: the user is asked.
    got = check(conn, "a" * 16385)
    assert got["decision"] == "PROMPT_USER" and "16384" in got["reason"]
    got = check(conn, ";".join(["a"] * 65))
    assert got["decision"] == "PROMPT_USER" and "at most 64" in got["reason"]


def test_exempt_tools_are_configurable_per_scope(conn):
    got = check(conn, None, tool="retrieve_memories")
    assert (got["decision"], got["tier"]) == ("ALLOW", 0)
    assert conn.execute("select membank.set_exempt_tools(scope => %s, tools => '{read_file}') as t",
                        (SCOPE,)).fetchone()["t"] == ["read_file"]
    assert check(conn, None, tool="retrieve_memories")["decision"] == "PROMPT_USER"
    assert check(conn, "x", tool="read_file")["decision"] == "ALLOW"
    # Another scope keeps the defaults.
    other = conn.execute("select * from membank.check_tool_permission(scope => '{\"user_id\": \"u2\"}',"
                         " project_id => null, tool_name => 'read_file', command => 'x')").fetchone()
    assert other["decision"] == "PROMPT_USER"
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"tools\[0\]: cannot exempt every tool"):
        conn.execute("select membank.set_exempt_tools(scope => %s, tools => '{*}')", (SCOPE,))
    conn.execute("select membank.set_exempt_tools(scope => %s, tools => null)", (SCOPE,))
    assert check(conn, None, tool="retrieve_memories")["decision"] == "ALLOW"


def test_allow_once_and_grant_errors_in_sql(conn):
    block = rule(conn, "rm .*", "BLOCK", project_id="p1")
    got = check(conn, "make", allow_once=True)
    assert (got["decision"], got["tier"]) == ("ALLOW", 1)
    assert check(conn, "rm -rf x", allow_once=True)["rule_id"] == block   # a grant never lifts a BLOCK
    got = check(conn, "make", grant_error="Connection refused")
    assert got["decision"] == "PROMPT_USER" and "Connection refused" in got["reason"]


def test_rule_crud_keeps_an_audit_log(conn):
    rid = rule(conn, "ls", "ALLOW", project_id="p1")
    row = conn.execute("select * from membank.update_tool_rule(id => %s, scope => %s, decision => 'BLOCK')",
                       (rid, SCOPE)).fetchone()
    assert (row["decision"], row["revision"], row["pattern"]) == ("BLOCK", 2, "ls")
    assert check(conn, "ls")["decision"] == "BLOCK"
    rows = conn.execute("select * from membank.list_tool_rules(scope => %s, project_id => 'p1')", (SCOPE,)).fetchall()
    assert [r["id"] for r in rows] == [rid]
    with pytest.raises(psycopg.errors.NoDataFound):
        conn.execute("select membank.delete_tool_rule(id => %s, scope => '{\"user_id\": \"u2\"}')", (rid,))
    conn.execute("select membank.delete_tool_rule(id => %s, scope => %s)", (rid, SCOPE))
    changes = conn.execute("select * from membank.list_tool_rule_changes(scope => %s)", (SCOPE,)).fetchall()
    assert [(c["action"], c["rule"]["decision"]) for c in changes] == [
        ("DELETED", "BLOCK"), ("UPDATED", "BLOCK"), ("CREATED", "ALLOW")]
    assert all(c["changed_by"] for c in changes)
    assert check(conn, "ls")["decision"] == "PROMPT_USER"
    decisions = conn.execute("select * from membank.list_tool_decisions(scope => %s)", (SCOPE,)).fetchall()
    assert [(d["decision"], d["rule_id"], d["tier"], d["command"]) for d in decisions] == [
        ("PROMPT_USER", None, None, "ls"), ("BLOCK", rid, 2, "ls")]
    assert decisions[0]["asked_by"]


def test_writer_asks_admin_sets_rules(conn):
    conn.execute("set role membank_writer")
    try:
        assert check(conn, "ls")["decision"] == "PROMPT_USER"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            rule(conn, ".*", "ALLOW")
    finally:
        conn.execute("reset role")
    conn.execute("set role membank_admin")
    try:
        rule(conn, "ls", "ALLOW")
    finally:
        conn.execute("reset role")


# -- PermissionGuard: allow-once in Valkey, the ADK callback ---------------------------------------------------

USER = {"user_id": "u1"}


@pytest.fixture
def guard(bank, valkey_url, buffer_prefix):
    from membank.permissions import PermissionGuard

    g = PermissionGuard(bank, valkey=valkey_url, prefix=buffer_prefix, project_id="p1")
    yield g
    g.valkey.close()


def test_allow_once_one_grant_eight_concurrent_checks(guard):
    args = {"command": "make deploy"}
    guard.allow_once(USER, "s1", "run_shell", args)
    barrier = threading.Barrier(8)
    results = []

    def ask():
        barrier.wait()
        results.append(guard.check(USER, "run_shell", args, session_id="s1"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.decision for r in results) == ["ALLOW"] + ["PROMPT_USER"] * 7
    assert [r.tier for r in results if r.decision == "ALLOW"] == [1]
    assert guard.check(USER, "run_shell", args, session_id="s1").decision == "PROMPT_USER"


def test_allow_once_is_bound_to_the_exact_call_and_expires(guard):
    args = {"command": "make deploy", "cwd": "/srv"}
    key = guard.allow_once(USER, "s1", "run_shell", args)
    # The TTL is read from the server, never raced.
    assert 0 < guard.valkey.pttl(key) <= 300_000
    assert guard.valkey.pttl(key) > 290_000
    # Another session, tool, argument or scope does not consume it.
    assert guard.check(USER, "run_shell", args, session_id="s2").decision == "PROMPT_USER"
    assert guard.check(USER, "other", args, session_id="s1").decision == "PROMPT_USER"
    assert guard.check(USER, "run_shell", {**args, "cwd": "/"}, session_id="s1").decision == "PROMPT_USER"
    assert guard.check({"user_id": "u2"}, "run_shell", args, session_id="s1").decision == "PROMPT_USER"
    assert guard.valkey.exists(key) == 1
    # Key order of the arguments does not matter (canonical JSON).
    assert key == guard.grant_key(USER, "s1", "run_shell", {"cwd": "/srv", "command": "make deploy"})
    assert "{" + str(guard.bank.scope_id(USER)) + ":s1}" in key
    # Past its TTL (expired explicitly on the server) the call is PROMPT_USER again.
    guard.valkey.pexpire(key, 1)
    guard.valkey.delete(key) if guard.valkey.exists(key) else None
    assert guard.check(USER, "run_shell", args, session_id="s1").decision == "PROMPT_USER"
    short = guard.allow_once(USER, "s1", "run_shell", args, ttl_seconds=5)
    assert 0 < guard.valkey.pttl(short) <= 5000


def test_allow_once_never_lifts_a_block(conn, guard):
    block = rule(conn, "rm .*", "BLOCK", project_id="p1")
    args = {"command": "rm -rf build"}
    guard.allow_once(USER, "s1", "run_shell", args)
    got = guard.check(USER, "run_shell", args, session_id="s1")
    assert (got.decision, got.rule_id, got.tier) == ("BLOCK", block, 2)


def test_valkey_down_is_prompt_user_without_exception(bank, own_valkey, conn):
    from membank.buffer import server
    from membank.permissions import PermissionGuard

    guard = PermissionGuard(bank, valkey=server.ensure_running(own_valkey), project_id="p1")
    rule(conn, "ls", "ALLOW", project_id="p1")
    assert guard.check(USER, "run_shell", {"command": "ls"}, session_id="s1").decision == "ALLOW"
    server.stop(own_valkey)
    got = guard.check(USER, "run_shell", {"command": "ls"}, session_id="s1")
    assert got.decision == "PROMPT_USER" and "allow-once store failed" in got.reason
    assert "Connection" in got.reason or "Error" in got.reason
    block = rule(conn, "rm .*", "BLOCK", project_id="p1")
    assert guard.check(USER, "run_shell", {"command": "rm x"}, session_id="s1").rule_id == block
    # The ADK callback denies, and raises nothing.
    denied = guard.before_tool_callback(_Tool("run_shell"), {"command": "ls"}, _Context("s1"))
    assert denied["status"] == "DENIED" and denied["decision"] == "PROMPT_USER"


def test_database_down_is_prompt_user(db_url, valkey_url, buffer_prefix):
    from membank import MemoryBank
    from membank.permissions import PermissionGuard

    bank = MemoryBank(db_url, max_size=1)
    guard = PermissionGuard(bank, valkey=valkey_url, prefix=buffer_prefix)
    bank.close()  # every connection gone
    got = guard.check(USER, "run_shell", {"command": "ls"}, session_id="s1")
    assert got.decision == "PROMPT_USER" and got.reason.startswith("the permission check failed (")
    assert guard.before_tool_callback(_Tool("run_shell"), {"command": "ls"}, _Context("s1"))["status"] == "DENIED"


class _Tool:
    """The part of google.adk.tools.BaseTool the callback reads: ``name``."""

    def __init__(self, name):
        self.name = name


class _Session:
    def __init__(self, session_id):
        self.id, self.app_name, self.user_id = session_id, "shop", "u1"


class _Context:
    """The part of google.adk.tools.ToolContext the callback reads: ``session`` (id, app_name, user_id)."""

    def __init__(self, session_id):
        self.session = _Session(session_id)
        self.invocation_id = "inv-1"


def test_before_tool_callback_has_adk_shape(conn, bank, valkey_url, buffer_prefix):
    from membank.permissions import PermissionGuard

    # ADK: before_tool_callback(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> Optional[dict]
    guard = PermissionGuard(bank, valkey=valkey_url, prefix=buffer_prefix)
    scope = '{"app_name": "shop", "user_id": "u1"}'
    conn.execute("select membank.create_tool_rule(scope => %s, tool_name => 'run_shell', pattern => 'pytest .*',"
                 " decision => 'ALLOW')", (scope,))
    callback = guard.callback()
    assert callback(_Tool("run_shell"), {"command": "pytest -q tests/"}, _Context("s1")) is None
    denied = callback(_Tool("run_shell"), {"command": "pytest -q; rm -rf /"}, _Context("s1"))
    assert denied["status"] == "DENIED" and denied["decision"] == "PROMPT_USER" and denied["reason"]
    assert callback(_Tool("load_memory"), {"query": "x"}, _Context("s1")) is None   # exempt by default
    guard.allow_once({"app_name": "shop", "user_id": "u1"}, "s1", "deploy", {"env": "prod"})
    assert callback(_Tool("deploy"), {"env": "prod"}, _Context("s1")) is None
    assert callback(_Tool("deploy"), {"env": "prod"}, _Context("s1"))["status"] == "DENIED"
    logged = conn.execute("select * from membank.list_tool_decisions(scope => %s)", (scope,)).fetchall()
    assert [d["decision"] for d in logged] == ["PROMPT_USER", "ALLOW", "ALLOW", "PROMPT_USER", "ALLOW"]
    assert logged[1]["tier"] == 1 and logged[1]["session_id"] == "s1" and logged[1]["command"] == '{"env":"prod"}'


def test_a_bad_stored_rule_is_prompt_user_with_the_reason(conn):
    rule(conn, ".*", "ALLOW", project_id="p1")
    # A rule written before validation existed (or by hand): it must never turn into ALLOW.
    conn.execute("insert into membank_private.tool_rules (scope_id, scope, project_id, tool_name, pattern, decision)"
                 " values (md5(%s::jsonb::text)::uuid, %s, 'p1', 'run_shell', '(', 'BLOCK')", (SCOPE, SCOPE))
    got = check(conn, "ls")
    assert got["decision"] == "PROMPT_USER" and got["reason"].startswith("the rules could not be evaluated (")
    assert "regular expression" in got["reason"]


def test_a_real_adk_agent_runs_the_allowed_call_and_never_the_denied_one(conn, bank, valkey_url, buffer_prefix):
    """The guard as a real google-adk LlmAgent's before_tool_callback: ADK runs the tool only when the callback
    returns None, and hands the DENIED dict back to the model as the tool's response."""
    import asyncio
    import json

    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools import FunctionTool
    from google.genai import types

    from membank.permissions import PermissionGuard

    ran = []

    def run_shell(command: str) -> dict:
        """Run a shell command (here: record it)."""
        ran.append(command)
        return {"status": "OK", "ran": command}

    class ShellModel(BaseLlm):
        """A stand-in model: calls run_shell with the user's text, then reports the tool's response as JSON."""

        model: str = "shell-stub"

        async def generate_content_async(self, llm_request, stream=False):
            last = llm_request.contents[-1].parts or []
            answers = [p.function_response.response for p in last if p.function_response]
            if answers:
                part = types.Part(text=json.dumps(answers[0]))
            else:
                part = types.Part(function_call=types.FunctionCall(name="run_shell", args={"command": last[0].text}))
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    guard = PermissionGuard(bank, valkey=valkey_url, prefix=buffer_prefix)
    conn.execute("select membank.create_tool_rule(scope => %s, tool_name => 'run_shell', pattern => 'pytest .*',"
                 " decision => 'ALLOW')", ('{"app_name": "shop", "user_id": "u1"}',))
    agent = LlmAgent(name="shell_agent", model=ShellModel(), tools=[FunctionTool(run_shell)],
                     before_tool_callback=guard.before_tool_callback)
    runner = Runner(app_name="shop", agent=agent, session_service=InMemorySessionService())

    async def say(text: str) -> dict:
        session = await runner.session_service.create_session(app_name="shop", user_id="u1")
        reply = ""
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for event in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                reply = "".join(p.text or "" for p in event.content.parts)
        return json.loads(reply)

    assert asyncio.run(say("pytest -q tests/")) == {"status": "OK", "ran": "pytest -q tests/"}
    denied = asyncio.run(say("pytest -q; rm -rf /"))
    assert denied["status"] == "DENIED" and denied["decision"] == "PROMPT_USER" and denied["reason"]
    assert ran == ["pytest -q tests/"]  # the chained command never reached the tool


def test_one_check_does_bounded_work_and_fails_closed_past_it(conn):
    """100 heavy rules x a 63-part chained command: asked, not matched (matching them would take seconds per call)."""
    heavy = "(" + "|".join(f"tool{i:03d} --flag-{i:03d} [a-z]+" for i in range(38)) + ")"
    assert len(heavy) <= 1000
    for _ in range(100):
        rule(conn, heavy, "ALLOW")
    command = " ; ".join(f"tool{i:03d} --flag-{i:03d} arg" for i in range(63))
    got = check(conn, command, project_id=None)
    assert got["decision"] == "PROMPT_USER" and got["rule_id"] is None
    assert "at most 1000000 are matched" in got["reason"], got["reason"]
    # Fail closed means asked: the work was refused, not the rules (a short command is still decided).
    assert check(conn, "tool001 --flag-001 arg", project_id=None)["decision"] == "ALLOW"
    work = conn.execute("select membank_private.permission_check_work(membank_private.shell_parts(%s), %s,"
                        " array(select r.pattern from membank_private.tool_rules as r)) as w", (command, command)
                        ).fetchone()["w"]
    assert work > conn.execute("select membank_private.permission_check_budget() as b").fetchone()["b"]
