"""Full text in every language, stable ties, several queries per call and query decomposition.

All through the text-only path of membank.retrieve_memories (what SQL callers without an embedder get),
except where a test passes vectors of its own.
"""

import json
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

import multilingual_set

from membank import InvalidArgumentError, MemoryBank

ROOT = Path(__file__).resolve().parents[1]


def create(conn, scope, facts):
    for fact in facts:
        conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(scope), fact))


def text_only(conn, scope, query, top_k=10, **extra):
    args = "".join(f", {k} => %({k})s" for k in extra)
    return [r["fact"] for r in conn.execute(
        f"select fact from membank.retrieve_memories(scope => %(scope)s, query_text => %(q)s, top_k => %(k)s{args})",
        {"scope": Jsonb(scope), "q": query, "k": top_k, **extra}).fetchall()]


@pytest.mark.parametrize("lang", sorted(multilingual_set.CASES))
def test_fact_first_among_50_distractors_in_its_language(conn, lang):
    """Per language, a fact and a query that share a word in another inflection (CJK: a
    sub-word); the text-only path ranks the fact first among 50 distractors in the same language."""
    case = multilingual_set.CASES[lang]
    scope = {"lang": lang}
    distractors = multilingual_set.distractors(lang)
    create(conn, scope, distractors[:25] + [case.fact] + distractors[25:])
    for query in case.queries:
        got = text_only(conn, scope, query)
        assert got and got[0] == case.fact, (query, got[:3])


def test_japanese_name_found_by_its_sub_words(conn):
    """The issue's example: "私の名前は太郎です" is found by "太郎" and by "名前"; "東京" finds its own fact."""
    scope = {"u": "ja"}
    create(conn, scope, ["私の名前は太郎です", "東京に住んでいます", "猫が好きです"])
    assert text_only(conn, scope, "太郎")[0] == "私の名前は太郎です"
    assert text_only(conn, scope, "名前")[0] == "私の名前は太郎です"
    assert text_only(conn, scope, "東京")[0] == "東京に住んでいます"
    assert text_only(conn, scope, "猫")[0] == "猫が好きです"


def test_language_is_detected_per_fact_and_latin_is_unaccented(conn):
    row = conn.execute("""
        select membank_private.text_language('Ich wohne mit meiner Familie in einem Haus')::text as de,
               membank_private.text_language('Nous sommes allés à la plage avec les enfants')::text as fr,
               membank_private.text_language('Mi hermano vive en la ciudad con su perro')::text as es,
               membank_private.text_language('Я живу в Москве')::text as ru,
               membank_private.text_language('Caroline went to the support group')::text as en,
               membank_private.text_language('Paris')::text as fallback""").fetchone()
    assert row == {"de": "german", "fr": "french", "es": "spanish", "ru": "russian", "en": "english",
                   "fallback": "english"}
    scope = {"u": "accents"}
    create(conn, scope, ["We met at the café near the école", "We met at the station"])
    assert text_only(conn, scope, "cafe") == ["We met at the café near the école"]
    assert text_only(conn, scope, "ECOLE") == ["We met at the café near the école"]


def test_document_frequencies_count_each_language_once(conn):
    """The lexicon stays per scope across languages: CJK tokens and stems are counted and uncounted too."""
    scope = {"u": "df"}
    create(conn, scope, ["私の名前は太郎です", "太郎は東京に住んでいます", "Wir bauen ein Haus"])
    df = {r["lexeme"]: r["doc_count"] for r in conn.execute(
        "select lexeme, doc_count from membank_private.scope_lexicon where scope_id = md5(%s::jsonb::text)::uuid"
        " and lexeme in ('太郎', '東京', 'haus')", (json.dumps(scope),)).fetchall()}
    assert df == {"太郎": 2, "東京": 1, "haus": 1}
    conn.execute("select membank.purge_memories(%s, force => true)", (Jsonb(scope),))
    assert conn.execute("select count(*) as n from membank_private.scope_lexicon"
                        " where scope_id = md5(%s::jsonb::text)::uuid and doc_count > 0",
                        (json.dumps(scope),)).fetchone()["n"] == 0


