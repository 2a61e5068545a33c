"""``rules``: the offline, deterministic generation provider.

It answers the same requests a model answers (the structured ``input`` SQL
puts beside each prompt) with hand-written rules, so that everything runs
with no key. A weaker baseline, and honest about it. It reads English only:
events in another language (told by script, or by function words for
French, Spanish, German, Portuguese, Italian) are reported under
``not_extracted`` with the reason, never dropped silently.

* extraction: each first-person statement (the speaker is its subject) of a human speaker (at least five
  words, not a question or small talk) becomes a third-person fact naming
  the speaker, with relative dates resolved against the event's own date,
  kept when it matches a requested topic (keyword rules per managed topic;
  a custom topic matches on the words of its label and description);
* structured profiles: a string or list field about the user's stack, tools,
  frameworks or skills takes the technologies named in "I use / I work with /
  I program in X", "build an X agent" or "specialise in X"; a field about a
  language takes X from "I program/code in X"; an enum field takes the value
  whose words (or its description's) occur in what the user said; the
  context is the sentence quoted. Merging two values of a string field joins
  their items ("ADK" + "Python" -> "ADK, Python");
* consolidation: a fact whose text is already known, or that is a near
  duplicate of a candidate (embedding similarity and word overlap), is
  NONE; a fact that gives a new value to a slot a candidate holds (name,
  city, job, age, a favourite, the liking of one thing) UPDATEs it; a
  "no longer" fact DELETEs the candidate it negates; anything else CREATEs;
* compaction: extractive (``compact``): the most informative facts, dated,
  within a token budget.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from membank.generation.base import GenerationError
from membank.generation.temporal import resolve_relative_time
from membank.generation.third_person import to_third_person

MACHINE_AUTHORS = {"assistant", "model", "system", "agent", "tool", "bot", "ai"}
USER_AUTHORS = {"user", "human"}
MIN_WORDS = 3
VAGUE_END = re.compile(r"\b(that|it|this|them|so|one|you)(?: out| up| too)?[!.]*$", re.IGNORECASE)
# Framing that carries nothing to remember: "Big news: ...", "Please remember that ...", "..., too."
PREFIX = re.compile(r"^(?:[^:]{1,20}:\s+|(?:please\s+)?(?:remember|note|don't forget|keep in mind)(?:\s+that)?\s+)",
                    re.IGNORECASE)
SUFFIX = re.compile(r"(?:,?\s+(?:too|as well)|,?\s*(?:nice to meet you|thanks?(?: you)?|how are you))[.!]*$",
                    re.IGNORECASE)
SMALL_TALK = re.compile(
    r"^(i'?m (good|fine|great|ok|okay|doing (well|good|great))|i (see|know|agree|guess|hope so|think so|understand|"
    r"appreciate|feel you|hear you|totally agree)|thanks?|thank you|glad|sounds|that'?s|me too|you too|same here)\b",
    re.IGNORECASE)
# A feeling with no object ("I'm so thankful!", "I feel the same way") is not a fact to keep.
FEELING = re.compile(
    r"^(?:I'm|I am|I feel|I was|I've been|We're|We are)\s+(?:(?:so|super|really|very|totally|just|also|"
    r"truly|doing)\s+)*(?:happy|thankful|grateful|glad|excited|sorry|proud|stoked|pumped|honored|touched|"
    r"blessed|lucky|good|great|fine|okay|ok|well|the same way|my best|getting there)\b[^,;]{0,20}[.!]*$",
    re.IGNORECASE)
# A statement about the speaker starts with the speaker as its subject.
# A leading time phrase ("Last week, I ...", "Yesterday I ...") keeps the speaker the subject.
LEADING_TIME = (r"(?:(?:yesterday|today|tonight|tomorrow|recently|lately|finally|now|then|also|just|"
                r"(?:last|this|next) \w+|\w+ (?:days?|weeks?|months?|years?) ago|a while ago|"
                r"on \w+|in \w+|the other day)[, ]+)?")
FIRST_PERSON = re.compile(r"^" + LEADING_TIME + r"(?:I|I'm|I've|I'd|I'll|[Mm]y|[Ww]e|[Ww]e're|[Ww]e've|[Oo]ur)\b",
                          re.IGNORECASE)
TOPIC_PATTERNS = {
    "EXPLICIT_INSTRUCTIONS": re.compile(
        r"\b(remember|forget|from now on|make sure|call me|remind me|always|never)\b", re.IGNORECASE),
    "USER_PERSONAL_INFO": re.compile(
        r"\b(name|named|live|lives|living|moved|move|from|born|birthday|age|years old|work|works|working|job|"
        r"career|company|married|wife|husband|partner|girlfriend|boyfriend|kids?|child|children|son|daughter|"
        r"baby|family|mom|mother|dad|father|sister|brother|parents|grandma|grandmother|grandpa|friends?|pets?|"
        r"dogs?|cats?|puppy|study|student|school|college|university|degree|graduated|home|house|apartment|city|"
        r"country|hobby|hobbies|allergic|allergy|vegetarian|vegan|health)\b", re.IGNORECASE),
    "USER_PREFERENCES": re.compile(
        r"\b(love|loves|loved|like|likes|liked|enjoy|enjoys|enjoyed|prefer|prefers|preferred|hate|hates|hated|"
        r"dislike|dislikes|favou?rite|fan of|passionate|can't stand|adore)\b", re.IGNORECASE),
    "KEY_CONVERSATION_DETAILS": re.compile(r"\w"),  # any remaining first-person statement
}
STOPWORDS = set("""a an the and or of to in on at for with by from about into over that this these those it its is are
was were be been being has have had do does did not no as if so than then there their they them he she his her
him who whom which what when where why how all any some more most other such only own same too very can will just
should now user users""".split())


# The same candidate facts come back for fact after fact of a batch: their words, normal form and slot are
# computed once (pure functions of the text; frozensets, so that no caller can change a cached value).
@lru_cache(maxsize=4096)
def _words(text: str) -> frozenset[str]:
    return frozenset(w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS)


def _speaker(author: str) -> str | None:
    low = author.strip().lower()
    if low in MACHINE_AUTHORS:
        return None
    return "The user" if low in USER_AUTHORS else author.strip()


def _topics_of(sentence: str, topics: list[dict[str, Any]]) -> list[str]:
    found = []
    for topic in topics:
        label = topic["label"]
        if topic.get("managed"):
            if TOPIC_PATTERNS[label].search(sentence):
                found.append(label)
        elif _words(sentence) & {w for w in _words(label + " " + topic.get("description", "")) if len(w) >= 4}:
            found.append(label)
    # KEY_CONVERSATION_DETAILS is the fallback: only when nothing more specific matched.
    if len(found) > 1 and "KEY_CONVERSATION_DETAILS" in found:
        found.remove("KEY_CONVERSATION_DETAILS")
    return found


DISCOURSE = re.compile(r"^(?:actually|well|so|oh|yeah|yes|also|anyway|honestly|by the way|btw|and|but|plus|"
                       r"hey|hi|wow|haha|lol|ok|okay|um|hmm)\b[,!]?\s*", re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    """Sentences, and clauses that start a new first-person statement ("..., I love cats")."""
    parts = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text.strip()):
        for clause in re.split(r"(?:,|;|\s+and|\s+but)\s+(?=(?:I|I'm|I've|my|My)\b)", sentence):
            clause = clause.strip()
            while DISCOURSE.match(clause):
                clause = DISCOURSE.sub("", clause, count=1)
            if clause:
                parts.append(clause[:1].upper() + clause[1:])
    return parts


LANGUAGES = ("English",)
"""The languages the rules read; events in others are reported under ``not_extracted``, never silently dropped."""

# Letters of a script that is not Latin name the language (or the script) outright.
_SCRIPTS = [
    ("Japanese", re.compile(r"[\u3040-\u30ff]")),           # hiragana, katakana
    ("Korean", re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")),
    ("Chinese", re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")),
    ("Russian or another Cyrillic-script language", re.compile(r"[\u0400-\u04ff]")),
    ("Greek", re.compile(r"[\u0370-\u03ff]")),
    ("Arabic-script", re.compile(r"[\u0600-\u06ff]")),
    ("Hebrew", re.compile(r"[\u0590-\u05ff]")),
    ("Devanagari-script", re.compile(r"[\u0900-\u097f]")),
    ("Thai", re.compile(r"[\u0e00-\u0e7f]")),
]
# Latin-script languages told apart from English by their most common words.
_FUNCTION_WORDS = {
    "English": set("the and is are was i you my to of in it that with for have not this".split()),
    "French": set("le la les et est je tu mon ma mes des une un du que pas avec pour dans suis ai c'est j'ai".split()),
    "Spanish": set("el la los las y es yo mi mis que una un del con para por pero muy soy estoy tengo".split()),
    "German": set("der die das und ist ich du mein meine nicht ein eine mit für auf bin habe auch".split()),
    "Portuguese": set("o os as e é eu meu minha não uma um com para por mas muito sou estou tenho".split()),
    "Italian": set("il lo gli le e è io mio mia non una un con per che sono ho anche molto".split()),
}


def language_of(text: str) -> str:
    """The language ``text`` is written in, as far as the rules can tell ("English" when unsure)."""
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return "English"
    for language, script in _SCRIPTS if not text.isascii() else ():  # every script above is outside ASCII
        if len(script.findall(text)) >= 0.3 * len(letters):
            return "Japanese" if language == "Chinese" and _SCRIPTS[0][1].search(text) else language
    words = re.findall(r"[^\W\d_]+(?:'[^\W\d_]+)?", text.lower())
    hits = {language: sum(w in vocabulary for w in words) for language, vocabulary in _FUNCTION_WORDS.items()}
    best = max(hits, key=lambda language: (hits[language], language == "English"))
    return best if hits[best] >= 2 and hits[best] > hits["English"] else "English"


TECH = r"([A-Z][\w.+#-]*(?:\s*(?:,|and|&)\s*[A-Z][\w.+#-]*)*)"
TECH_PATTERNS = [
    re.compile(r"\b(?:I|[Ww]e|[Tt]he user) (?:use|uses|work with|works with|program in|programs in|code in|codes in|"
               r"develop in|am learning|is learning|build with|builds with)\s+" + TECH),
    re.compile(r"\bbuild(?:ing)? (?:a|an|my|our) " + TECH + r"\s+(?:agent|app|application|service|bot|project|"
               r"website|site|api|tool|pipeline|model)s?\b"),
    re.compile(r"\bspeciali[sz]e[sd]? in\s+" + TECH),
]
LANGUAGE_PATTERN = re.compile(r"\b(?:I|[Ww]e|[Tt]he user) (?:program|programs|code|codes|write|writes|prefer coding|"
                              r"prefers coding) (?:mostly |mainly )?in\s+" + TECH)
TECH_FIELD_WORDS = {"stack", "technical", "technology", "technologie", "tech", "tool", "framework", "skill",
                    "programming"}


def _field_words(field: str, spec: dict[str, Any]) -> frozenset[str]:
    return _words(field.replace("_", " ") + " " + str(spec.get("description") or spec.get("title") or ""))


def _spec(prop: dict[str, Any]) -> dict[str, Any]:
    for option in prop.get("anyOf") or []:
        if option.get("type") != "null":
            return {**prop, **option}
    return prop


def _items(found: str) -> list[str]:
    items = (t.strip().rstrip(".,;:!?") for t in re.split(r"\s*(?:,|\band\b|&)\s*", found))
    return [t for t in items if t]


def _profile_values(text: str, schemas: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The field values one utterance states, per schema: {schema_id: {field: value}}."""
    tech = [t for p in TECH_PATTERNS for m in p.finditer(text) for t in _items(m.group(1))]
    language = [t for m in LANGUAGE_PATTERN.finditer(text) for t in _items(m.group(1))]
    words = _words(text.replace("-", " "))
    result: dict[str, dict[str, Any]] = {}
    for schema_id, schema in schemas.items():
        for field, prop in (schema.get("properties") or {}).items():
            spec = _spec(prop)
            fwords = _field_words(field, spec)
            value: Any = None
            if "enum" in spec:
                for option in spec["enum"]:
                    if _words(str(option).replace("_", " ")) <= words:
                        value = option
                        break
            elif spec.get("type") in ("string", "array"):
                found = language if "language" in fwords else tech if fwords & TECH_FIELD_WORDS else []
                found = list(dict.fromkeys(found))
                if found:
                    value = found if spec.get("type") == "array" else ", ".join(found)
            if value is not None:
                result.setdefault(schema_id, {})[field] = value
    return result


