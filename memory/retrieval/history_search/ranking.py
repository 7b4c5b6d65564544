"""Ranking for history search: a pure function of the pool (eligible candidates and their fused
relevance) and the signals read beside it. It reorders the pool and never adds to it; no score can
restore a message the eligible set did not admit.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from memory.retrieval.history_search.query import NamedDate

POLICY_VERSION = "history@6"
RECENCY_DAYS = 90.0
#: Reciprocal-rank fusion's constant. Small, so that the first places of each arm stand apart from the
#: long tail (LoCoMo dev split, hybrid, turns: R@10 0.733 with 60, 0.750 with 10; 5 and 20 were no better).
RRF_K = 10
#: How many of the strongest matches have their neighbours looked up (one batched query): about three times
#: the default limit: LoCoMo recall@10 is 0.630 with 25 and 0.626 with 50, for half the lookups.
CONTEXT_SOURCES = 25
#: How many eligible messages on each side of a strong match count as its exchange, and how much less each
#: step away counts: the adjacent message gets the match's full weight, the next one half of it. A reply
#: often answers the line before the one that matched (A asks, B answers, A follows up with the words of
#: the question). LoCoMo dev split, beside BM25: R@10 0.796 with one message a side, 0.804 with two at
#: half weight; three, or a third or 0.7 of the weight, were no better. Since history@5 these neighbours
#: join the pool even when no arm proposed them (the answer to a matching question often shares neither
#: its words nor its meaning): R@10 0.813 -> 0.817 (reaching three a side then: 0.811; the neighbours of
#: 15 / 40 / 50 sources: 0.819 / 0.814 / 0.812, adversarial 0.814 -> 0.793 at 15).
CONTEXT_REACH = 2
CONTEXT_DECAY = 0.5

#: Messages further apart than this are not one exchange (neighbour context), and pool members of one
#: conversation further apart than this are not one sitting.
EXCHANGE_GAP = timedelta(hours=6)
#: How many of the strongest matches vote for their sitting (``sitting_strength``). LoCoMo dev split,
#: beside BM25 and two-message context: R@10 0.804 without sittings, 0.812 with 10 voters at weight 0.10;
#: 5 and 20 voters 0.811 and 0.808, weight 0.05 / 0.15 / 0.20: 0.810 / 0.811 / 0.809.
SITTING_SOURCES = 10

#: BM25's constants for the lexical arm's order: term-frequency saturation and length normalisation.
#: LoCoMo dev split (hybrid, turns, with history@3's features): R@10 0.787 in ``ts_rank``'s order, 0.796
#: in BM25's with (0.9, 0.4); (1.2, 0.75) and (1.2, 0.0) gave 0.795 and 0.792. Counting each held term
#: once, with the length in distinct lexemes (which halves the statement that reads the documents), gave
#: 0.810 against 0.812 on the final set (lexical mode 0.700 against 0.704).
BM25_K1 = 0.9
BM25_B = 0.4

#: history@5 weights (history@4's, and ``content``). The fused match leads (first in both arms -> 1.0;
#: first in one arm -> 0.5). A named author (0.50) and exchange context (0.35 x the neighbours' summed
#: match) can lift a weaker match past stronger ones by others or out of context, which is what a
#: question about a person or an exchange needs. A date the query names (0.30) lifts what was written
#: then past a somewhat better match from another day. A sitting that holds several of the strongest
#: matches (0.10) lifts its other lines past an equal match from a sitting that holds none. A line
#: shorter than the pool's average says less than a longer one as closely matched (0.06 x its share of
#: the average): a one-line reaction ("Wow, so cool!") rarely holds the answer (LoCoMo dev split, with
#: neighbours joining the pool: R@10 0.817 without it, 0.822 / 0.823 / 0.824 / 0.822 at 0.05 / 0.06 /
#: 0.07 / 0.08, 0.819 at 0.04: 0.06 is the middle of the plateau). The remaining features only break
#: near-ties; the demotion applies only to the recent window of the turn's own conversation. Every
#: feature is general (authorship, adjacency, time, length) rather than fitted to a benchmark's data;
#: the weights were measured on the LoCoMo development split only (docs/quality.md), never on its
#: held-out conversations.
#:
#: history@6 reads what a line's own words say of time (:mod:`memory.retrieval.dates`): a question asking
#: when, or for how long, lifts a line that tells a time (0.25). The line that answers "When did Caroline
#: go to the support group?" says "yesterday"; on the LoCoMo dev split 57-86% of the temporal questions'
#: evidence lines tell a time against 6-13% of all lines, in every conversation. LoCoMo dev split,
#: hybrid, turns: R@10 0.814 -> 0.820, temporal 0.890 -> 0.903; 0.15-0.30 is a plateau, 0.50 lowers
#: two conversations (docs/quality.md).
WEIGHTS = {
    "match": 1.00,
    "named": 0.50,
    "context": 0.35,
    "recency": 0.04,
    "same_actor": 0.03,
    "same_conversation": 0.03,
    "requester_spoke": 0.02,
    "current_window": -0.30,
    "date": 0.30,
    "sitting": 0.10,
    "content": 0.06,
    "tells_time": 0.25,
}
#: The features a candidate is scored on, in the order :func:`score_candidates` computes them (each
#: has a weight above; a test holds the two together).
FEATURES = (
    "match",
    "named",
    "context",
    "recency",
    "same_actor",
    "same_conversation",
    "requester_spoke",
    "current_window",
    "date",
    "sitting",
    "content",
    "tells_time",
)


@dataclass(frozen=True)
class Candidate:
    """A pool member (eligible, filtered, not excluded, proposed by an arm) and its fused relevance."""

    message_id: int
    conversation_id: int
    actor_id: int | None
    created_at: datetime
    match: float


@dataclass(frozen=True)
class Signals:
    """Everything besides the candidates that ranking reads; ``neighbours`` maps each context source
    to its eligible neighbours, each with its distance (1: adjacent, up to ``CONTEXT_REACH``)."""

    requester_ids: frozenset[int]
    named_ids: frozenset[int]
    spoke_in: frozenset[int]
    window: frozenset[int]
    conversation_id: int | None
    now: datetime
    neighbours: dict[int, tuple[tuple[int, int], ...]]
    #: The dates the query names (:func:`memory.retrieval.history_search.query.named_dates`).
    dates: tuple[NamedDate, ...] = ()
    #: Each pool member's length in distinct lexemes, of the documents BM25 reads (``content``), read by
    #: the statements that admitted them; a message without one (a neighbour taken in for its context
    #: alone) gets no content credit.
    lengths: Mapping[int, int] = field(default_factory=dict)
    #: Whether the query asks when something happened, or for how long (``tells_time``).
    asks_when: bool = False
    #: The pool members whose text tells a time (:func:`memory.retrieval.dates.tells_time`), read only
    #: when the query asks when.
    timed: frozenset[int] = frozenset()


@dataclass(frozen=True)
class PoolDocument:
    """A pool member's sidecar document as BM25 reads it: its length in distinct lexemes and which of the
    query's terms it holds, each counted once (a chat message rarely repeats a word); read by
    :data:`memory.retrieval.history_search.candidates._POOL_DOCUMENT`."""

    length: int
    terms: frozenset[str]


def lexical_order(lexical_ids: Sequence[int], documents: Mapping[int, PoolDocument]) -> list[int]:
    """The lexical arm's matches in BM25 order, best first; ties keep the arm's own order (``ts_rank``,
    then newest).

    ``ts_rank`` counts every query term alike, so a message repeating a word most messages share
    outranks one holding the query's one rare word. BM25 weighs each term by its rarity (inverse
    document frequency) and saturates repeats. Its statistics (document frequency, the collection's
    size and average length) are those of ``documents``: the eligible pool, every arm's admitted
    candidates. Nothing outside the pool is counted, so no message the eligible set did not admit
    shapes the order; and it orders the arm's own matches, so it adds nothing.
    """
    if not documents:
        return list(lexical_ids)
    size = len(documents)
    average = sum(d.length for d in documents.values()) / size or 1.0
    frequency: dict[str, int] = {}
    for document in documents.values():
        for term in document.terms:
            frequency[term] = frequency.get(term, 0) + 1

    def bm25(message_id: int) -> float:
        document = documents.get(message_id)
        if document is None:
            return 0.0
        # A held term's frequency in the document is 1.
        length_norm = BM25_K1 * (1 - BM25_B + BM25_B * document.length / average)
        return sum(
            math.log(1 + (size - frequency[term] + 0.5) / (frequency[term] + 0.5)) * (BM25_K1 + 1) / (1 + length_norm)
            for term in document.terms
        )

    scores = {message_id: bm25(message_id) for message_id in lexical_ids}
    return sorted(lexical_ids, key=lambda message_id: -scores[message_id])


def fused_match(
    message_id: int,
    ranks: dict[str, dict[int, int]],
    relevance_arms: Sequence[str],
    unranked: Mapping[str, Collection[int]] | None = None,
) -> float:
    """Reciprocal-rank fusion over the arms that ran and could rank the message, normalised so that
    first in every one of them is 1.0.

    ``unranked`` names, per arm, the messages it cannot rank yet: the semantic arm before the worker
    has embedded a message written a moment ago. Such an arm is left out of that message's scale, as
    if it had not been asked, rather than counted as a poor match; once the vector exists the arm
    counts for it like for any other.
    """
    arms = [arm for arm in relevance_arms if not unranked or message_id not in unranked.get(arm, ())]
    if not arms:
        return 0.0
    fused = sum(1 / (RRF_K + ranks[arm][message_id]) for arm in arms if message_id in ranks.get(arm, {}))
    return fused / (len(arms) / (RRF_K + 1))


def context_sources(candidates: Iterable[Candidate]) -> list[int]:
    """The strongest matches, whose neighbours are looked up: a bounded number, best first."""
    ranked = sorted((c for c in candidates if c.match > 0), key=lambda c: (-c.match, c.message_id))
    return [c.message_id for c in ranked[:CONTEXT_SOURCES]]


def sitting_strength(candidates: Sequence[Candidate]) -> dict[int, float]:
    """Each candidate's sitting's share of the strongest matches: 1.0 for the sitting whose members
    among the ``SITTING_SOURCES`` best matches sum to the most, proportionally less for others, 0.0 for
    a sitting none of them is in.

    A sitting is a run of one conversation's pool members with no gap longer than ``EXCHANGE_GAP``
    between consecutive ones: what was said at one sitting is talked about together, so a sitting where
    several of the best matches were said is where the rest of the answer likely is too, and a weak
    match there is likelier relevant than an equal one elsewhere. A pure function of the pool: it reads
    no message outside it.
    """
    sitting_of: dict[int, int] = {}
    sitting, previous = -1, None
    for candidate in sorted(candidates, key=lambda c: (c.conversation_id, c.created_at, c.message_id)):
        if (
            previous is None
            or candidate.conversation_id != previous.conversation_id
            or candidate.created_at - previous.created_at > EXCHANGE_GAP
        ):
            sitting += 1
        sitting_of[candidate.message_id] = sitting
        previous = candidate
    strongest = sorted((c for c in candidates if c.match > 0), key=lambda c: (-c.match, c.message_id))
    votes: dict[int, float] = {}
    for candidate in strongest[:SITTING_SOURCES]:
        votes[sitting_of[candidate.message_id]] = votes.get(sitting_of[candidate.message_id], 0.0) + candidate.match
    if not votes:
        return {}
    most = max(votes.values())
    return {message_id: votes.get(sitting, 0.0) / most for message_id, sitting in sitting_of.items()}


def content_share(lengths: Mapping[int, int]) -> dict[int, float]:
    """Each message's length as a share of the average over ``lengths``, capped at 1.0: a line as long
    as the average says as much as any, a shorter one proportionally less. Lengths are distinct
    lexemes of the pool's own documents, so nothing outside the pool shapes the average."""
    if not lengths:
        return {}
    average = sum(lengths.values()) / len(lengths)
    if average <= 0:
        return {}
    return {message_id: min(1.0, length / average) for message_id, length in lengths.items()}


