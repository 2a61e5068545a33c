"""Per-scope partial HNSW indexes for big scopes: planned in SQL, built concurrently, used by retrieval."""

import math

import psycopg
import pytest
from psycopg.types.json import Jsonb

BIG, SMALL = {"user_id": "big"}, {"user_id": "small"}
PLAN = "select * from membank.scope_vector_index_plan(min_memories => %s)"


def angle_vector(i: int) -> str:
    """Unit vectors spread over a half circle, tilted by a third dimension: distinct cosine distances."""
    a = i * 0.05
    return f"[{math.cos(a)},{math.sin(a)},{0.1 * (i % 3)}]"


def add_memories(conn, scope, n, *, model="test/hnsw", dimension=3, start=0, vector=angle_vector):
    conn.execute("select membank.configure_embedding(model_id => %s, dimension => %s)", (model, dimension))
    for i in range(start, start + n):
        conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(scope), f"fact number {i}"))
    with conn.transaction():
        jobs = conn.execute("select * from membank.claim_embedding_jobs(1000)").fetchall()
        vectors = [vector(int(j["memory_fact"].rsplit(" ", 1)[1])) for j in jobs]
        conn.execute("select membank.store_embeddings(%s, %s, %s, %s, %s)",
                     (model, dimension, [str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs],
                      vectors))


def run_plan(conn, min_memories):
    plan = conn.execute(PLAN, (min_memories,)).fetchall()
    for step in plan:
        conn.execute(step["statement"])  # autocommit: CONCURRENTLY runs outside a transaction
    return plan


def index_scans(conn, index_name):
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute("select coalesce(sum(idx_scan), 0) as n from pg_stat_user_indexes where indexrelname = %s",
                       (index_name,)).fetchone()
    return row["n"]


# Scopes of at most rerank_depth memories are ranked exactly without any
# index; these scopes hold a few hundred, so a smaller depth sends the big one
# through its HNSW index.
RERANK_DEPTH = 100


def vector_list(conn, scope, query, top_k=10):
    return conn.execute(
        "select fact, distance from membank.retrieve_memories(scope => %s, query_embedding => %s::real[],"
        " top_k => %s, rerank_depth => %s)", (Jsonb(scope), query, top_k, RERANK_DEPTH)).fetchall()


def exact_list(conn, scope, query, top_k=10):
    conn.execute("select set_config('search_path', 'public, ' || extnamespace::regnamespace, false)"
                 " from pg_extension where extname = 'vector'")  # pgvector lives in membank_extensions
    return conn.execute(
        "select m.fact, e.embedding <=> %s::real[]::vector as distance from membank_private.memory_embeddings e"
        " join membank_private.memories m using (name) where m.scope = %s"
        " and (m.expire_time is null or m.expire_time > now()) order by 2, m.fact collate \"C\", m.name limit %s",
        (query, Jsonb(scope), top_k)).fetchall()