def _locomo():
    sys.path.insert(0, str(ROOT / "bench"))
    import locomo

    try:
        return locomo.conversations()
    except FileNotFoundError:
        return None


def test_same_memories_in_another_order_give_identical_lists(conn):
    """The same memories stored twice in opposite orders (one transaction per memory, so
    names and times differ) give identical result lists for every question; on LoCoMo when present (text-only;
    the bench checks hybrid), else on a synthetic scope full of ties."""
    conversations = _locomo()
    if conversations:
        conv = min(conversations, key=lambda c: len(c.turns))
        facts = [t.fact for t in conv.turns]
        questions = [q.question for q in conv.qas if q.category != 5 and q.evidence]
    else:
        people, things = ["Caroline", "Melanie", "John", "Maya"], ["painted", "a sunrise", "the lake", "her dog"]
        facts = [f"{p}: I {a} and {b}" for p in people for a in things for b in things for _ in range(2)]
        questions = [f"What did {p} do with {t}?" for p in people for t in things]
    forward, backward = {"order": "forward"}, {"order": "backward"}
    create(conn, forward, facts)
    create(conn, backward, facts[::-1])
    tied = 0
    for q in questions:
        a, b = text_only(conn, forward, q, top_k=10), text_only(conn, backward, q, top_k=10)
        assert a == b, q
        ranks = [r["text_rank"] for r in conn.execute(
            "select text_rank from membank.retrieve_memories(scope => %s, query_text => %s, top_k => 11)",
            (Jsonb(forward), q)).fetchall()]
        tied += len(ranks) == 11 and ranks[9] == ranks[10]
    assert tied > 0  # the data really has ties at the cut, so the order above was decided by the tie-break


def test_ties_go_to_the_finer_text_score_then_the_fact(conn):
    """Equal IDF sums: the fact that holds the word more often per length first, then the fact text."""
    scope = {"u": "ties"}
    create(conn, scope, ["b dogs are loyal companions for many people", "dogs dogs", "a dogs are loyal companions",
                         "cats sleep"])
    got = conn.execute("select fact, text_rank from membank.retrieve_memories(scope => %s, query_text => 'dog',"
                       " top_k => 5)", (Jsonb(scope),)).fetchall()
    assert [r["fact"] for r in got] == ["dogs dogs", "a dogs are loyal companions",
                                         "b dogs are loyal companions for many people"]
    assert len({r["text_rank"] for r in got}) == 1


def test_several_queries_fused_in_one_call(conn):
    """query_texts: one hybrid list per query, fused by RRF; each query's best memory makes the top 2."""
    scope = {"u": "multi"}
    create(conn, scope, ["Maya started a new job as a nurse", "Maya moved to Lisbon in May",
                         "Maya likes jazz", "Tom moved to Berlin", "Tom started a new job as a chef"])
    got = [r["fact"] for r in conn.execute(
        "select fact from membank.retrieve_memories(scope => %s, query_texts => %s, top_k => 2)",
        (Jsonb(scope), ["What did Maya say about her new job?", "Where does Maya live now? moved"])).fetchall()]
    assert sorted(got) == ["Maya moved to Lisbon in May", "Maya started a new job as a nurse"]


def test_several_queries_with_vectors(conn):
    conn.execute("select membank.configure_embedding(model_id => 'test/exact', dimension => 2)")
    scope = {"u": "vec"}
    create(conn, scope, ["east", "north", "west"])
    with conn.transaction():
        jobs = conn.execute("select * from membank.claim_embedding_jobs(10)").fetchall()
        vectors = {"east": "[1,0]", "north": "[0,1]", "west": "[-1,0]"}
        conn.execute("select membank.store_embeddings('test/exact', 2, %s, %s, %s)",
                     ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs],
                      [vectors[j["memory_fact"]] for j in jobs]))
    got = conn.execute(
        "select fact, distance from membank.retrieve_memories(scope => %s, query_texts => array[null, null]::text[],"
        " query_embeddings => array[[1, 0], [0, 1]]::real[], top_k => 3)", (Jsonb(scope),)).fetchall()
    assert sorted(r["fact"] for r in got[:2]) == ["east", "north"] and got[2]["fact"] == "west"
    assert got[0]["distance"] == pytest.approx(0, abs=1e-6)


