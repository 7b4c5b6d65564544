"""What a belief claims, as a (predicate key, value) pair, for the few predicates that hold one value.

Someone lives in one place, works at one employer and as one thing, has one age, one favourite of each
kind and one preference between alternatives. Two live beliefs about the same subject that give such a
predicate different values contradict each other: :mod:`memory.conflicts` links them at write time.

Parsing is deterministic and deliberately narrow: a statement is parsed only when its predicate is
said of the subject itself in the present tense ("Lives in Lisbon.", "Alice works at Acme as a
nurse." gives the first predicate it states). Anything else is not parsed, so nothing is linked:
another person ("Alice's sister lives in Porto"), the past ("used to live in", "lived in", "no longer
lives in"), a negation ("does not live in"), a plan ("wants to live in"), or a different predicate
("lives near"). A missed contradiction stays as it was before; a wrong link would mark two true
beliefs as disputed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Who the statement is about, said before the predicate: nothing (the subject is implied), a pronoun,
#: or a name of up to three capitalised words. Anything longer (another person, a tense, a negation,
#: a plan) is not a present claim about the subject.
_WHO = r"(?:(?i:he|she|they|i|the user|user)|[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2})?"
_POSSESSOR = r"(?:(?i:his|her|their|my)|[A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2}(?:'s|\u2019s|s'))"

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("lives_in", re.compile(rf"^{_WHO}\s*(?i:lives|live|is living|currently lives)\s+(?i:in)\s+(?P<value>.+)$")),
    ("works_at", re.compile(rf"^{_WHO}\s*(?i:works|work|is working)\s+(?i:at|for)\s+(?P<value>.+)$")),
    ("works_as", re.compile(rf"^{_WHO}\s*(?i:works|work|is working)\s+(?i:as)\s+(?P<value>.+)$")),
    ("age", re.compile(rf"^{_WHO}\s*(?i:is|am)\s+(?P<value>\d{{1,3}})\s+(?i:years?)\s+(?i:old)\b.*$")),
    ("prefers", re.compile(rf"^{_WHO}\s*(?i:prefers|prefer)\s+(?P<value>.+)$")),
)
_FAVOURITE = re.compile(
    rf"^(?:{_POSSESSOR}\s+)?(?i:favou?rite)\s+(?P<kind>[a-z][a-z ]{{0,30}}?)\s+(?i:is|are)\s+(?P<value>.+)$"
)
#: A value ends at a clause that adds circumstances rather than changing the value.
_VALUE_END = re.compile(
    r"\s*(?:,|;|\(|\bsince\b|\bwith\b|\band\b|\bas\b|\bnow\b|\bthese days\b|\bfor now\b|\bat the moment\b|"
    r"\bover\b|\bto\b|\brather than\b|\binstead of\b|\bbecause\b|\bwhere\b|\bwhich\b).*$",
    re.IGNORECASE,
)
_WORDS = re.compile(r"[a-z0-9]+")
_ARTICLES = frozenset({"a", "an", "the", "in", "at", "of", "and"})
#: Values at least this similar (Jaccard over their words), or one contained in the other, are the same.
SAME_VALUE_JACCARD = 0.5


@dataclass(frozen=True)
class Claim:
    predicate: str
    value: str

    @property
    def words(self) -> frozenset[str]:
        return frozenset(w for w in _WORDS.findall(self.value) if w not in _ARTICLES)


def parse_claim(body: str) -> Claim | None:
    """The (predicate key, value) a statement claims of its subject, or None when it claims none of them."""
    text = " ".join(body.split()).strip(" .!?\"'\u201c\u201d")
    favourite = _FAVOURITE.match(text)
    if favourite:
        kind = " ".join(favourite["kind"].lower().replace("colour", "color").split())
        return _claim(f"favourite:{kind}", favourite["value"])
    for predicate, pattern in _PATTERNS:
        match = pattern.match(text)
        if match:
            return _claim(predicate, match["value"])
    return None


def _claim(predicate: str, raw: str) -> Claim | None:
    value = " ".join(_WORDS.findall(_VALUE_END.sub("", raw).lower()))
    return Claim(predicate, value) if value else None


def contradicts(a: Claim, b: Claim) -> bool:
    """Same predicate, values that are not the same thing said twice."""
    if a.predicate != b.predicate:
        return False
    words_a, words_b = a.words, b.words
    if not words_a or not words_b or words_a <= words_b or words_b <= words_a:
        return False
    return len(words_a & words_b) / len(words_a | words_b) < SAME_VALUE_JACCARD