def test_plan_builds_an_index_for_big_scopes_only_and_retrieval_uses_it(conn):
    add_memories(conn, BIG, 240)
    add_memories(conn, SMALL, 30, start=1000)
    plan = conn.execute(PLAN, (200,)).fetchall()
    assert [(p["action"], p["memories"]) for p in plan] == [("create", 240)]
    assert "create index concurrently" in plan[0]["statement"]
    run_plan(conn, 200)
    name = plan[0]["index_name"]
    assert conn.execute("select membank_private.scope_hnsw_ready(md5(%s::jsonb::text)::uuid, 3) as r",
                        (Jsonb(BIG),)).fetchone()["r"]
    assert conn.execute(PLAN, (200,)).fetchall() == []  # up to date: nothing to run

    before = index_scans(conn, name)
    query = [math.cos(1.3), math.sin(1.3), 0.05]
    got = vector_list(conn, BIG, query)
    assert index_scans(conn, name) > before
    want = exact_list(conn, BIG, query)
    assert [r["fact"] for r in got] == [r["fact"] for r in want]
    assert [r["distance"] for r in got] == pytest.approx([r["distance"] for r in want])
    # Another scope is never served by it: the small scope's list is its own.
    assert {r["fact"] for r in vector_list(conn, SMALL, query, 30)} == {f"fact number {i}" for i in range(1000, 1030)}
    # Both scopes at once: each scope's best from its own path, merged.
    both = conn.execute(
        "select fact from membank.retrieve_memories(scope => %s, query_embedding => %s::real[], top_k => 20,"
        " rerank_depth => %s)", (Jsonb([BIG, SMALL]), query, RERANK_DEPTH)).fetchall()
    merged = sorted(exact_list(conn, BIG, query, 20) + exact_list(conn, SMALL, query, 20),
                    key=lambda r: (r["distance"], r["fact"].encode()))[:20]  # ties: fact text, as retrieval breaks them
    assert [r["fact"] for r in both] == [r["fact"] for r in merged]


def test_a_scope_within_rerank_depth_is_ranked_exactly_without_its_index(conn):
    add_memories(conn, BIG, 240)
    run_plan(conn, 200)
    name = conn.execute("select membank_private.scope_hnsw_index_name(md5(%s::jsonb::text)::uuid, 3) as n",
                        (Jsonb(BIG),)).fetchone()["n"]
    query = [math.cos(0.7), math.sin(0.7), 0.05]
    before = index_scans(conn, name)
    got = conn.execute(
        "select fact, distance from membank.retrieve_memories(scope => %s, query_embedding => %s::real[],"
        " top_k => 10)", (Jsonb(BIG), query)).fetchall()  # default rerank_depth 400 >= 240 memories
    assert index_scans(conn, name) == before
    want = exact_list(conn, BIG, query)
    assert [r["fact"] for r in got] == [r["fact"] for r in want]
    assert [r["distance"] for r in got] == pytest.approx([r["distance"] for r in want])


def test_never_fewer_than_k_when_most_of_the_indexed_scope_expired(conn):
    add_memories(conn, BIG, 240)
    run_plan(conn, 200)
    # The 230 rows nearest the query expire: the graph's neighbourhood of the
    # query is all dead rows, and the probe must still return the 10 live ones.
    query = [1.0, 0.0, 0.0]
    conn.execute("""
        update membank_private.memories set expire_time = now() - interval '1 second'
        where fact in (select 'fact number ' || g from generate_series(0, 229) g)""")
    got = vector_list(conn, BIG, query)
    assert sorted(r["fact"] for r in got) == sorted(f"fact number {i}" for i in range(230, 240))


def test_plan_drops_below_half_and_rebuilds_invalid(conn):
    add_memories(conn, BIG, 240)
    run_plan(conn, 200)
    name = conn.execute("select membank_private.scope_hnsw_index_name(md5(%s::jsonb::text)::uuid, 3) as n",
                        (Jsonb(BIG),)).fetchone()["n"]
    # 130 left: below the threshold, above half of it: kept
    conn.execute("delete from membank_private.memories where fact in"
                 " (select 'fact number ' || g from generate_series(0, 109) g)")
    assert conn.execute(PLAN, (200,)).fetchall() == []
    # 90 left: below half: dropped, and retrieval falls back to the scan
    conn.execute("delete from membank_private.memories where fact in"
                 " (select 'fact number ' || g from generate_series(110, 149) g)")
    plan = run_plan(conn, 200)
    assert [(p["action"], p["index_name"], p["memories"]) for p in plan] == [("drop", name, 90)]
    assert conn.execute("select to_regclass('membank_private.' || %s) as r", (name,)).fetchone()["r"] is None
    query = [math.cos(2.5), math.sin(2.5), 0.0]
    assert [r["fact"] for r in vector_list(conn, BIG, query)] == [r["fact"] for r in exact_list(conn, BIG, query)]
    # An index a failed build left invalid is not used, then dropped and rebuilt.
    add_memories(conn, BIG, 200, start=2000)
    run_plan(conn, 200)
    conn.execute("update pg_index set indisvalid = false where indexrelid = to_regclass('membank_private.' || %s)",
                 (name,))
    assert not conn.execute("select membank_private.scope_hnsw_ready(md5(%s::jsonb::text)::uuid, 3) as r",
                            (Jsonb(BIG),)).fetchone()["r"]
    assert [r["fact"] for r in vector_list(conn, BIG, query)] == [r["fact"] for r in exact_list(conn, BIG, query)]
    assert [p["action"] for p in run_plan(conn, 200)] == ["drop", "create"]
    assert conn.execute("select membank_private.scope_hnsw_ready(md5(%s::jsonb::text)::uuid, 3) as r",
                        (Jsonb(BIG),)).fetchone()["r"]