def test_equal_positions_in_different_queries_tie_exactly(conn):
    """Three memories at positions {2, 3, 4} of three sub-queries, each in another order: their RRF sums are the
    same numbers added in different orders, and must come out bit-identical so that the documented tie-breaks
    (distance, then fact) order them, whatever the order of the sub-queries."""
    conn.execute("select membank.configure_embedding(model_id => 'test/ties', dimension => 4)")
    scope = {"u": "ties"}
    vectors = {"a": "[.55,.55,.55,.3041381265149107]", "x": "[.5,.45,.4,.6224949798994366]",
               "y": "[.4,.5,.45,.6224949798994366]", "z": "[.45,.4,.5,.6224949798994366]"}
    create(conn, scope, list(vectors))
    with conn.transaction():
        jobs = conn.execute("select * from membank.claim_embedding_jobs(10)").fetchall()
        conn.execute("select membank.store_embeddings('test/ties', 4, %s, %s, %s)",
                     ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs],
                      [vectors[j["memory_fact"]] for j in jobs]))
    e1, e2, e3 = [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]
    for queries in ([e1, e2, e3], [e1, e3, e2], [e3, e2, e1]):
        rows = conn.execute(
            "select fact, score from membank.retrieve_memories(scope => %s, query_texts => array[null, null, null]"
            "::text[], query_embeddings => %s::real[], top_k => 4)", (Jsonb(scope), queries)).fetchall()
        assert [r["fact"] for r in rows] == ["a", "x", "y", "z"]
        assert rows[1]["score"] == rows[2]["score"] == rows[3]["score"]


def test_query_vectors_pgvector_cannot_take_are_22023(conn):
    """More than pgvector's 16,000 dimensions (its own error is 54000), or entries so small that its float32 norm
    underflows to zero (cosine distance NaN): 22023 naming the argument, before and after a model is set."""
    huge = "select * from membank.retrieve_memories(scope => '{\"u\":\"1\"}', query_embedding => %s::real[])"
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute(huge, ([1.0] * 16001,))
    assert err.value.diag.message_detail == "argument: query_embedding" and "16000" in err.value.diag.message_primary
    conn.execute("select membank.configure_embedding(model_id => 'test/tiny', dimension => 3)")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute(huge, ([1e-30, 0.0, 0.0],))
    assert err.value.diag.message_detail == "argument: query_embedding" and "zero norm" in err.value.diag.message_primary
    create(conn, {"u": "1"}, ["tiny"])
    with conn.transaction():
        job = conn.execute("select * from membank.claim_embedding_jobs(1)").fetchone()
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            conn.execute("select membank.store_embeddings('test/tiny', 3, %s, %s, %s)",
                         ([str(job["memory_name"])], [str(job["fact_md5"])], ["[1e-30,0,0]"]))
    assert err.value.diag.message_detail == "argument: embeddings[1]"


@pytest.mark.parametrize(("args", "argument"), [
    ("query_texts => array['a'], query_text => 'b'", "query_texts"),
    ("query_texts => array[]::text[]", "query_texts"),
    ("query_texts => array['a','b','c','d','e','f','g','h','i']", "query_texts"),
    ("query_texts => array['a', '']", "query_texts"),
    ("query_embeddings => array[[1, 0]]::real[]", "query_embeddings"),
    ("query_texts => array['a', 'b'], query_embeddings => array[[1, 0]]::real[]", "query_embeddings"),
    ("query_texts => array['a'], query_embeddings => array[1, 0]::real[]", "query_embeddings"),
    ("query_texts => array['a'], query_embeddings => '{}'::real[]", "query_embeddings"),
])
def test_bad_query_lists(conn, args, argument):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute(f"select * from membank.retrieve_memories(scope => '{{\"u\":\"1\"}}', {args})")
    assert err.value.diag.message_detail == f"argument: {argument}" and err.value.diag.message_hint


