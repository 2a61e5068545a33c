"""No membank routine runs with its caller's search_path (CVE-2018-1058).

PostgreSQL resolves an unqualified function or operator through the
search_path in force, and picks the best-matching overload across every
schema on it: a role that can CREATE in a schema on another role's path can
plant ``#>>(jsonb, text)`` (better than pg_catalog's ``#>>(jsonb, text[])``
for an untyped literal) and have it run as that role. So every routine in
membank's schemas either:

- pins ``search_path`` in its definition (``set search_path to ...``), to
  ``pg_temp`` last and otherwise schemas in which no membank role and not
  PUBLIC may create objects; or
- is a procedure that commits, which PostgreSQL allows no SET clause: it
  pins the path in its body, as its first statement and again after every
  COMMIT or ROLLBACK, and its DECLARE section initialises nothing (so no
  expression runs before the pin); or
- is a named exception in ``UNPINNED``: an internal routine that must stay
  unpinned (e.g. an SQL function that must stay inlinable: a SET clause stops
  inlining), which no membank role and not PUBLIC may EXECUTE, so that only
  pinned callers reach it.

``test_every_routine_pins_its_search_path`` reads the catalog; the tests
below it plant each kind of violation and check that the rule names it.
"""

from __future__ import annotations

import re

import psycopg

# Routines allowed to run without a pinned search_path, by regprocedure, with the reason. Each must be
# callable by no membank role and not by PUBLIC (only pinned callers reach it). None is needed today.
UNPINNED: dict[str, str] = {}

ROLES = ("membank_reader", "membank_writer", "membank_worker", "membank_admin")
PIN = "perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);"

ROUTINES = """
select p.oid::regprocedure::text as routine, p.prokind as kind, p.prosecdef as definer, l.lanname as language,
       p.prosrc as body,
       (select substr(c, length('search_path=') + 1) from unnest(p.proconfig) as c
        where c like 'search_path=%%') as search_path,
       array(select r from unnest(%(roles)s::text[]) as r
             where has_function_privilege(r, p.oid, 'EXECUTE')) as callers,
       exists (select from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) as a
               where a.grantee = 0 and a.privilege_type = 'EXECUTE') as public_may_execute
from pg_proc as p
join pg_namespace as n on n.oid = p.pronamespace
join pg_language as l on l.oid = p.prolang
where (n.nspname = 'membank' or n.nspname like 'membank\\_%%')
  -- pgvector's own functions when membank installed it into membank_extensions
  and not exists (select from pg_depend as d where d.classid = 'pg_proc'::regclass and d.objid = p.oid
                  and d.deptype = 'e')
order by 1
"""


def _unsafe_schemas(conn: psycopg.Connection, path: str) -> list[str]:
    """Schemas of a pinned path in which a membank role or PUBLIC may create objects (or that do not exist)."""
    bad = []
    for schema in [s.strip().strip('"') for s in path.split(",")]:
        if schema in ("pg_catalog", "pg_temp"):
            continue
        row = conn.execute(
            "select n.oid, bool_or(has_schema_privilege(r, n.oid, 'CREATE')) as members,"
            " exists (select from aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) as a"
            "         where a.grantee = 0 and a.privilege_type = 'CREATE') as public"
            " from pg_namespace as n, unnest(%s::text[]) as r where n.nspname = %s group by n.oid",
            (list(ROLES), schema)).fetchone()
        if row is None or row["members"] or row["public"]:
            bad.append(schema)
    return bad


