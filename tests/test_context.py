"""build_context: both tiers in one prompt within a budget, with evidence verdicts at the boundary."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from membank import InvalidArgumentError, MemoryBank
from membank.buffer import SessionBuffer, get_tokenizer, server
from membank.context import (MEMORIES_HEADER, SUMMARY_HEADER, TURNS_HEADER, ContextBuilder, build_context,
                             judge_memories)

U1 = {"user_id": "u1", "app_name": "shop"}
OTHER = {"user_id": "u2", "app_name": "shop"}
FACTS = ["User is allergic to peanuts", "User lives in Lisbon with two cats", "User works as a night nurse",
         "User's favourite colour is green", "User plays the cello on Sundays"]


@pytest.fixture
def vbank(db_url, embedder):
    with MemoryBank(db_url, embedder=embedder, max_size=4) as bank:
        yield bank


@pytest.fixture
def stocked(vbank):
    made = {f: vbank.create_memory(U1, f) for f in FACTS}
    vbank.process_pending()
    return made


def chat(buf, session, n, start=0):
    for i in range(start, start + n):
        buf.append(U1, session, [{"role": "user", "text": f"I tried recipe number {i} with my sister today."},
                                 {"role": "assistant", "text": f"Recipe {i} sounds lovely."}])


def test_sections_verdicts_and_token_count(vbank, stocked, make_buffer):
    buf = make_buffer(window_tokens=80)
    chat(buf, "s1", 6)
    ctx = build_context(vbank, buf, U1, "s1", "what is the user allergic to?", 2000)
    tok = get_tokenizer()
    assert ctx.text.startswith(MEMORIES_HEADER)
    assert SUMMARY_HEADER in ctx.text and TURNS_HEADER in ctx.text
    assert ctx.tokens == tok.count(ctx.text) <= 2000
    assert set(ctx.sections) == {"memories", "summary", "turns"}
    assert sum(ctx.sections.values()) <= ctx.tokens  # separators are the rest
    assert ctx.memories[0] == stocked["User is allergic to peanuts"].name
    assert '- "User is allergic to peanuts"' in ctx.text
    assert [v.verdict for v in ctx.verdicts] == ["allow"] * 5 and not ctx.degraded
    state = buf.read(U1, "s1")
    assert ctx.turn_seqs == [t.seq for t in state.turns] and ctx.summary == state.summary
    assert "I tried recipe number 0 with my sister today." in ctx.text  # via the rolling summary
    assert ctx.dropped == {"memories": [], "turns": [], "summary": False}


def test_always_within_budget_dropping_lowest_ranked_and_oldest_first(vbank, stocked, make_buffer):
    buf = make_buffer(window_tokens=400)
    chat(buf, "s1", 8)
    tok = get_tokenizer()
    builder = ContextBuilder(vbank, buf, top_k=5)
    full = builder.build(U1, "s1", "what is the user allergic to?", 5000)
    previous_memories = len(full.memories)
    for budget in (400, 200, 120, 60, 30, 12, 3, 1):
        ctx = builder.build(U1, "s1", "what is the user allergic to?", budget)
        assert ctx.tokens == tok.count(ctx.text) <= budget
        # memories drop from the bottom of the ranking, turns from the oldest end
        assert ctx.memories == full.memories[:len(ctx.memories)] and len(ctx.memories) <= previous_memories
        assert ctx.dropped["memories"] == full.memories[len(ctx.memories):]
        if ctx.turn_seqs:
            assert ctx.turn_seqs == full.turn_seqs[-len(ctx.turn_seqs):]
        assert sorted(ctx.dropped["turns"] + ctx.turn_seqs) == full.turn_seqs or "truncated_turn" in ctx.dropped
        previous_memories = len(ctx.memories)
    tight = builder.build(U1, "s1", "what is the user allergic to?", 60)
    assert tight.turn_seqs[-1] == full.turn_seqs[-1]  # the newest turn goes in first


def test_newest_turn_is_cut_to_fit(vbank, make_buffer):
    buf = make_buffer()
    buf.append(U1, "s", {"role": "user", "text": "I " + "really " * 200 + "like tea."})
    ctx = build_context(vbank, buf, U1, "s", "tea", 50)
    assert 0 < ctx.tokens <= 50 and ctx.text.startswith(TURNS_HEADER + "\nuser: I really")
    assert ctx.dropped["truncated_turn"] == 1


class LeakyBank(MemoryBank):
    """A retrieval layer that leaks another scope's results (say, a shared cache), to test the boundary."""

    leak_scope = OTHER

    def retrieve_memories(self, scope, query=None, **kwargs):
        return super().retrieve_memories(scope, query, **kwargs) + super().retrieve_memories(
            self.leak_scope, query, **kwargs)