def test_another_model_is_stored_beside_an_old_index_then_replanned(conn):
    add_memories(conn, BIG, 240)
    old = run_plan(conn, 200)[0]["index_name"]
    conn.execute("select membank.reembed(model_id => 'test/four', dimension => 4)")
    # The old index's predicate holds dimension 3: 4-d vectors are not cast into it.
    with conn.transaction():
        jobs = conn.execute("select * from membank.claim_embedding_jobs(1000)").fetchall()
        conn.execute("select membank.store_embeddings('test/four', 4, %s, %s, %s)",
                     ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs],
                      [f"[1,{k / 240},0,0]" for k in range(len(jobs))]))
    plan = run_plan(conn, 200)
    assert [(p["action"], p["index_name"]) for p in plan] == [("drop", old), ("create", old[:-1] + "4")]
    got = vector_list(conn, BIG, [1.0, 0.5, 0.0, 0.0])
    assert len(got) == 10


@pytest.mark.parametrize("bad", [0, -1, None])
def test_min_memories_out_of_range(conn, bad):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="min_memories") as err:
        conn.execute(PLAN, (bad,))
    assert err.value.diag.message_hint


def test_only_admin_plans(conn):
    conn.execute("set role membank_admin")
    try:
        assert conn.execute(PLAN, (10,)).fetchall() == []
    finally:
        conn.execute("reset role")
    conn.execute("set role membank_writer")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(PLAN, (10,))
    finally:
        conn.execute("reset role")


# Zipf-distributed vocabularies (a few common words, many rare) in several languages, with the function words
# the per-fact language detection reads, and CJK runs indexed as unigrams and bigrams.
VOCABULARY = {
    "en": (["the", "and", "with"], ["apple", "river", "guitar", "mountain", "painting", "support", "group",
           "festival", "camping", "violin", "garden", "kitten", "museum", "pottery", "marathon", "library",
           "sunset", "ocean", "bakery", "chess", "painted", "running", "gardens", "apples", "climbing",
           "novel", "sister", "adoption", "career", "counseling"]),
    "de": (["der", "und", "nicht"], ["Garten", "Gärten", "Katze", "Fluss", "Berge", "Geige", "Bäckerei",
           "Schach", "Museum", "Lauf", "Schwester", "Roman", "Malerei", "Wandern", "Äpfel"]),
    "ru": ([], ["сад", "садах", "кошка", "река", "горы", "скрипка", "пекарня", "шахматы", "музей", "сестра",
           "роман", "живопись"]),
    "ja": ([], ["私の名前は太郎です", "東京に住んでいます", "猫が好きです", "山登り", "美術館", "太郎", "音楽",
           "花火大会", "図書館"]),
}
TEXT_REFERENCE = """
    with q as (select * from membank_private.text_query(%(q)s, %(ids)s::uuid[], %(rare_only)s)),
    terms as (select array_agg(q.lexeme) as lexemes, array_agg(q.idf) as idfs,
                     nullif(string_agg(quote_literal(q.lexeme), ' | ') filter (where q.seeks), '')::tsquery as seeking,
                     nullif(string_agg(quote_literal(q.lexeme), ' | '), '')::tsquery as all_lexemes from q)
    select m.name,
           (select sum(case when t.lexeme = any(tsvector_to_array(ts_filter(m.fts, '{a}'))) then t.idf
                            else 0.5 * t.idf end)
            from unnest(terms.lexemes, terms.idfs) as t (lexeme, idf)
            where t.lexeme = any(tsvector_to_array(m.fts)))::real as text_rank,
           ts_rank(m.fts, terms.all_lexemes, 1) as text_tiebreak
    from membank_private.memories m, terms
    where m.scope_id = any(%(ids)s::uuid[]) and m.fts @@ terms.seeking
    order by 2 desc, 3 desc, m.fact collate "C", m.name
    limit %(depth)s"""