def candidate_features(candidates: Sequence[Candidate], signals: Signals) -> dict[int, tuple[float, ...]]:
    """Each candidate's features, unweighted and unrounded, in the order of :data:`FEATURES` (what
    :func:`score_candidates` weighs; ``replay_history`` refits the weights over them)."""
    match = {c.message_id: c.match for c in candidates}
    context: dict[int, float] = {}
    for source, linked in signals.neighbours.items():
        for message_id, distance in linked:
            weight = CONTEXT_DECAY ** (distance - 1)
            context[message_id] = context.get(message_id, 0.0) + weight * match.get(source, 0.0)
    sitting = sitting_strength(candidates)
    content = content_share(signals.lengths)
    now = signals.now
    return {
        candidate.message_id: (
            candidate.match,
            1.0 if candidate.actor_id is not None and candidate.actor_id in signals.named_ids else 0.0,
            context.get(candidate.message_id, 0.0),
            math.exp(-max(0.0, (now - candidate.created_at).total_seconds()) / 86_400 / RECENCY_DAYS),
            1.0 if candidate.actor_id in signals.requester_ids else 0.0,
            1.0 if candidate.conversation_id == signals.conversation_id else 0.0,
            1.0 if candidate.conversation_id in signals.spoke_in else 0.0,
            1.0 if candidate.message_id in signals.window else 0.0,
            1.0 if signals.dates and any(date.covers(candidate.created_at) for date in signals.dates) else 0.0,
            sitting.get(candidate.message_id, 0.0),
            content.get(candidate.message_id, 0.0),
            1.0 if signals.asks_when and candidate.message_id in signals.timed else 0.0,
        )
        for candidate in candidates
    }