def test_wrong_scope_deleted_and_expired_are_blocked_and_never_in_the_prompt(db_url, embedder, make_buffer, caplog):
    with LeakyBank(db_url, embedder=embedder) as bank:
        mine = bank.create_memory(U1, "User is allergic to peanuts")
        leaked = bank.create_memory(OTHER, "Other user is allergic to peanut butter")
        gone = bank.create_memory(U1, "User was allergic to peanut oil as a child")
        short = bank.create_memory(U1, "User's peanut allergy test is on Friday", ttl=3600)
        bank.process_pending()
        retrieved = bank.retrieve_memories(U1, "peanut allergy", top_k=10)
        assert {str(r.memory.name) for r in retrieved} >= {str(leaked.name), str(gone.name), str(short.name)}
        bank.delete_memory(gone.name)
        # Move time after the slow steps (embedding, retrieval): the memory expires now.
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("update membank_private.memories set expire_time = statement_timestamp()"
                      " - interval '1 second' where name = %s", (short.name,))
        caplog.set_level(logging.INFO, logger="membank.context")
        verdicts, usable = judge_memories(bank, U1, retrieved)
        by_name = {str(v.memory_name): v for v in verdicts}
        assert (by_name[str(leaked.name)].verdict, by_name[str(leaked.name)].reason) == (
            "block", "scope differs from the requested scopes")
        assert by_name[str(gone.name)].verdict == "block" and by_name[str(gone.name)].reason.startswith("deleted")
        assert by_name[str(short.name)].verdict == "block" and by_name[str(short.name)].reason == "expired"
        assert by_name[str(short.name)].expire_time <= datetime.now(timezone.utc)
        assert by_name[str(mine.name)].verdict == "allow"
        assert set(usable) == {str(mine.name)}
        ctx = build_context(bank, make_buffer(), U1, "s", "peanut allergy", 1000)
        assert ctx.memories == [mine.name]
        for fact in ("peanut butter", "peanut oil", "on Friday"):
            assert fact not in ctx.text
    # the verdict log: evidence, never fact text
    lines = [r.getMessage() for r in caplog.records if r.name == "membank.context"]
    assert any(f"verdict=block memory={gone.name}" in line and "revision=2" in line for line in lines)
    assert not any(word in line for line in lines for word in ("peanut", "allergic", "Friday"))


def test_stale_revision_degrades_and_current_revision_enters(vbank, make_buffer):
    m = vbank.create_memory(U1, "User's name is Coco")
    vbank.process_pending()
    retrieved = vbank.retrieve_memories(U1, "what is the user's name", top_k=3)
    vbank.update_memory(m.name, fact="User's name is Joy")
    verdicts, usable = judge_memories(vbank, U1, retrieved)
    assert verdicts[0].verdict == "degrade" and verdicts[0].reason.startswith("stale revision: retrieved revision 1")
    assert (verdicts[0].retrieved_revision, verdicts[0].revision) == (1, 2)
    assert usable[str(m.name)].fact == "User's name is Joy"


def test_expected_memory_missed_by_similarity_degrades_and_enters(vbank, stocked, make_buffer):
    note = vbank.create_memory(U1, "Parking spot is B12 in the north garage")
    vbank.process_pending()
    ctx = build_context(vbank, make_buffer(), U1, "s", "what is the user allergic to?", 1000, top_k=1,
                        expected=[note.name])
    v = ctx.verdict_of(note.name)
    assert (v.verdict, v.source, v.reason) == ("degrade", "expected",
                                               "listing its scope finds it; similarity search missed it")
    assert ctx.memories == [stocked["User is allergic to peanuts"].name, note.name]


def test_expected_but_not_fetchable_is_blocked(vbank, make_buffer):
    elsewhere = vbank.create_memory(OTHER, "Secret of another user")
    deleted = vbank.create_memory(U1, "User had a temporary code 1234")
    vbank.delete_memory(deleted.name)
    ctx = build_context(vbank, make_buffer(), U1, "s", "code", 1000,
                        expected=[elsewhere.name, deleted.name, "00000000-0000-0000-0000-000000000001"])
    reasons = [(v.verdict, v.reason) for v in ctx.verdicts]
    assert reasons == [("block", "expected but not fetchable in the requested scopes"),
                       ("block", "deleted (revision 2)"),
                       ("block", "expected but not fetchable in the requested scopes")]
    assert ctx.memories == [] and "Secret" not in ctx.text and "1234" not in ctx.text


def test_text_only_match_degrades(vbank, make_buffer):
    vbank.create_memory(U1, "User is allergic to peanuts")  # no worker run: no vector yet
    ctx = build_context(vbank, make_buffer(), U1, "s", "peanuts", 500)
    assert [(v.verdict, v.reason) for v in ctx.verdicts] == [("degrade", "matched by text only: no current vector")]
    assert len(ctx.memories) == 1


