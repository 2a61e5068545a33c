"""First-person sentences rewritten as third-person facts about the speaker.

"I love cats" said by Alice becomes "Alice loves cats"; "my" becomes
"Alice's"; "you" becomes the other speaker. Verb agreement follows English
rules for the third person singular (-s, -es, -ies, and the irregular
be/have/do/go); past tenses and modals stay. A baseline for the offline
``rules`` provider, not a parser: honest about being weaker than a model.
"""

from __future__ import annotations

import re

MODALS = {"can", "could", "will", "would", "shall", "should", "may", "might", "must", "ought", "used",
          "can't", "couldn't", "won't", "wouldn't", "shouldn't", "didn't", "wasn't", "weren't", "hadn't"}
IRREGULAR_PAST = set("""went was were had did made got saw took came gave found thought told became left felt
brought began kept held wrote stood heard met ran paid sat spoke lost bought taught caught fell won sold
built sent spent grew drew drove ate flew knew threw wore chose forgot rode swam sang woke broke hid put
let set cut hit quit became understood led fed fought lent meant slept swept shot shut sought began
begun been gone done seen taken given known shown grown drawn thrown flown written ridden spoken stolen
forgotten chosen felt dealt dreamt learnt burnt spelt spilt""".split())
IRREGULAR_PRESENT = {"am": "is", "are": "is", "be": "is", "have": "has", "do": "does", "go": "goes",
                     "don't": "doesn't", "haven't": "hasn't", "aren't": "isn't", "'m": "is", "'ve": "has",
                     "'d": "would", "'ll": "will"}
ADVERBS = {"just", "also", "really", "still", "always", "never", "often", "usually", "actually", "finally",
           "even", "only", "sometimes", "already", "definitely", "totally", "absolutely", "truly", "now",
           "then", "personally", "mostly", "rarely", "seriously", "honestly", "recently", "currently"}


def conjugate(verb: str) -> str:
    """The third person singular present of ``verb`` (``love`` → ``loves``); past tenses and modals unchanged."""
    low = verb.lower()
    if low in IRREGULAR_PRESENT:
        return IRREGULAR_PRESENT[low]
    if low in MODALS or low in IRREGULAR_PAST or low.endswith("ed") or low.endswith("n't"):
        return verb
    if re.search(r"(s|sh|ch|x|z|o)$", low):
        return verb + "es"
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    return verb + "s"


def _subject_verb(subject: str):
    """A substitution for "<pronoun> [adverb] verb" that makes the verb agree with ``subject``."""
    def replace(m: re.Match) -> str:
        adverb, verb = m.group(m.re.groups - 1) or "", m.group(m.re.groups)
        return f"{subject} {adverb}{conjugate(verb)}"
    return replace


def to_third_person(sentence: str, speaker: str, other: str | None) -> str:
    """Rewrite ``sentence`` said by ``speaker`` in the third person.

    Args:
        sentence: one sentence of a conversation turn.
        speaker: how to name its speaker, e.g. ``"Alice"`` or ``"The user"``.
        other: how to name the person addressed as "you", or None to leave
            "you" as it is.

    Returns:
        The rewritten sentence, first letter capitalised.
    """
    s = sentence.replace("\u2019", "'")
    name = speaker
    adverbs = "|".join(sorted(ADVERBS) + ["no longer", "not yet"])
    verb = r"((?:(?:" + adverbs + r") )?)([A-Za-z']+)"
    s = re.sub(r"\bI'm not\b", f"{name} is not", s)
    s = re.sub(r"\b(?:I'm|I am)\b", f"{name} is", s)
    s = re.sub(r"\bI've\b", f"{name} has", s)
    s = re.sub(r"\bI'd\b", f"{name} would", s)
    s = re.sub(r"\bI'll\b", f"{name} will", s)
    s = re.sub(r"\bI " + verb, _subject_verb(name), s)
    s = re.sub(r"\bI\b", name, s)
    s = re.sub(r"\b(?:my|My|mine|Mine)\b", f"{name}'s", s)
    s = re.sub(r"\b(?:myself|Myself|me|Me)\b", name, s)
    s = re.sub(r"\b(?:We're|we're)\b", f"{name} and others are", s)
    s = re.sub(r"\b(?:We've|we've)\b", f"{name} and others have", s)
    s = re.sub(r"\b(?:We|we|Us|us)\b", f"{name} and others", s)
    s = re.sub(r"\b(?:Our|our|Ours|ours)\b", f"{name}'s", s)
    if other:
        s = re.sub(r"\b(?:you're|You're|you are|You are)\b", f"{other} is", s)
        s = re.sub(r"\b(?:you've|You've)\b", f"{other} has", s)
        s = re.sub(r"\b(?:you were|You were)\b", f"{other} was", s)
        s = re.sub(r"\b(?:your|Your|yours|Yours)\b", f"{other}'s", s)
        # "you" + verb agrees only where "you" is a subject: at the start or after a conjunction.
        s = re.sub(r"(^|\b(?:and|but|when|if|that|because|so|as)\s+)(?:You|you) " + verb,
                   lambda m: m.group(1) + _subject_verb(other)(m), s)
        s = re.sub(r"\b(?:You|you|yourself)\b", other, s)
    s = s.strip()
    if name[:1].isupper() and name.split()[0] in ("The", "A"):
        # "The user" inside a sentence reads "the user".
        s = s[:1] + s[1:].replace(name, name[0].lower() + name[1:])
    return s[:1].upper() + s[1:]
