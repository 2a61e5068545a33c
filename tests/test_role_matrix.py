"""The role matrix: every public function, called as a login holding each membank role and as one holding none.

The expected outcome of each call comes from one place, the grant table in docs/operations.md's Roles section: a role may
call the functions of its row and of the rows of the roles it contains (``membank_writer`` ⊃ reader). A call the
table allows must not fail with 42501 (success, or another error such as 22023 or P0002, which is raised only after
the grant was passed); a call it does not allow must fail with 42501. Functions are enumerated from ``pg_proc``
(every overload), so a new function fails this test until the table names it, and a name in the table that is not a
function fails it too. Arguments are built from each signature: defaults where there are some, otherwise a value
from ARGUMENTS (by function and argument, or by argument name).
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import connect_as

README = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
ROLES = ["membank_reader", "membank_writer", "membank_worker", "membank_admin"]
SCOPE = '{"u": "1"}'

# Values for arguments without a default, by "function.argument" first, then by argument name. {memory},
# {operation}, {rule} and {tenant} are filled with objects the fixture creates.
ARGUMENTS = {
    "scope": SCOPE, "scopes": SCOPE, "scope_pattern": SCOPE, "name": "{memory}", "revision": "1",
    "session_id": "s", "app_name": "a", "user_id": "u", "role": "{tenant}", "model_id": "test/m", "dimension": "3",
    "memory_names": "{}", "fact_md5s": "{}", "embeddings": "{}", "error": "test", "job_id": "1", "reply": "{}",
    "query_text": "What is it and where is it?", "older_than": "0", "tool_name": "sh", "pattern": "ls .*",
    "decision": "ALLOW", "project_id": None, "command": "ls -l", "id": "{rule}", "tools": "{read}", "schema_id": "p",
    "memory_schema": '{"properties": {"x": {"type": "string"}}}',
    "events": '[{"event_id": "e", "author": "user", "text": "hi", "timestamp": "2023-05-24T10:00:00Z"}]',
    "event": '{"id": "e", "author": "user", "timestamp": 1}',
    "messages": '[{"role": "user", "content": "hi"}]',
    "generation_trigger_config": '{"generation_rule": {"event_count": 3}}',
    "create_memory.fact": "f",
    "import_memory.fact": "f",
    "get_operation.name": "{operation}",
    "purge_memories_in_batches.scope": '{"u": "nobody"}',
}


def grant_table() -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """(functions per role, roles each role contains) as the Roles table of docs/operations.md states them."""
    text = README.read_text()
    section = text[text.index("## Roles\n"):]
    section = section[:section.index("\n## ", 1)]
    functions, contains = {}, {}
    for line in section.splitlines():
        row = re.match(r"\| `(membank_\w+)`( ⊃ ([\w, ]+))? \| (.*?) \| [^|]* \|$", line)
        if row:
            role = row.group(1)
            contains[role] = [f"membank_{r.strip()}" for r in (row.group(3) or "").split(",") if r.strip()]
            functions[role] = set(re.findall(r"`(\w+)`", row.group(4)))
    assert set(functions) == set(ROLES), "the Roles table of docs/operations.md must have one row per membank role"
    return functions, contains


def allowed(role: str, functions: dict[str, set[str]], contains: dict[str, list[str]]) -> set[str]:
    names = set(functions[role])
    for inner in contains[role]:
        names |= allowed(inner, functions, contains)
    return names


def routines(conn) -> list[dict]:
    """Every function and procedure of schema membank: name, kind, input arguments (name, type, has default)."""
    rows = conn.execute("""
        select p.oid, p.proname as name, p.prokind as kind, p.pronargs as nargs, p.pronargdefaults as ndefaults,
               coalesce(p.proargnames, '{}') as argnames, coalesce(p.proargmodes, '{}') as argmodes,
               array(select format_type(t, null) from unnest(p.proargtypes) as t) as argtypes
        from pg_proc as p join pg_namespace as n on n.oid = p.pronamespace
        where n.nspname = 'membank' order by p.proname, p.oid""").fetchall()
    result = []
    for r in rows:
        names = [n for n, m in zip(r["argnames"], r["argmodes"] or ["i"] * len(r["argnames"]))
                 if m in ("i", "b")] if r["argmodes"] else list(r["argnames"])
        args = [(names[i], r["argtypes"][i], i >= r["nargs"] - r["ndefaults"]) for i in range(r["nargs"])]
        result.append({"name": r["name"], "kind": r["kind"], "args": args,
                       "signature": f"{r['name']}({', '.join(t for _, t, _ in args)})"})
    return result


def call_for(routine: dict, objects: dict[str, str]) -> tuple[str, list]:
    """The statement that calls routine with plausible arguments, and its parameters."""
    parts, params = [], []
    for arg, typ, has_default in routine["args"]:
        if has_default and f"{routine['name']}.{arg}" not in ARGUMENTS:
            continue
        key = f"{routine['name']}.{arg}" if f"{routine['name']}.{arg}" in ARGUMENTS else arg
        assert key in ARGUMENTS, f"{routine['signature']}: add a value for argument {arg} to ARGUMENTS"
        value = ARGUMENTS[key]
        if isinstance(value, str) and value.startswith("{") and value.endswith("}") and value[1:-1] in objects:
            value = objects[value[1:-1]]
        parts.append(f"{arg} => %s::{typ}")
        params.append(value)
    verb = "call" if routine["kind"] == "p" else "select * from"
    return f"{verb} membank.{routine['name']}({', '.join(parts)})", params


@pytest.fixture
def objects(superuser, login):
    """A memory, an operation, a tool rule, a profile schema, a session and a tenant role for the calls to name."""
    memory = superuser.execute("select (membank.create_memory(scope => %s::jsonb, fact => 'f')).name::text as n",
                               (SCOPE,)).fetchone()["n"]
    operation = superuser.execute("select membank.generate_memories(scope => %s::jsonb, facts => %s)::text as n",
                                  (SCOPE, Jsonb(["the user likes tea"]))).fetchone()["n"]
    rule = superuser.execute("select (membank.create_tool_rule(scope => %s::jsonb, tool_name => 'sh',"
                             " pattern => 'ls .*', decision => 'ALLOW')).id::text as n", (SCOPE,)).fetchone()["n"]
    superuser.execute("select membank.create_profile_schema('p', %s::jsonb)", (ARGUMENTS["memory_schema"],))
    superuser.execute("select membank.create_session(app_name => 'a', user_id => 'u', session_id => 's')")
    tenant, _ = login()
    return {"memory": memory, "operation": operation, "rule": rule, "tenant": tenant}


def outcome(c: psycopg.Connection, routine: dict, statement: str, params: list) -> str | None:
    """None when the call passed the grant check (success or another error), else the SQLSTATE 42501."""
    try:
        if routine["kind"] == "p":
            c.execute(statement, params)  # a procedure that commits runs outside a transaction block
        else:
            with c.transaction(force_rollback=True):  # every call leaves the bank as it found it
                c.execute(statement, params).fetchall()
    except psycopg.errors.InsufficientPrivilege:
        return "42501"
    except psycopg.Error:
        return None
    return None


def exact_outcome(c: psycopg.Connection, routine: dict, statement: str, params: list) -> str:
    """'ok' when the call succeeded, else its SQLSTATE (as outcome(), but every error is told apart)."""
    try:
        if routine["kind"] == "p":
            c.execute(statement, params)
        else:
            with c.transaction(force_rollback=True):
                c.execute(statement, params).fetchall()
    except psycopg.Error as err:
        return err.sqlstate or "?"
    return "ok"


def exact_matrix(connect, found: list[dict], objects: dict[str, str]) -> dict[str, str]:
    """{"role: signature": 'ok' or SQLSTATE} for every routine called as each membank role and as a login with
    none; ``connect(role or None)`` gives that login's autocommit connection (closed here)."""
    got = {}
    for who in [*ROLES, None]:
        with connect(who) as c:
            c.execute("set membank.lock_timeout = '2s'")
            for routine in found:
                statement, params = call_for(routine, objects)
                got[f"{who or 'no membank role'}: {routine['signature']}"] = exact_outcome(c, routine, statement,
                                                                                        params)
    return got