def test_several_scopes_are_retrieved_together(vbank, make_buffer):
    project = {**U1, "project_id": "p1"}
    a = vbank.create_memory(U1, "User prefers tea over coffee")
    b = vbank.create_memory(project, "Project p1 uses tea-based branding")
    vbank.process_pending()
    ctx = build_context(vbank, make_buffer(), [U1, project], "s", "tea", 1000)
    assert set(ctx.memories) == {a.name, b.name} and {v.verdict for v in ctx.verdicts} == {"allow"}


def test_valkey_down_degrades_to_long_term_memories_then_recovers(vbank, stocked, own_valkey):
    buf = SessionBuffer(server.url_for(own_valkey))
    buf.append(U1, "s", {"role": "user", "text": "I just got back from Porto."})
    builder = ContextBuilder(vbank, buf)
    assert not builder.build(U1, "s", "peanuts", 1000).degraded
    server.stop(own_valkey)
    ctx = builder.build(U1, "s", "peanuts", 1000)
    assert ctx.degraded and ctx.degraded_reason.startswith("session buffer unavailable: Valkey is unreachable")
    assert ctx.memories and TURNS_HEADER not in ctx.text
    server.ensure_running(own_valkey)
    again = builder.build(U1, "s", "peanuts", 1000)
    assert not again.degraded and "I just got back from Porto." in again.text
    buf.close()


@pytest.mark.parametrize("kwargs,argument", [
    ({"scopes": {}}, "scopes"), ({"scopes": []}, "scopes"), ({"scopes": {"user_id": 1}}, "scopes"),
    ({"session_id": ""}, "session_id"), ({"query": "  "}, "query"), ({"budget_tokens": 0}, "budget_tokens"),
    ({"budget_tokens": -5}, "budget_tokens"), ({"budget_tokens": 1.5}, "budget_tokens"),
    ({"budget_tokens": True}, "budget_tokens"), ({"top_k": 0}, "top_k"),
])
def test_bad_input_names_the_argument(kwargs, argument):
    # Rejected before any I/O: no bank or buffer is touched (None would fail on first use).
    args = {"scopes": U1, "session_id": "s", "query": "q", "budget_tokens": 100, **kwargs}
    with pytest.raises(InvalidArgumentError) as err:
        build_context(None, None, **args)
    assert err.value.argument == argument and err.value.hint


def event(text):
    return {"event_id": uuid.uuid4().hex, "author": "user", "text": text, "timestamp": datetime.now(timezone.utc)}


def test_running_generate_operation_of_the_session_gives_wait(vbank, stocked, make_buffer):
    buf = make_buffer()
    pending = vbank.generate_memories(U1, session_id="s1", events=[event("I moved to Porto last month.")])
    ctx = build_context(vbank, buf, U1, "s1", "where does the user live?", 1000)
    assert {v.verdict for v in ctx.verdicts} == {"wait"} and ctx.pending_operations == [str(pending.name)]
    assert all(v.operation == str(pending.name) for v in ctx.verdicts) and ctx.memories  # wait still enters
    other = build_context(vbank, buf, U1, "another-session", "where does the user live?", 1000)
    assert "wait" not in {v.verdict for v in other.verdicts}  # only this session's operations count
    pending.wait(30, process=True)
    after = build_context(vbank, buf, U1, "s1", "where does the user live?", 1000)
    assert "wait" not in {v.verdict for v in after.verdicts} and after.pending_operations == []


def test_memories_the_session_generated_are_expected(vbank, stocked, make_buffer):
    op = vbank.generate_memories(U1, session_id="s1", events=[event("My locker at the gym is number 31.")]).wait(
        30, process=True)
    [generated] = [g.memory for g in op.generated_memories if g.action == "CREATED"]
    ctx = build_context(vbank, make_buffer(), U1, "s1", "what is the user allergic to?", 1000, top_k=1)
    v = ctx.verdict_of(generated.name)
    assert (v.verdict, v.source) == ("degrade", "expected") and generated.name in ctx.memories
    # a later operation that deletes it: no longer expected
    vbank.delete_memory(generated.name)
    assert build_context(vbank, make_buffer(), U1, "s1", "what is the user allergic to?", 1000, top_k=1,
                         ).verdict_of(generated.name).verdict == "block"
    assert build_context(vbank, make_buffer(), U1, "s1", "what is the user allergic to?", 1000, top_k=1,
                         generated_lookback=0).verdict_of(generated.name) is None