def extract(request: dict[str, Any]) -> dict[str, Any]:
    """Extraction by rules: ``{"memories": [{"fact", "topics", "source_event_ids"}], "not_extracted": [...],
    "profiles": {...}}``.

    ``not_extracted`` lists, per language the rules cannot read (LANGUAGES),
    the events in it with the reason, so that the operation says why they
    gave no memory. ``profiles`` (when the request names profile schemas)
    holds the field values the rules recognise, per schema.
    """
    events = request.get("events") or []
    profiles: dict[str, dict[str, Any]] = {}
    for event in events if request.get("profile_schemas") else []:
        name = _speaker(event["author"])
        if name is None or not event.get("text"):
            continue
        for schema_id, fields in _profile_values(event["text"], request["profile_schemas"]).items():
            for field, value in fields.items():
                said = "said" if event["author"] != "fact" else "is known to"
                context = f'{name if name != "fact" else "The user"} {said}: "{event["text"].strip()}"'
                earlier = profiles.setdefault(schema_id, {}).get(field)
                sources = [event["event_id"]]
                if earlier is not None:  # several events state this field: merge as consolidation would
                    sources = earlier["source_event_ids"] + sources
                    context = earlier["context"] + " " + context
                    if isinstance(value, list):
                        value = list(dict.fromkeys(earlier["value"] + value))
                    elif "enum" not in _spec(request["profile_schemas"][schema_id]["properties"][field]):
                        value = ", ".join(dict.fromkeys(_items(earlier["value"] + ", " + value)))
                profiles[schema_id][field] = {"value": value, "source_event_ids": sources, "context": context}
    if request.get("profiles_only"):
        return {"memories": [], "profiles": profiles}
    memories = _extract_memories(request, events)
    return {**memories, "profiles": profiles} if request.get("profile_schemas") else memories


