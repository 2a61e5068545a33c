"""A memory's context (create_memory(context => ...)): searched by both legs, counted half in the text leg,
embedded with the fact, never returned, erased with the memory (neighbouring turns as context).
"""

import json
import math

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import count_all_rows
from membank import InvalidArgumentError

SCOPE = {"user_id": "ctx"}


def create(conn, fact, context=None, scope=SCOPE):
    return conn.execute("select (membank.create_memory(scope => %s, fact => %s, context => %s)).name as name",
                        (Jsonb(scope), fact, context)).fetchone()["name"]


def text_hits(conn, query, rerank_depth=400, scope=SCOPE):
    """(fact, text_rank) of the text-only hits, best first."""
    return [(r["fact"], r["text_rank"]) for r in conn.execute(
        "select fact, text_rank from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 20,"
        " rerank_depth => %s)", (Jsonb(scope), query, rerank_depth)).fetchall()]


def fill(conn, n=12):
    # Distractors so that IDF is positive and the seeking rule sees rare words.
    for i in range(n):
        create(conn, f"Note {i}: the weather report said it would be cloudy on day {i}.")


@pytest.mark.parametrize("rerank_depth", [400, 5], ids=["one-read-small-scope", "gin-index-path"])
def test_a_word_only_in_the_context_finds_the_fact_at_half_weight(conn, rerank_depth):
    """Both text paths (the small-scope scan and the GIN index path) find a memory by its context's words and
    score them at half the IDF of the same word in a fact."""
    fill(conn)
    create(conn, "Melanie: They loved the dinosaur bones!", context="Caroline: How did the kids like the museum?")
    create(conn, "Caroline: The museum was closed on Monday.")
    hits = text_hits(conn, "museum", rerank_depth)
    assert [f for f, _ in hits] == ["Caroline: The museum was closed on Monday.",
                                    "Melanie: They loved the dinosaur bones!"]
    n, df = 14, 2
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    assert hits[0][1] == pytest.approx(idf, rel=1e-5)
    assert hits[1][1] == pytest.approx(idf / 2, rel=1e-5)
    # "kids" is only in the context: the fact is still found, and only through it.
    assert [f for f, _ in text_hits(conn, "kids", rerank_depth)] == ["Melanie: They loved the dinosaur bones!"]


def test_without_a_context_the_score_is_the_plain_idf_sum(conn):
    fill(conn)
    create(conn, "Caroline: The museum was closed on Monday.")
    (fact, rank), = text_hits(conn, "museum monday")
    n = 13
    assert rank == pytest.approx(2 * math.log(1 + (n - 1 + 0.5) / 1.5), rel=1e-5)


def test_the_worker_embeds_the_context_then_the_fact(conn):
    with_context = create(conn, "Melanie: They loved it!", context="Caroline: How was the museum?")
    without = create(conn, "Caroline: The museum was closed.")
    with conn.transaction():
        jobs = {r["memory_name"]: r["memory_fact"]
                for r in conn.execute("select * from membank.claim_embedding_jobs(10)").fetchall()}
    assert jobs == {with_context: "Caroline: How was the museum?\nMelanie: They loved it!",
                    without: "Caroline: The museum was closed."}


def test_the_context_is_never_returned(conn):
    name = create(conn, "Melanie: They loved it!", context="Caroline: How was the zqmuseum trip?")
    outputs = [
        conn.execute("select to_jsonb(membank.get_memory(%s)) as j", (str(name),)).fetchone()["j"],
        [r["j"] for r in conn.execute("select to_jsonb(l) as j from membank.list_memories(%s) as l",
                                      (Jsonb(SCOPE),)).fetchall()],
        [r["j"] for r in conn.execute("select to_jsonb(r) as j from membank.retrieve_memories(scope => %s,"
                                      " query_text => 'zqmuseum') as r", (Jsonb(SCOPE),)).fetchall()],
        [r["j"] for r in conn.execute("select to_jsonb(r) as j from membank.list_revisions(%s) as r",
                                      (str(name),)).fetchall()],
    ]
    assert outputs[2], "the context's word must still find the memory"
    assert "zqmuseum" not in json.dumps(outputs).lower()


def test_an_update_keeps_the_context_and_requeues_the_embedding(conn):
    name = create(conn, "Melanie: They loved it!", context="Caroline: How was the museum?")
    conn.execute("delete from membank_private.embedding_jobs")
    conn.execute("select membank.update_memory(%s, fact => %s)", (str(name), "Melanie: They loved it a lot!"))
    with conn.transaction():
        (job,) = conn.execute("select * from membank.claim_embedding_jobs(10)").fetchall()
    assert job["memory_fact"] == "Caroline: How was the museum?\nMelanie: They loved it a lot!"
    assert [f for f, _ in text_hits(conn, "museum")] == ["Melanie: They loved it a lot!"]


def test_context_lexemes_are_counted_and_forgotten_with_the_memory(conn):
    name = create(conn, "Melanie: They loved it!", context="Caroline: How was the zqmuseum?")
    lexicon = "select doc_count from membank_private.scope_lexicon where lexeme = 'zqmuseum'"
    assert conn.execute(lexicon).fetchone()["doc_count"] == 1
    conn.execute("select membank.delete_memory(%s)", (str(name),))
    conn.execute("select membank.purge_memories(%s, force => true)", (Jsonb(SCOPE),))
    assert conn.execute(lexicon).fetchone() is None


@pytest.mark.parametrize("context, says", [
    ("", "context"),
    ("   ", "context"),
    ("x" * 32769, "32769 characters"),
])
def test_bad_context_is_refused_and_writes_nothing(conn, context, says):
    before = count_all_rows(conn)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        create(conn, "a fact", context=context)
    assert err.value.diag.message_primary.startswith("context:")
    assert says in err.value.diag.message_primary
    assert err.value.diag.message_hint
    assert count_all_rows(conn) == before


def test_client_and_cli_pass_the_context(bank, db_url, monkeypatch):
    from click.testing import CliRunner

    from membank.cli import main

    monkeypatch.setenv("MEMBANK_DATABASE_URL", db_url)
    with pytest.raises(InvalidArgumentError) as err:
        bank.create_memory(SCOPE, "a fact", context="")
    assert err.value.argument == "context"
    bank.create_memory(SCOPE, "Melanie: They loved it!", context="Caroline: How was the zqmuseum?")
    result = CliRunner().invoke(main, ["memories", "create", "--scope", json.dumps(SCOPE), "--fact", "Caroline: Closed on Monday.",
                                       "--context", "Melanie: Shall we try the zqmuseum?"])
    assert result.exit_code == 0, result.output
    assert "zqmuseum" not in result.output
    facts = [m.memory.fact for m in bank.retrieve_memories(SCOPE, "zqmuseum", top_k=5, use_embedding=False)]
    assert sorted(facts) == ["Caroline: Closed on Monday.", "Melanie: They loved it!"]