def _body_pins(body: str) -> str | None:
    """Why a procedure's body does not pin its path before any expression and after every COMMIT (None: it does)."""
    code = re.sub(r"--[^\n]*", "", body).lower()
    code = re.sub(r"\s+", " ", code).strip()
    match = re.match(r"(declare (?P<declare>.*?) )?begin (?P<rest>.*)$", code)
    if match is None:
        return "its body is not a block"
    if match["declare"] and re.search(r":=|\bdefault\b|=", match["declare"]):
        return "its DECLARE section initialises a variable (an expression before the pin)"
    if not match["rest"].startswith(PIN):
        return f"its first statement is not `{PIN}`"
    for end in re.finditer(r"\b(commit|rollback)( and (no )?chain)? ?;", match["rest"]):
        if not match["rest"][end.end():].lstrip().startswith(PIN):
            return f"`{end.group(0)}` is not followed by `{PIN}`"
    return None


def violations(conn: psycopg.Connection, unpinned: dict[str, str] = UNPINNED) -> dict[str, str]:
    """Every routine of membank's schemas that may run with a caller's search_path, with what is wrong."""
    found = {}
    rows = conn.execute(ROUTINES, {"roles": list(ROLES)}).fetchall()
    for r in rows:
        name = r["routine"]
        if r["search_path"] is not None:
            schemas = [s.strip() for s in r["search_path"].split(",")]
            if schemas[-1] != "pg_temp":
                found[name] = f"its pinned search_path {r['search_path']!r} does not end with pg_temp"
            elif bad := _unsafe_schemas(conn, r["search_path"]):
                found[name] = f"its pinned search_path holds {bad}, where a membank role or PUBLIC may create"
            elif name in unpinned:
                found[name] = "named in UNPINNED but pins its search_path: remove it from the list"
            continue
        if r["kind"] == "p" and r["language"] == "plpgsql" and not r["definer"]:
            why = _body_pins(r["body"])
            if why is None:
                if name in unpinned:
                    found[name] = "named in UNPINNED but pins its search_path in its body: remove it from the list"
                continue
            if name not in unpinned:
                found[name] = f"a procedure without a pinned search_path: {why}"
                continue
        if name not in unpinned:
            kind = "SECURITY DEFINER" if r["definer"] else "SECURITY INVOKER"
            found[name] = f"a {kind} routine without a pinned search_path, and not a named exception (UNPINNED)"
        elif r["definer"]:
            found[name] = "a named exception may not be SECURITY DEFINER"
        elif r["callers"] or r["public_may_execute"]:
            who = list(r["callers"]) + (["PUBLIC"] if r["public_may_execute"] else [])
            found[name] = f"a named exception that {who} may EXECUTE directly"
    for name in set(unpinned) - {r["routine"] for r in rows}:
        found[name] = "named in UNPINNED but no such routine"
    return found


def test_every_routine_pins_its_search_path(superuser):
    assert violations(superuser) == {}


def test_the_maintenance_procedures_pin_in_their_bodies(superuser):
    """The three procedures that commit are checked by their bodies (they can take no SET clause)."""
    rows = superuser.execute("select p.oid::regprocedure::text as r from pg_proc as p"
                             " join pg_namespace as n on n.oid = p.pronamespace"
                             " where n.nspname = 'membank' and p.prokind = 'p' and p.proconfig is null"
                             " order by 1").fetchall()
    assert [r["r"] for r in rows] == [
        "membank.apply_retention(integer,integer,jsonb)",
        "membank.purge_expired_memories(integer,integer,bigint)",
        "membank.purge_memories_in_batches(jsonb,jsonb,text[],integer,bigint)",
    ]


def test_an_unpinned_definer_is_named(superuser):
    superuser.execute("create function membank_private.test_unpinned_definer() returns int language sql"
                      " security definer as 'select 1'")
    superuser.execute("revoke all on function membank_private.test_unpinned_definer() from public")
    found = violations(superuser)
    assert list(found) == ["membank_private.test_unpinned_definer()"]
    assert "SECURITY DEFINER" in found["membank_private.test_unpinned_definer()"]
    # Named as an exception, a definer is still refused.
    found = violations(superuser, {"membank_private.test_unpinned_definer()": "test"})
    assert "may not be SECURITY DEFINER" in found["membank_private.test_unpinned_definer()"]