def test_query_embeddings_of_the_wrong_dimension_name_query_embeddings(conn):
    conn.execute("select membank.configure_embedding(model_id => 'test/exact', dimension => 2)")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute("select * from membank.retrieve_memories(scope => '{\"u\":\"1\"}',"
                     " query_texts => array['a', 'b'], query_embeddings => array[[1, 0, 0], [0, 1, 0]]::real[])")
    assert err.value.diag.message_detail == "argument: query_embeddings"
    assert "rows of 3 dimensions" in err.value.diag.message_primary and "test/exact" in err.value.diag.message_hint
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:  # empty: the shape, not "zero norm"
        conn.execute("select * from membank.retrieve_memories(scope => '{\"u\":\"1\"}',"
                     " query_texts => array['a'], query_embeddings => '{}'::real[])")
    assert "two-dimensional array" in err.value.diag.message_primary


@pytest.mark.parametrize(("question", "expected"), [
    ("What did Maya say about her new job and where does she live now?",
     ["What did Maya say about her new job?", "where does she live now?"]),
    ("What is your name? Where do you live?", ["What is your name?", "Where do you live?"]),
    ("When did Caroline go to the LGBTQ support group, and what did she paint afterwards?",
     ["When did Caroline go to the LGBTQ support group?", "what did she paint afterwards?"]),
    ("Where and when did Caroline meet her friends?", ["Where and when did Caroline meet her friends?"]),
    ("What do Melanie and Caroline both like?", ["What do Melanie and Caroline both like?"]),
    ("Does John like cats or dogs?", ["Does John like cats or dogs?"]),
    ("What did Jon and Gina talk about and how did they feel?",
     ["What did Jon and Gina talk about?", "how did they feel?"]),
])
def test_rules_decomposer(conn, question, expected):
    assert conn.execute("select membank.decompose_query(%s) as q", (question,)).fetchone()["q"] == expected


def test_model_reply_is_parsed_and_falls_back(conn):
    q = "Where does Maya work and where does she live?"

    def parse(reply):
        return conn.execute("select membank.decompose_query(%s, 'model_reply', model_reply => %s) as q",
                            (q, reply)).fetchone()["q"]

    assert parse('```json\n{"queries": ["Where does Maya work?", "Where does Maya live?"]}\n```') == [
        "Where does Maya work?", "Where does Maya live?"]
    assert parse('["a", "b", "c", "d", "e"]') == ["a", "b", "c", "d"]
    for bad in [None, "", "sorry, I cannot", '{"queries": []}', '{"queries": [1, 2]}', '{"other": ["x"]}', "{oops"]:
        assert parse(bad) == [q]
    prompt = conn.execute("select membank.decomposition_prompt(%s) as p", (q,)).fetchone()["p"]
    assert q in prompt["prompt"] and prompt["response_schema"]["properties"]["queries"]["maxItems"] == 4


def test_in_database_model_function(conn):
    """AlloyDB's ai.generate(prompt => ..., model_id => ...), stood in for by a SQL function of that signature."""
    q = "Where does Maya work and where does she live?"
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="ai.generate"):
        conn.execute("select membank.decompose_query(%s, 'in_database', 'gemini-2.0-flash-001')", (q,))
    conn.execute("create schema ai")
    conn.execute("""create function ai.generate(prompt text, model_id varchar) returns text language sql as $$
        select case when model_id = 'broken' then (1 / 0)::text
                    else format('{"queries": ["%s / work", "%s / live"]}', model_id, length(prompt) > 100) end $$""")
    got = conn.execute("select membank.decompose_query(%s, 'in_database', 'gemini-2.0-flash-001') as q",
                       (q,)).fetchone()["q"]
    assert got == ["gemini-2.0-flash-001 / work", "t / live"]
    assert conn.execute("select membank.decompose_query(%s, 'in_database', 'broken') as q",
                        (q,)).fetchone()["q"] == [q]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="model_id"):
        conn.execute("select membank.decompose_query(%s, 'in_database')", (q,))


@pytest.mark.parametrize(("query", "method"), [("", "rules"), ("a and b", "magic"), ("x", None)])
def test_decompose_bad_input(conn, query, method):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute("select membank.decompose_query(%s, %s)", (query, method))
    assert err.value.diag.message_hint