def zipf_fact(rng, lang):
    function_words, words = VOCABULARY[lang]
    weights = [1 / (i + 1) for i in range(len(words))]
    chosen = rng.choices(words, weights, k=rng.randint(2, 7))
    return " ".join(chosen[:1] + function_words[:2] + chosen[1:]) if function_words else " ".join(chosen)


def test_big_scope_text_list_equals_scoring_every_match(conn):
    """Must hold: a scope above 2,000 memories gets its text list from text_candidates_maxscore (rarest lexemes'
    rows first, stopping early), and that list equals scoring every match: the same names, IDF sums (a lexeme
    only the context holds counting half), ts_rank tie-breaks and order (ties by ts_rank, fact in C collation,
    name), over Zipf-distributed facts in four languages (CJK included), 80 queries and 4 depths."""
    import random

    rng = random.Random(7)
    langs = ["en"] * 5 + ["de", "ru", "ja"]
    facts = [zipf_fact(rng, rng.choice(langs)) for _ in range(2400)]
    # A third of the memories carry a context (its words score half their IDF).
    contexts = [zipf_fact(rng, rng.choice(langs)) if i % 3 == 0 else None for i in range(2400)]
    scope = {"user_id": "zipf"}
    conn.execute("insert into membank_private.memories (scope_id, scope, fact, context)"
                 " select md5(%s::jsonb::text)::uuid, %s, f, c from unnest(%s::text[], %s::text[]) as u (f, c)",
                 (Jsonb(scope), Jsonb(scope), facts, contexts))
    ids = [conn.execute("select md5(%s::jsonb::text)::uuid as id", (Jsonb(scope),)).fetchone()["id"]]
    conn.execute("set track_functions = 'pl'")
    calls = "select coalesce(sum(calls), 0) as n from pg_stat_user_functions where funcname = %s"
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    before = conn.execute(calls, ("text_candidates_maxscore",)).fetchone()["n"]
    compared = 0
    for i in range(80):
        lang = rng.choice(langs)
        words = VOCABULARY[lang][1]
        query = " ".join(rng.sample(words, rng.randint(1, min(6, len(words)))))
        if i % 10 == 0:
            query += " " + rng.choice(VOCABULARY["en"][1])  # a query mixing languages
        for depth in (1, 5, 20, 50):
            rare_only = i % 2 == 1  # as beside a vector list: words in most memories never seek
            got = conn.execute("select name, text_rank, text_tiebreak from membank_private.text_candidates("
                               "%s, %s, %s, null, null, null, null, null, %s)",
                               (ids, query, depth, rare_only)).fetchall()
            full = conn.execute(TEXT_REFERENCE, {"q": query, "ids": ids, "depth": depth,
                                                 "rare_only": rare_only}).fetchall()
            assert got == full, (query, depth)
            compared += len(full)
    assert compared > 5000
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    assert conn.execute(calls, ("text_candidates_maxscore",)).fetchone()["n"] - before == 320