def test_the_role_matrix_matches_the_readme_grant_table(superuser, login, objects):
    functions, contains = grant_table()
    listed = set().union(*functions.values())
    found = routines(superuser)
    names = {r["name"] for r in found}
    assert names - listed == set(), "public functions missing from the Roles table of docs/operations.md"
    assert listed - names == set(), "names in the Roles table of docs/operations.md that are no membank function"
    logins = {role: login(role)[1] for role in ROLES}
    logins["no membank role"] = login()[1]
    mismatches = []
    for who, url in logins.items():
        may = allowed(who, functions, contains) if who in ROLES else set()
        with connect_as(url) as c:
            c.execute("set membank.lock_timeout = '2s'")
            for routine in found:
                statement, params = call_for(routine, objects)
                got = outcome(c, routine, statement, params)
                expected = None if routine["name"] in may else "42501"
                if got != expected:
                    mismatches.append(f"{who}: {routine['signature']}: expected {expected or 'no 42501'}, got"
                                      f" {got or 'no 42501'}")
    assert mismatches == []


def test_decompose_query_works_as_reader(login):
    _, url = login("membank_reader")
    with connect_as(url) as c:
        got = c.execute("select membank.decompose_query(query_text => 'Where does Maya work and where does she"
                        " live?') as q").fetchone()["q"]
    assert got == ["Where does Maya work?", "where does she live?"]