def _extract_memories(request: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    authors = [a for a in dict.fromkeys(e["author"] for e in events) if _speaker(a)]
    memories: list[dict[str, Any]] = []
    unsupported: dict[str, list[str]] = {}
    seen: set[str] = set()
    for event in events:
        name = _speaker(event["author"])
        if name is None or not event.get("text"):
            continue
        language = language_of(event["text"])
        if language not in LANGUAGES:
            ids = unsupported.setdefault(language, [])
            if event["event_id"] not in ids:
                ids.append(event["event_id"])
            continue
        others = [a for a in authors if a != event["author"]]
        other = _speaker(others[0]) if len(others) == 1 else None
        said_on = datetime.fromisoformat(event["timestamp"]).date()
        for said in _sentences(event["text"]):
            sentence = SUFFIX.sub("", PREFIX.sub("", said))
            if (said.endswith("?") or len(sentence.split()) < MIN_WORDS or SMALL_TALK.match(sentence)
                    or VAGUE_END.search(sentence) or not FIRST_PERSON.search(sentence) or FEELING.match(sentence)):
                continue
            if re.search(r"\byou\b", sentence, re.IGNORECASE) and other is None:
                continue  # "you" with no one to name: not a fact about the speaker
            topics = _topics_of(said, request.get("topics") or [])  # "Please remember ..." is an instruction
            if not topics:
                continue
            fact = resolve_relative_time(to_third_person(sentence, name, other), said_on)
            fact = re.sub(r"(\s+now)?[!.,;:]*$", "", fact) + "."
            fact = fact[:1].upper() + fact[1:]
            if fact.lower() in seen or fact.lower() == f"{name}'s name is {name}.".lower():  # no tautologies
                continue
            seen.add(fact.lower())
            memories.append({"fact": fact, "topics": topics, "source_event_ids": [event["event_id"]]})
    reply: dict[str, Any] = {"memories": memories}
    if unsupported:
        reply["not_extracted"] = [
            {"source_event_ids": ids,
             "reason": f"unsupported language: {language}; the rules provider extracts facts from "
                       f"{', '.join(LANGUAGES)} only (use a model provider: gemini or openai)"}
            for language, ids in unsupported.items()]
    return reply


# -- consolidation --------------------------------------------------------------

_POSITIVE = r"loves|likes|enjoys|adores|prefers|is passionate about|is a fan of"
_NEGATIVE = r"hates|dislikes|doesn't like|does not like|can't stand|no longer likes|is not a fan of"
SLOTS = [
    ("name", re.compile(r"^(?P<s>.+?)'s name is (?P<v>.+)$")),
    ("name", re.compile(r"^(?P<s>.+?) (?:is called|goes by) (?P<v>.+)$")),
    ("city", re.compile(r"^(?P<s>.+?) (?:lives|is living|has moved|moved|is moving|relocated) (?:in|to) (?P<v>.+)$")),
    ("job", re.compile(r"^(?P<s>.+?) (?:works|is working) (?:as|at|for) (?P<v>.+)$")),
    ("job", re.compile(r"^(?P<s>.+?)'s job is (?P<v>.+)$")),
    ("age", re.compile(r"^(?P<s>.+?) is (?P<v>\d+) years old")),
    ("favourite", re.compile(r"^(?P<s>.+?)'s favou?rite (?P<k>[a-z]+(?: [a-z]+)?) is (?P<v>.+)$")),
    ("liking", re.compile(rf"^(?P<s>.+?) (?:really |truly |also |still )?(?P<v>{_POSITIVE}|{_NEGATIVE}) (?P<k>.+)$")),
]
_TRAILING_TIME = re.compile(r",? (?:as of|on|in the week of|in|shortly before|around) [^,]*\d{4}[^,]*$")


@lru_cache(maxsize=4096)
def _normal(text: str) -> str:
    text = _TRAILING_TIME.sub("", text.strip().rstrip(".!").lower())
    return re.sub(r"\s+", " ", text)


@lru_cache(maxsize=4096)
def slot_of(fact: str) -> tuple[str, str, str] | None:
    """The (subject, slot, value) a fact states, e.g. ("the user", "name", "joy"), or None."""
    text = _normal(fact)
    for slot, pattern in SLOTS:
        m = pattern.match(text)
        if not m:
            continue
        key = slot
        if "k" in pattern.groupindex:
            key = f"{slot}:" + " ".join(w.rstrip("s") for w in m.group("k").split() if w not in ("a", "an", "the"))
        value = m.group("v")
        if slot == "liking":
            value = "negative" if re.fullmatch(_NEGATIVE, value) else "positive"
        return m.group("s"), key, value
    return None


def _negated(fact: str) -> tuple[str, frozenset[str]] | None:
    m = re.match(r"^(?P<s>.+?) (?:no longer|does not|doesn't) [a-z]+ (?P<o>.+)$", _normal(fact))
    return (m.group("s"), _words(m.group("o"))) if m else None


DUPLICATE_SIMILARITY = 0.95
DUPLICATE_OVERLAP = 0.6


def decide(fact: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """One consolidation action for ``fact`` against its ``candidates`` (see the module's docstring).

    Candidates named ``fact:N`` (earlier facts of the same batch, said
    before this one) are looked at first, latest first: the later statement
    changes what the earlier one wrote. A duplicate is NONE naming the memory
    that holds it.
    """
    earlier = sorted((c for c in candidates if str(c["name"]).startswith("fact:")), key=lambda c: -int(c["name"][5:]))
    candidates = earlier + [c for c in candidates if not str(c["name"]).startswith("fact:")]
    text = fact["fact"]
    slot = slot_of(text)
    words = _words(text)
    for c in candidates:
        if _normal(c["fact"]) == _normal(text):
            return {"action": "NONE", "memory_name": c["name"]}
    if slot:
        for c in candidates:
            other = slot_of(c["fact"])
            if other and other[:2] == slot[:2]:
                if other[2] == slot[2]:
                    return {"action": "NONE", "memory_name": c["name"]}
                if slot[1] == "city" and re.search(r"\bmoved to\b", text):
                    text = text.rstrip(".") + ", and lives there now."  # keeps the slot's own words
                return {"action": "UPDATE", "memory_name": c["name"], "fact": text}
    negated = _negated(text)
    if negated:
        for c in candidates:
            if _normal(c["fact"]).startswith(negated[0]) and negated[1] and negated[1] <= _words(c["fact"]):
                return {"action": "DELETE", "memory_name": c["name"]}
    for c in candidates:
        overlap = len(words & _words(c["fact"])) / max(1, len(words | _words(c["fact"])))
        if (c.get("similarity") or 0) >= DUPLICATE_SIMILARITY and overlap >= DUPLICATE_OVERLAP:
            return {"action": "NONE", "memory_name": c["name"]}
    return {"action": "CREATE"}


def consolidate(request: dict[str, Any]) -> dict[str, Any]:
    """Consolidation by rules: ``{"actions": [...]}``, one per fact of the batch (``request["candidates"]``)."""
    facts = request.get("facts") or []
    actions = []
    for plan in request.get("candidates") or []:
        index = plan["index"]
        actions.append({"fact_index": index, **decide(facts[index], plan["candidates"])})
    merged = []
    for m in request.get("profile_merges") or []:
        items = [t.strip() for t in re.split(r"[,;]", f"{m['current']},{m['new']}") if t.strip()]
        value = ", ".join(dict.fromkeys(items, None).keys())
        merged.append({"schema_id": m["schema_id"], "field": m["field"], "value": value})
    return {"actions": actions, "profile_fields": merged} if merged else {"actions": actions}


def compact(request: dict[str, Any]) -> dict[str, Any]:
    """Compaction by rules, extractive: the most informative facts, each dated, within ``max_tokens``.

    A fact's information is its count of distinct content words not already
    kept; the richest are kept first (ties: oldest first), exact and
    near-duplicates (no new content word) are dropped, and the kept facts are
    written oldest first as ``[YYYY-MM-DD] fact`` until the budget (words x 4/3
    as tokens) is spent. Nothing is invented: every sentence is a stored fact.
    """
    memories = list(request.get("memories") or [])
    budget = int(request.get("max_tokens") or 400)
    seen: set[str] = set()
    scored = sorted(enumerate(memories), key=lambda x: (-len(_words(x[1].get("fact", ""))), x[0]))
    kept: list[int] = []
    used = 0
    for index, memory in scored:
        new = _words(memory.get("fact", "")) - seen
        if not new:
            continue
        cost = -(-len(memory.get("fact", "").split()) * 4 // 3) + 4
        if used + cost > budget:
            continue
        kept.append(index)
        used += cost
        seen |= new
    lines = [f"[{str(memories[i].get('create_time', ''))[:10]}] {memories[i]['fact'].strip()}" for i in sorted(kept)]
    return {"summary": "\n".join(lines)}


class RulesProvider:
    """The offline provider: answers extraction and consolidation requests by rules (no model, no network).

    It reads English only (``languages``); events in other languages come back
    under ``not_extracted`` with the reason, kept in the operation's
    ``rejected_items``.
    """

    name = "rules"
    model_id = "rules/v1"
    languages = LANGUAGES

    def complete(self, prompt: str, response_schema: dict[str, Any] | None = None, *,
                 input: dict[str, Any] | None = None) -> str:
        """Answer a request from its structured ``input`` (``input["task"]``: ``extract``, ``consolidate``, ``compact``).

        Returns the reply as JSON text, as a model would. Raises
        GenerationError for a request without a task the rules know: they
        cannot read free prompts.
        """
        task = (input or {}).get("task")
        if task == "extract":
            return json.dumps(extract(input or {}))
        if task == "consolidate":
            return json.dumps(consolidate(input or {}))
        if task == "compact":
            return json.dumps(compact(input or {}))
        raise GenerationError(f"the rules provider cannot answer task {task!r}",
                              hint="it answers membank's extract and consolidate jobs; use gemini or openai "
                                   "for free prompts")