def test_two_users_with_session_s1_each_get_only_their_own_turns_and_summary(vbank, make_buffer):
    u2 = {"user_id": "u2"}
    buf = make_buffer(window_tokens=12)
    for text in ["My favourite colour is teal.", "I walk my dog every morning.", "I am learning Finnish."]:
        buf.append(U1, "s1", {"role": "user", "text": text})
    buf.append(u2, "s1", {"role": "user", "text": "I prefer mountains to beaches."})
    assert buf.read(U1, "s1").summary.text  # u1's session has folded: its summary is in play too
    ctx1 = build_context(vbank, buf, U1, "s1", "What is my favourite colour?", 1000)
    ctx2 = build_context(vbank, buf, u2, "s1", "What is my favourite colour?", 1000)
    assert "teal" in ctx1.text and "Finnish" in ctx1.text and "mountains" not in ctx1.text
    assert "mountains" in ctx2.text
    for leaked in ("teal", "dog", "Finnish"):
        assert leaked not in ctx2.text
    assert ctx2.summary is None or ctx2.summary.text == ""
    # carry-over into u2's next session brings only u2's turns
    carried = buf.carry_over(u2, "s1", "s2")
    assert "teal" not in carried.text and "mountains" in carried.text
    assert "teal" not in build_context(vbank, buf, u2, "s2", "colour?", 1000).text


PERSONAL_FACTS = [
    "My name is Joy Alvarez.", "I live in Porto with my husband Tiago.", "I work as a pharmacist at Santo Antonio.",
    "My daughter Mia was born on 2019-03-02.", "I am allergic to shellfish and peanuts.",
    "My favourite band is Radiohead.", "I adopted a beagle named Pickles in June.",
    "I am planning a trip to Kyoto in October.",
]
THINGS = ["weather", "movie", "coffee", "weekend", "song", "game", "park", "book", "dinner", "show", "walk", "cake"]


def small_talk(i: int) -> tuple[str, str]:
    """A distinct small-talk pair (the rules summarizer drops exact repeats anyway)."""
    thing = THINGS[i % len(THINGS)]
    user = [f"I agree, that {thing} sounds really lovely.", f"I think so too, the {thing} was nice.",
            f"I see what you mean about the {thing}, haha.", f"I'm good, just thinking about the {thing} today."]
    return user[(i // len(THINGS)) % 4], f"The {thing} does sound nice."


def test_the_rules_summary_keeps_personal_facts_over_small_talk(vbank, make_buffer):
    """8 personal facts, then 48 small-talk pairs, a 300-token window: >= 6 facts survive in the summary."""
    buf = make_buffer(window_tokens=300)
    t0 = datetime(2023, 5, 8, 9, tzinfo=timezone.utc)
    for i, fact in enumerate(PERSONAL_FACTS):
        buf.append(U1, "s1", [{"role": "user", "text": fact, "timestamp": t0 + timedelta(minutes=i)},
                          {"role": "assistant", "text": "Thanks for telling me.", "timestamp": t0 + timedelta(minutes=i)}])
    for i in range(48):
        user, assistant = small_talk(i)
        when = t0 + timedelta(hours=1, minutes=i)
        buf.append(U1, "s1", [{"role": "user", "text": user, "timestamp": when},
                          {"role": "assistant", "text": assistant, "timestamp": when}])
    summary = buf.summary(U1, "s1").text
    kept = [f for f in PERSONAL_FACTS if f in summary]
    assert len(kept) >= 6, summary
    ctx = build_context(vbank, buf, U1, "s1", "what do you know about me?", 2000)
    assert ctx.dropped["summarized_lines"] > 0  # the small talk the summarizer dropped, counted
    assert all(f in ctx.text for f in kept)


def test_nothing_relevant_is_said_and_the_floor_can_be_turned_off(vbank, stocked):
    """A query nothing answers leaves the memories out and counts them in below_threshold; min_relevance=None
    (for agents that search by single keywords, which score like gibberish) lets them in."""
    gated = build_context(vbank, None, U1, "s1", "zzzz qqqq", 2000)
    assert (gated.memories, gated.below_threshold, gated.text) == ([], 5, "")
    answered = build_context(vbank, None, U1, "s1", "what is the user allergic to?", 2000)
    assert answered.memories[0] == stocked["User is allergic to peanuts"].name and answered.below_threshold == 0
    ungated = build_context(vbank, None, U1, "s1", "zzzz qqqq", 2000, min_relevance=None)
    assert sorted(ungated.memories) == sorted(m.name for m in stocked.values()) and ungated.below_threshold == 0
    strict = ContextBuilder(vbank, None, min_relevance=1.0).build(U1, "s1", "what is the user allergic to?", 2000)
    assert (strict.memories, strict.below_threshold) == ([], 5)