def test_an_unpinned_callable_invoker_is_named(superuser):
    superuser.execute("create function membank.test_unpinned() returns int language sql as 'select 1'")
    superuser.execute("revoke all on function membank.test_unpinned() from public")
    superuser.execute("grant execute on function membank.test_unpinned() to membank_reader")
    assert list(violations(superuser)) == ["membank.test_unpinned()"]
    # A named exception that a membank role (here every one: reader is in writer and admin) may call is refused.
    found = violations(superuser, {"membank.test_unpinned()": "test"})
    assert "may EXECUTE directly" in found["membank.test_unpinned()"]
    assert "membank_reader" in found["membank.test_unpinned()"]
    superuser.execute("revoke all on function membank.test_unpinned() from membank_reader")
    superuser.execute("grant execute on function membank.test_unpinned() to public")
    assert "PUBLIC" in violations(superuser, {"membank.test_unpinned()": "test"})["membank.test_unpinned()"]


def test_an_unnamed_internal_exception_is_named_and_a_named_one_passes(superuser):
    superuser.execute("create function membank_private.test_inlined(a int) returns int language sql"
                      " immutable as 'select a + 1'")
    superuser.execute("revoke all on function membank_private.test_inlined(integer) from public")
    assert "not a named exception" in violations(superuser)["membank_private.test_inlined(integer)"]
    assert violations(superuser, {"membank_private.test_inlined(integer)": "inlined into a pinned caller"}) == {}
    # A stale exception (the routine pins its path now, or is gone) is named too.
    superuser.execute("alter function membank_private.test_inlined(integer) set search_path = pg_catalog, pg_temp")
    assert "remove it" in violations(superuser, {"membank_private.test_inlined(integer)": "x"})[
        "membank_private.test_inlined(integer)"]
    assert "no such routine" in violations(superuser, {"membank_private.gone()": "x"})["membank_private.gone()"]


def test_a_pinned_path_must_be_closed_to_creation(superuser):
    superuser.execute("create schema membank_test_open")
    superuser.execute("grant create on schema membank_test_open to membank_writer")
    superuser.execute("create function membank_private.test_open() returns int language sql"
                      " set search_path = pg_catalog, membank_test_open, pg_temp as 'select 1'")
    superuser.execute("create function membank_private.test_temp_first() returns int language sql"
                      " set search_path = pg_temp, pg_catalog as 'select 1'")
    found = violations(superuser)
    assert "membank_test_open" in found["membank_private.test_open()"]
    assert "pg_temp" in found["membank_private.test_temp_first()"]


def test_a_procedure_that_commits_without_pinning_again_is_named(superuser):
    def procedure(body: str, declare: str = "_n integer;") -> str:
        superuser.execute("drop procedure if exists membank.test_batches()")
        superuser.execute(f"create procedure membank.test_batches() language plpgsql as $$ declare {declare}"
                          f" begin {body} end $$")
        return violations(superuser).get("membank.test_batches()")

    pin = PIN
    assert procedure(f"{pin} _n := 1; commit; {pin} _n := _n + 1;") is None
    assert procedure(f"{pin} _n := 1; commit; {pin} rollback; {pin}") is None
    assert "first statement" in procedure("_n := 1; commit;")
    assert "`commit;` is not followed" in procedure(f"{pin} _n := 1; commit; _n := _n + 1;")
    assert "`rollback;` is not followed" in procedure(f"{pin} rollback; _n := 1;")
    assert "DECLARE" in procedure(f"{pin} commit; {pin}", declare="_n integer := 1 + 1;")
    # A SQL-language procedure, or a definer one, cannot be body-pinned.
    superuser.execute("drop procedure membank.test_batches()")
    superuser.execute("create procedure membank.test_sql() language sql as 'select 1'")
    assert "not a named exception" in violations(superuser)["membank.test_sql()"]