def score_candidates(
    candidates: Sequence[Candidate],
    signals: Signals,
    weights: dict[str, float] | None = None,
    *,
    limit: int | None = None,
) -> list[tuple[float, int, dict[str, float]]]:
    """Score every candidate (a pure function of its inputs): ``(score, message id, components)``,
    best first, ties broken by id; with ``limit``, only the first ``limit`` of them (every candidate is
    still scored, and only those returned have their components laid out).

    - ``match``: fused relevance;
    - ``named``: written by a person the query names;
    - ``context``: the sum of the matches of the messages this one neighbours, each halved per step
      beyond the adjacent one (a question and its answer are usually adjacent, and only one of them
      tends to share the question's words; a line between two matching ones is the middle of a
      matching exchange);
    - ``date``: written on a day, in a month or year, or in a relative span ("last week") the query
      names: a question about what was said on a date is answered by what was written then;
    - ``sitting``: how much of the strongest matches this one's sitting holds (:func:`sitting_strength`);
    - ``content``: its length as a share of the pool's average (:func:`content_share`), 0 without a
      document read;
    - ``tells_time``: the query asks when (or how long), and the message tells a time ("yesterday",
      "last week", "in May", "two years ago", "recently");
    - ``recency``, ``same_actor``, ``same_conversation``, ``requester_spoke``, ``current_window`` as in
      history@1.
    """
    weights = WEIGHTS if weights is None else weights
    weight_values = tuple(weights[name] for name in FEATURES)
    feature_values = candidate_features(candidates, signals)
    scored = [
        (round(sum(map(operator.mul, weight_values, values)), 6), message_id)
        for message_id, values in feature_values.items()
    ]
    scored.sort(key=lambda item: (-item[0], item[1]))
    # Components are laid out (rounded, by name) only for what is returned: a search keeps its best few.
    return [
        (
            score,
            message_id,
            {name: round(value, 4) for name, value in zip(FEATURES, feature_values[message_id], strict=True)},
        )
        for score, message_id in scored[:limit]
    ]
