"""The deterministic query former: no model call on the critical path.

From the current message (plus recent turn text when the message alone carries no signal), the
active subjects (the requester and people the message names, resolved through the perspective's own
actors, never invented) and the session's project, it builds one :class:`RecallQuery`.

Self-knowledge questions ("which car do I drive?", "how do I like my coffee?") anchor the structured
arm to the asked belief types; a possessive "my ..." anchors the requester's ownership statements.
Advice ("which car should I buy?") and generic how-to questions ("how do I deploy this?") do not.

A caller (the ``recall`` verb) may add what the message cannot say: ``subjects``, people the
memories it wants are about (evidence in ranking, never an eligibility rule; a memory about someone
else loses nothing), and ``type_hints``, the belief types it wants (a narrowing of the eligible set,
never a widening).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from accounts.models import Actor
from memory.models import BeliefType

WORD = re.compile(r"[a-z0-9']+")

#: Bounded list of English function words. Negations are deliberately absent: they carry meaning.
FUNCTION_WORDS = frozenset(
    "a an the this that these those is are was were be been being am do does did doing have has had having "
    "i me my mine myself you your yours we our ours he him his she her hers it its they them their theirs "
    "what which who whom whose when where why how of in on at to for from by with about as into onto over "
    "under up down out off than then so too very can could should would will shall may might must "
    "and or but if because while though also just any some all each every again there here "
    "what's it's that's there's here's i'm i've i'd i'll you're you've we're we've they're he's she's let's".split()
)
#: Words of broad catch-up questions ("what's new?", "any updates lately?"), which run as empty queries
#: ranked by subject, conversation and recency rather than matching the word "new".
BROAD_WORDS = frozenset(
    "new news anything something update updates latest happening happened lately recently going on catch "
    "up since last time changed change".split()
)

FIRST_PERSON = re.compile(r"\b(i|my|me|mine|myself|i'm|i've|i'd)\b")
ADVICE = re.compile(r"\b(should|could|would|shall)\s+i\b|\bi\s+(should|ought)\b|\brecommend\b|\bsuggest\b")
QUESTION = re.compile(r"\?|^\s*(what|which|who|whom|where|when|how|do|does|did|am|is|are|can|tell)\b")

#: Explicit profile predicates per belief type. "how" questions anchor only through these.
TYPE_PREDICATES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        BeliefType.PREFERENCE,
        re.compile(r"\b(prefer\w*|like|likes|liked|love|hate|dislike|favou?rite|enjoy|take my|have my|want my)\b"),
    ),
    (
        BeliefType.RELATIONSHIP,
        re.compile(
            r"\b(wife|husband|partner|spouse|son|daughter|kids?|children|child|mother|mom|mum|father|dad|"
            r"brother|sister|friend|boss|manager|colleague|family|married|dog|cat|pet)\b"
        ),
    ),
    (
        BeliefType.USER_MODEL_ATTR,
        re.compile(
            r"\b(drive|drives|live|lives|work|works|job|name|age|old|born|birthday|own|owns|car|home|"
            r"address|allergic|allergy|speak|from)\b"
        ),
    ),
)
ROUTINE = re.compile(r"\b(usually|normally|typically|every|routine|always)\b")
POSSESSIVE = re.compile(r"\bmy\s+([a-z][a-z0-9'-]*)")
#: Policy suffixes of a recall given ``subjects`` (the asked-subject feature) and ``type_hints``.
SUBJECTS_POLICY_TAG = "+subjects@1"
TYPE_HINTS_POLICY_TAG = "+type-hints@1"


@dataclass(frozen=True)
class RecallQuery:
    """One recall request after forming. ``text`` empty means an empty query (rank by subject and recency)."""

    text: str = ""
    subject_ids: tuple[int, ...] = ()
    named_subject_ids: tuple[int, ...] = ()
    anchor_types: tuple[str, ...] = ()
    owned_resources: bool = False
    as_of: datetime | None = None
    known_at: datetime | None = None
    include_provisional: bool = True
    #: Policy suffixes the former adds (e.g. ``+owned-resources@1``), recorded in the trace.
    policy_tags: tuple[str, ...] = field(default=())
    #: What the relevance arms match: ``text`` without the names of the people it names (a name
    #: matches every statement about that person, which the subject feature already rewards). Empty
    #: when nothing was taken out, or nothing would be left: then the arms match ``text``.
    match_text: str = ""
    #: The question is in the first person: it is about the requester too, whoever else it names.
    first_person: bool = False
    #: People the caller said the wanted memories are about (the recall verb's ``subjects``): a memory
    #: about one of them ranks higher; nobody else's memories lose anything, and none becomes eligible.
    asked_subject_ids: tuple[int, ...] = ()
    #: The only belief types to return (the recall verb's ``type_hints``), () for every type: a filter
    #: over the eligible set, applied after every eligibility rule.
    belief_types: tuple[str, ...] = ()

    @property
    def arm_text(self) -> str:
        return self.match_text or self.text

    @functools.cached_property
    def empty(self) -> bool:
        """No content words, or only those of a broad catch-up question."""
        return set(content_terms(self.text)) <= BROAD_WORDS


def content_terms(text: str) -> list[str]:
    """The words that can match: lower-cased, function words removed, negations kept."""
    return [w for w in WORD.findall(text.lower()) if w not in FUNCTION_WORDS]


def self_knowledge_types(text: str) -> tuple[str, ...]:
    """The belief types a first-person question asks about, or () for anything else."""
    lowered = text.lower()
    if not FIRST_PERSON.search(lowered) or not QUESTION.search(lowered) or ADVICE.search(lowered):
        return ()
    asked = [belief_type for belief_type, predicate in TYPE_PREDICATES if predicate.search(lowered)]
    if ROUTINE.search(lowered) and asked:
        asked += [BeliefType.PREFERENCE, BeliefType.USER_MODEL_ATTR]
    return tuple(dict.fromkeys(str(t) for t in asked))


def asks_about_own_resource(text: str) -> bool:
    """A possessive "my <thing>" in a question that is not advice ("what fuel for my car?")."""
    lowered = text.lower()
    return bool(POSSESSIVE.search(lowered) and QUESTION.search(lowered) and not ADVICE.search(lowered))


@functools.lru_cache(maxsize=4096)
def _whole_word(alias: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w]){re.escape(alias)}(?![\w])")


def named_actor_ids(text: str, actors: Sequence[Actor]) -> tuple[int, ...]:
    """Actors whose current display name (or external id) the text names as a whole word."""
    lowered = f" {text.lower()} "
    named = []
    for actor in actors:
        for alias in {actor.display_name.lower(), actor.external_id.lower()}:
            # The substring test is the cheap filter; the pattern only confirms word boundaries.
            if alias and alias in lowered and _whole_word(alias).search(lowered):
                named.append(actor.pk)
                break
    return tuple(sorted(set(named)))


def without_names(text: str, actors: Sequence[Actor], named: Sequence[int]) -> str:
    """``text`` with the named actors' names (and a possessive "'s") taken out, or "" when that
    changes nothing or leaves no content word.

    Only a question about the people it names loses their names ("What did Caroline research?"): a
    first-person question is about the requester, and a name in it is what is asked about ("Is my
    manager Victor?"), so it stays."""
    if FIRST_PERSON.search(text.lower()):
        return ""
    stripped = text
    for actor in actors:
        if actor.pk not in named:
            continue
        for alias in sorted({actor.display_name, actor.external_id}, key=len, reverse=True):
            if alias:
                stripped = re.sub(rf"(?<![\w]){re.escape(alias)}(?:'s|\u2019s)?(?![\w])", " ", stripped, flags=re.I)
    stripped = " ".join(stripped.split())
    if stripped == text or not content_terms(stripped):
        return ""
    return stripped


def form_query(
    *,
    message: str,
    recent_texts: Sequence[str] = (),
    requester_id: int | None = None,
    known_actors: Sequence[Actor] = (),
    as_of: datetime | None = None,
    known_at: datetime | None = None,
    asked_subject_ids: Sequence[int] = (),
    belief_types: Sequence[str] = (),
) -> RecallQuery:
    """Build the recall query for one turn. Deterministic: the same inputs give the same query.

    ``asked_subject_ids`` and ``belief_types`` are the caller's (the recall verb's resolved
    ``subjects`` and ``type_hints``); each adds its policy tag, so a trace says how it was ranked."""
    text = message.strip()
    if not content_terms(text) and recent_texts:
        # "Can you redo that?" carries no signal; the recent turns carry the task.
        text = " ".join(t.strip() for t in recent_texts[-2:] if t.strip())
    named = named_actor_ids(text, known_actors)
    subjects = tuple(dict.fromkeys([*([requester_id] if requester_id is not None else []), *named]))
    anchor_types = self_knowledge_types(message)
    owned = asks_about_own_resource(message)
    asked = tuple(dict.fromkeys(asked_subject_ids))
    types = tuple(sorted({str(t) for t in belief_types}))
    tags = (
        *(("+owned-resources@1",) if owned else ()),
        *((SUBJECTS_POLICY_TAG,) if asked else ()),
        *((TYPE_HINTS_POLICY_TAG,) if types else ()),
    )
    return RecallQuery(
        text=text,
        subject_ids=subjects,
        named_subject_ids=named,
        anchor_types=anchor_types,
        owned_resources=owned,
        as_of=as_of,
        known_at=known_at,
        policy_tags=tags,
        match_text=without_names(text, known_actors, named),
        first_person=bool(FIRST_PERSON.search(text.lower())),
        asked_subject_ids=asked,
        belief_types=types,
    )
