"""The offline rules provider: relative dates, third-person rewriting, extraction and consolidation rules."""

from __future__ import annotations

from datetime import date

import pytest

from membank.generation.rules import consolidate, extract, slot_of
from membank.generation.temporal import resolve_relative_time
from membank.generation.third_person import conjugate, to_third_person

SAID = date(2023, 5, 24)  # a Wednesday


@pytest.mark.parametrize("text, expected", [
    ("I went to Paris last week", "I went to Paris in the week of 2023-05-17"),
    ("I saw it yesterday", "I saw it on 2023-05-23"),
    ("the day before yesterday", "on 2023-05-22"),
    ("I fly tomorrow", "I fly on 2023-05-25"),
    ("we met last weekend", "we met on the weekend of 2023-05-20"),
    ("I moved last month", "I moved in April 2023"),
    ("last year I quit", "in 2022 I quit"),
    ("3 days ago", "on 2023-05-21"),
    ("two weeks ago", "in the week of 2023-05-10"),
    ("a few days ago", "around on 2023-05-21"),
    ("last Friday", "on 2023-05-19"),
    ("next Monday", "on 2023-05-29"),
    ("I currently work at home", "I as of 2023-05-24 work at home"),
    ("as we said last session", "as we said in the conversation before 2023-05-24"),
    ("nothing relative here", "nothing relative here"),
])
def test_relative_time_is_anchored_to_the_event_date(text, expected):
    assert resolve_relative_time(text, SAID) == expected


def test_january_last_month_is_december_of_the_year_before():
    assert resolve_relative_time("last month", date(2024, 1, 10)) == "in December 2023"


@pytest.mark.parametrize("verb, expected", [
    ("love", "loves"), ("watch", "watches"), ("study", "studies"), ("play", "plays"), ("go", "goes"),
    ("have", "has"), ("went", "went"), ("started", "started"), ("can", "can"), ("don't", "doesn't"),
])
def test_conjugate(verb, expected):
    assert conjugate(verb) == expected


@pytest.mark.parametrize("sentence, expected", [
    ("I love cats.", "Alice loves cats."),
    ("I'm a nurse.", "Alice is a nurse."),
    ("I really enjoy my job.", "Alice really enjoys Alice's job."),
    ("I've been to Rome with my sister.", "Alice has been to Rome with Alice's sister."),
    ("I don't eat meat.", "Alice doesn't eat meat."),
    ("We hiked to the lake.", "Alice and others hiked to the lake."),
    ("I told you about my dog.", "Alice told Bob about Alice's dog."),
])
def test_third_person(sentence, expected):
    assert to_third_person(sentence, "Alice", "Bob") == expected


def test_the_user_is_lowercase_inside_a_sentence():
    assert to_third_person("My name is Coco.", "The user", None) == "The user's name is Coco."
    assert to_third_person("Call me Coco.", "The user", None) == "Call the user Coco."


TOPICS = [{"label": t, "managed": True} for t in
          ("USER_PERSONAL_INFO", "USER_PREFERENCES", "KEY_CONVERSATION_DETAILS", "EXPLICIT_INSTRUCTIONS")]


def test_extraction_keeps_speaker_statements_and_skips_the_rest():
    events = [
        {"event_id": "1", "author": "user", "text": "Hi! How are you?", "timestamp": "2023-05-24T10:00:00+00:00"},
        {"event_id": "2", "author": "assistant", "text": "I am an AI assistant and I love helping.",
         "timestamp": "2023-05-24T10:00:01+00:00"},
        {"event_id": "3", "author": "user", "text": "Thanks! I see. Please remember that I'm allergic to peanuts.",
         "timestamp": "2023-05-24T10:00:02+00:00"},
        {"event_id": "4", "author": "user", "text": "The weather is nice. I love that!",
         "timestamp": "2023-05-24T10:00:03+00:00"},
    ]
    memories = extract({"events": events, "topics": TOPICS})["memories"]
    assert memories == [{"fact": "The user is allergic to peanuts.",
                         "topics": ["USER_PERSONAL_INFO", "EXPLICIT_INSTRUCTIONS"], "source_event_ids": ["3"]}]


@pytest.mark.parametrize("fact, slot", [
    ("The user's name is Joy.", ("the user", "name", "joy")),
    ("Maya lives in Lyon.", ("maya", "city", "lyon")),
    ("Maya moved to Grenoble in March 2024.", ("maya", "city", "grenoble")),
    ("Maya works as a nurse.", ("maya", "job", "a nurse")),
    ("The user hates cats.", ("the user", "liking:cat", "negative")),
    ("The user loves cats.", ("the user", "liking:cat", "positive")),
    ("Maya's favorite color is blue.", ("maya", "favourite:color", "blue")),
    ("Maya went hiking.", None),
])
def test_slots(fact, slot):
    assert slot_of(fact) == slot


def test_consolidation_rules():
    candidates = [{"name": "m1", "fact": "The user loves cats.", "similarity": 0.93},
                  {"name": "m2", "fact": "The user plays tennis every Sunday.", "similarity": 0.90},
                  {"name": "m3", "fact": "The user went to Paris in the week of 2023-05-17.", "similarity": 0.91}]
    facts = ["The user hates cats.", "The user no longer plays tennis.", "The user loves cats.",
             "The user went to Paris in the week of 2023-05-17!", "The user has a new bike."]
    reply = consolidate({"facts": [{"fact": f} for f in facts],
                         "candidates": [{"index": i, "candidates": candidates} for i in range(len(facts))]})
    assert reply["actions"] == [
        {"fact_index": 0, "action": "UPDATE", "memory_name": "m1", "fact": "The user hates cats."},
        {"fact_index": 1, "action": "DELETE", "memory_name": "m2"},
        {"fact_index": 2, "action": "NONE", "memory_name": "m1"},   # NONE names the memory that holds it
        {"fact_index": 3, "action": "NONE", "memory_name": "m3"},
        {"fact_index": 4, "action": "CREATE"},
    ]


def test_a_leading_time_phrase_keeps_the_speaker_the_subject():
    events = [{"event_id": "1", "author": "Ann", "text": "Yesterday I went to a pottery class.",
               "timestamp": "2023-05-24T10:00:00+00:00"}]
    memories = extract({"events": events, "topics": TOPICS})["memories"]
    assert [m["fact"] for m in memories] == ["On 2023-05-23 Ann went to a pottery class."]