def test_client_decompose_rules(db_url, conn):
    """bank.retrieve_memories(decompose="rules"): the sub-queries' lists fused in one retrieve call."""
    scope = {"u": "client"}
    create(conn, scope, ["Maya started a new job as a nurse", "Maya lives in Lisbon now", "Maya likes jazz",
                         "Tom lives in Berlin", "Tom started a new job as a chef"])
    with MemoryBank(db_url, max_size=1) as bank:
        got = bank.retrieve_memories(scope, "What did Maya say about her new job and where does Maya live now?",
                                     top_k=2, use_embedding=False, decompose="rules")
        assert sorted(r.memory.fact for r in got) == ["Maya lives in Lisbon now", "Maya started a new job as a nurse"]
        with pytest.raises(InvalidArgumentError):
            bank.retrieve_memories(scope, "a question", decompose="telepathy")


def test_client_decompose_with_an_openai_compatible_model(httpserver, db_url, conn, monkeypatch):
    """decompose="model:openai:<model>": the prompt and schema from SQL go over the wire to a local server that
    speaks the OpenAI chat API; SQL parses the reply; a reply with no usable JSON falls back to the question."""
    from werkzeug import Request, Response

    replies = ['{"queries": ["Where does Maya work?", "Where does Maya live?"]}', "I cannot help with that"]
    bodies = []

    def handle(request: Request) -> Response:
        bodies.append(request.get_json())
        text = replies[len(bodies) - 1]
        return Response(json.dumps({
            "id": "c1", "object": "chat.completion", "created": 0, "model": "local",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    monkeypatch.setenv("MEMBANK_OPENAI_BASE_URL", httpserver.url_for("/v1"))
    question = "Where does Maya work and where does she live?"
    with MemoryBank(db_url, max_size=1) as bank:
        assert bank.decompose_query(question, "model:openai:local-model") == [
            "Where does Maya work?", "Where does Maya live?"]
        assert question in json.dumps(bodies[0], ensure_ascii=False)
        assert bank.decompose_query(question, "model:openai:local-model") == [question]


def _migration_0008_text_functions(conn) -> None:
    """0008's SQL definitions of text_language and fact_tsvector, as pg_temp.old_* (the reference)."""
    src = (ROOT / "migrations" / "versions" / "0008_multilingual_text.upgrade.sql").read_text()
    for name in ("text_language", "fact_tsvector"):
        start = src.index(f"create function membank_private.{name}(")
        body = src[start:src.index("$$;", src.index("as $$", start)) + 3]
        body = body.replace(f"create function membank_private.{name}(", f"create function pg_temp.old_{name}(")
        conn.execute(body.replace("membank_private.text_language(", "pg_temp.old_text_language("))


def test_text_functions_give_migration_0008s_results(superuser):
    """text_language and fact_tsvector (PL/pgSQL, with fast paths) return exactly what 0008's SQL definitions
    return, on every LoCoMo turn when present, the multilingual set, and edge cases: a stored fts column
    computed by either is the same."""
    _migration_0008_text_functions(superuser)
    texts = ["", " ", "Paris", "was", "la", "Was ist das?", "la casa y el perro", "le chat et la souris",
             "I was there", "Er war da und es war gut", "naïve café in São Paulo", "東京に住んでいます and Tokyo",
             "Я живу в Москве", "mixed 私の名前は太郎です la der", None]
    for case in multilingual_set.CASES.values():
        texts += [case.fact, *case.queries]
    for lang in multilingual_set.CASES:
        texts += multilingual_set.distractors(lang)
    conversations = _locomo()
    if conversations:
        texts += [t.fact for c in conversations for t in c.turns]
    different = superuser.execute("""
        select t.text, membank_private.text_language(t.text)::text as new_language,
               pg_temp.old_text_language(t.text)::text as old_language
        from unnest(%s::text[]) as t (text)
        where membank_private.text_language(t.text) is distinct from pg_temp.old_text_language(t.text)
           or membank_private.fact_tsvector(t.text)::text is distinct from pg_temp.old_fact_tsvector(t.text)::text
        """, (texts,)).fetchall()
    assert different == []
    languages = {r["l"] for r in superuser.execute(
        "select membank_private.text_language(t)::text as l from unnest(%s::text[]) as t", (texts,)).fetchall()}
    assert languages == {"english", "german", "french", "spanish", "russian"}
