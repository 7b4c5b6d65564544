"""Conversation history search: the full transcript, under exactly the disclosure rule memory uses.

Search is a candidate source and a ranking problem, not a new authorization boundary: every hit and
every neighbour comes from :class:`memory.retrieval.eligibility.EligibleMessages` (agent through the
conversation, source evidence, audience, lineage), decided in SQL before anything is ranked. The
sidecar only narrows the scan; text is hydrated from ``history_message`` after authorization.

Query words are OR'd (``engram_search_query``) and ranked by ``ts_rank``; the semantic arm (a
provider) proposes candidates beside it and the two are fused by reciprocal rank. People the query
names (resolved through the perspective's own actors, as the actor filter is) are matched as the
authors of messages rather than as words. Structural filters (actor, conversation, connector, time
range) only narrow, and an actor filter that does not resolve in the perspective returns nothing.
Ranking (history@2) adds: authorship by a named person; exchange context (the best match among a
message's eligible neighbours, since a question and its answer are adjacent and often only one
shares the query's words); recency, same actor, same conversation, a small boost for rooms the
requester spoke in, and a demotion of the window the turn already loaded. Context is computed over
the pool and one bounded neighbour query through the same eligible set: it reorders, never adds. The
message being answered and the loaded window are excluded. Every search, empty or not, writes a
``ConversationSearchEvent`` with a keyed digest and exclusion counts by the first rule that removed
each match; if that write fails the search fails. Results join the turn's evidence.

Transcript lines are data, never instructions, exactly like memories: every hit and every neighbour
goes through memory recall's safety scan (:func:`memory.retrieval.safety.block_reason`) when it is
hydrated, before anything reaches the agent. A line that looks like a prompt injection or holds a
credential is returned as ``[BLOCKED]`` with its id, position and metadata kept (so the exchange still
reads in order and provenance still names it) and its text never shown; blocking is per message, and
the search audit records how many were withheld and their ids (``blocked_count``,
``blocked_message_ids``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Actor, actor_label
from accounts.selectors import actors_named_in
from config.audit import audit_digest, read_audit_transaction
from config.database.base import prepared_cursor
from config.errors import Unprocessable
from config.replica import routed_read
from history.models import ConversationSearchEvent, Turn, agent_terms_match
from memory.embeddings.search import semantic_providers
from memory.retrieval.eligibility import EligibleMessages, Perspective, linked_actors
from memory.retrieval.providers import ArmHit, ProviderCall, run_providers
from memory.retrieval.query import FUNCTION_WORDS, WORD, content_terms, named_actor_ids
from memory.retrieval.safety import block_reason

POLICY_VERSION = "history@2"
DEFAULT_LIMIT, MAX_LIMIT = 8, 20
NEIGHBOURS = 2
#: Each hit can bring up to 2 + 2 neighbours: five messages of evidence.
MESSAGES_PER_HIT = 1 + 2 * NEIGHBOURS
#: Per-turn ceiling of distinct evidence messages; well under the lineage caps (500 history ids).
TURN_EVIDENCE_CEILING = 400
CANDIDATE_CAP = 200
#: Lexical matches are read from the sidecar best ``ts_rank`` first and judged as they are read
#: (eligibility, exclusions, filters); the scan stops once ``CANDIDATE_CAP`` are eligible or the
#: matches run out. Every match read is judged (for the exclusion counts, which hold up to the scan's end).
RECENCY_DAYS = 90.0
#: How many of the current conversation's latest messages count as "the window already loaded".
CURRENT_WINDOW = 30
RRF_K = 60
#: How the sidecar ranks matches. ``ts_rank`` (frequency) rather than ``ts_rank_cd`` (cover density):
#: the query's words are OR'd, and cover density rewarded long messages that repeat one common word.
LEXICAL_RANK = "ts_rank(d.tsv, q.q)"
#: The audit's exclusion rules, in the order the first rule that removed a match is attributed.
EXCLUSION_RULES = ("already_in_context", "no_evidence", "audience", "lineage")
#: How many of the strongest matches have their neighbours looked up (one batched query): about three times
#: the default limit: LoCoMo recall@10 is 0.630 with 25 and 0.626 with 50, for half the lookups.
CONTEXT_SOURCES = 25
#: Neighbours further apart than this are not one exchange.
EXCHANGE_GAP = timedelta(hours=6)

#: history@2 weights. The fused match leads (first in both arms -> 1.0; first in one arm -> 0.5). A
#: named author (0.30) and exchange context (0.20 x the neighbour's match) can lift a weaker match past
#: stronger ones by others or out of context, which is what a question about a person or an exchange
#: needs; the remaining features only break near-ties. The demotion applies only to the recent window
#: of the turn's own conversation. Tuned leave-one-conversation-out on a public benchmark, with every
#: feature kept general (authorship, adjacency) rather than fitted to its data.
WEIGHTS = {
    "match": 1.00,
    "named": 0.30,
    "context": 0.20,
    "recency": 0.04,
    "same_actor": 0.03,
    "same_conversation": 0.03,
    "requester_spoke": 0.02,
    "current_window": -0.30,
}


class MessageCandidateProvider(Protocol):
    """A non-SQL candidate source for history search (semantic search over message embeddings)."""

    name: str
    in_database: bool

    def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]: ...


@dataclass(frozen=True)
class HistoryQuery:
    text: str
    actor: str | None = None
    conversation_id: int | None = None
    connector: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_LIMIT:
            raise Unprocessable(f"limit must lie in [1, {MAX_LIMIT}]", code="invalid_limit")
        if self.since and self.until and self.until <= self.since:
            raise Unprocessable("until must be after since", code="invalid_time_range")


@dataclass(frozen=True)
class Filters:
    """Structural filters as SQL that may only narrow (``AND ...``), their parameters, and how the
    audit describes them."""

    sql: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    described: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FoundMessage:
    """One transcript line as the agent is given it. ``blocked`` is why the safety scan withheld it
    ("" if it did not); a withheld line's ``body`` is the ``[BLOCKED]`` placeholder, never its text."""

    message_id: int
    conversation_id: int
    actor_id: int | None
    actor: str | None
    direction: str
    created_at: datetime
    body: str
    blocked: str = ""


@dataclass(frozen=True)
class Hit:
    message: FoundMessage
    score: float
    components: dict[str, float]
    before: list[FoundMessage] = field(default_factory=list)
    after: list[FoundMessage] = field(default_factory=list)


@dataclass(frozen=True)
class HistoryResult:
    """``message_ids`` first: a result truncated mid-way still yields every id for provenance."""

    message_ids: list[int]
    hits: list[Hit]
    event_id: int
    code: str = ""  # "search_budget_exhausted" when the turn's evidence ceiling is reached
    exclusion_counts: dict[str, int] = field(default_factory=dict)
    degradation: str = ""
    #: Results (hits and neighbours) the safety scan withheld, counted once each.
    blocked: int = 0


def blocked_placeholder(reason: str) -> str:
    """What the agent reads instead of a withheld line (as memory recall renders a withheld item)."""
    return f"[BLOCKED] withheld: {reason}."


@routed_read
def search_history(
    *,
    perspective: Perspective,
    query: HistoryQuery,
    turn: Turn | None = None,
    exclude_message_ids: Iterable[int] = (),
    providers: Sequence[MessageCandidateProvider] | None = None,
    lexical: bool = True,
) -> HistoryResult:
    """Search the perspective's eligible transcript. With a turn, results join its evidence.

    ``providers`` None means the configured semantic arm (or lexical only, with the reason recorded);
    ``()`` means lexical only. ``lexical=False`` leaves the sidecar arm out (the provider arms alone
    propose candidates, e.g. to measure them); eligibility, exclusions and filters are unchanged, and
    the exclusion counts, which describe the lexical scan, are then all zero.
    """
    unavailable = ""
    if providers is None:
        _, providers, unavailable = semantic_providers()
    excluded = set(exclude_message_ids)
    evidence: list[int] = []
    if turn is not None:
        excluded.update(turn.loaded_message_ids)
        excluded.add(turn.inbound_message_id)
        evidence = list(turn.evidence_message_ids)
    requester_ids = _requester_identities(perspective)
    filters = _resolve_filters(perspective, query, requester_ids)
    remaining = TURN_EVIDENCE_CEILING - len(set(evidence))
    if remaining <= 0:
        return _finish(perspective, query, turn, filters, [], {}, code="search_budget_exhausted")
    if filters is None or not query.text.strip():
        return _finish(perspective, query, turn, filters, [], {})
    # Near the ceiling, ask for fewer hits so that hits plus neighbours still fit.
    limit = max(1, min(query.limit, remaining // MESSAGES_PER_HIT))

    eligible = EligibleMessages(perspective)
    params = {
        **eligible.params(),
        "q_text": query.text,
        "q_excluded": sorted(excluded),
        "q_cap": CANDIDATE_CAP,
        **filters.params,
    }
    structural = filters.sql
    named = named_actors(perspective, query.text)
    text = match_text(query.text, named)
    ranks: dict[str, dict[int, int]] = {}
    rows: dict[int, tuple[Any, ...]] = {}
    counts: dict[str, int] = dict.fromkeys(EXCLUSION_RULES, 0) | {"eligible": 0}
    if lexical:
        pool, counts = _pool_and_counts(eligible, structural, {**params, "q_text": text})
        ranks["lexical"] = {}
        for rank, row in enumerate(pool, start=1):
            ranks["lexical"][row[0]] = rank
            rows[row[0]] = row
    outcome = run_providers(
        [
            ProviderCall(p.name, p.in_database, partial(p.message_candidates, eligible, text, CANDIDATE_CAP))
            for p in providers
        ],
        cap=CANDIDATE_CAP,
    )
    proposed = {hit.target_id for hit in outcome.hits}
    # Provider ids count only once the same eligibility, exclusions and filters admit them.
    for row in _revalidate(eligible, structural, params, proposed - rows.keys()):
        rows[row[0]] = row
    for hit in outcome.hits:
        if hit.target_id in rows:
            arm = ranks.setdefault(hit.arm, {})
            arm[hit.target_id] = min(hit.rank, arm.get(hit.target_id, hit.rank))
    relevance_arms = [*(["lexical"] if lexical else []), *(p.name for p in providers)]
    candidates = {
        message_id: Candidate(
            message_id=message_id,
            conversation_id=conversation_id,
            actor_id=actor_id,
            created_at=created_at,
            match=fused_match(message_id, ranks, relevance_arms),
        )
        for message_id, conversation_id, actor_id, created_at in rows.values()
    }
    # Exchange context: which pool members are adjacent, in the eligible transcript, to the strongest
    # matches (one bounded query). Context only reorders the pool; it never adds a message to it.
    neighbours: dict[int, list[int]] = {}
    for source_id, message_id in _neighbours(eligible, structural, params, context_sources(candidates.values())):
        if message_id in candidates:
            neighbours.setdefault(source_id, []).append(message_id)
    signals = Signals(
        requester_ids=frozenset(requester_ids),
        named_ids=frozenset(named),
        spoke_in=frozenset(
            _conversations_spoken_in(
                perspective.agent_id, requester_ids, {c.conversation_id for c in candidates.values()}
            )
        ),
        window=frozenset(_current_window(turn)),
        conversation_id=perspective.conversation_id,
        now=timezone.now(),
        neighbours={source: tuple(ids) for source, ids in neighbours.items()},
    )
    scored = score_candidates(list(candidates.values()), signals)
    chosen = scored[:limit]
    eligible_count = counts.get("eligible", 0) if lexical else len(candidates)
    counts["below_cutoff"] = max(0, eligible_count - len(chosen))
    counts.pop("eligible", None)
    hits = _hydrate(eligible, params, chosen, budget=remaining)
    degradation = ",".join(d for d in (unavailable, outcome.degradation) if d)
    return _finish(perspective, query, turn, filters, hits, counts, degradation=degradation)


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
    to its eligible neighbours."""

    requester_ids: frozenset[int]
    named_ids: frozenset[int]
    spoke_in: frozenset[int]
    window: frozenset[int]
    conversation_id: int | None
    now: datetime
    neighbours: dict[int, tuple[int, ...]]


def fused_match(message_id: int, ranks: dict[str, dict[int, int]], relevance_arms: Sequence[str]) -> float:
    """Reciprocal-rank fusion over the arms that ran, normalised so that first in every arm is 1.0."""
    if not relevance_arms:
        return 0.0
    fused = sum(1 / (RRF_K + ranks[arm][message_id]) for arm in relevance_arms if message_id in ranks.get(arm, {}))
    return fused / (len(relevance_arms) / (RRF_K + 1))


def context_sources(candidates: Iterable[Candidate]) -> list[int]:
    """The strongest matches, whose neighbours are looked up: a bounded number, best first."""
    ranked = sorted((c for c in candidates if c.match > 0), key=lambda c: (-c.match, c.message_id))
    return [c.message_id for c in ranked[:CONTEXT_SOURCES]]


def score_candidates(
    candidates: Sequence[Candidate], signals: Signals, weights: dict[str, float] | None = None
) -> list[tuple[float, int, dict[str, float]]]:
    """Score every candidate (a pure function of its inputs): ``(score, message id, components)``,
    best first, ties broken by id.

    - ``match``: fused relevance;
    - ``named``: written by a person the query names;
    - ``context``: the best match among the messages this one neighbours (a question and its answer
      are usually adjacent, and only one of them tends to share the question's words);
    - ``recency``, ``same_actor``, ``same_conversation``, ``requester_spoke``, ``current_window`` as in
      history@1.
    """
    weights = WEIGHTS if weights is None else weights
    match = {c.message_id: c.match for c in candidates}
    context: dict[int, float] = {}
    for source, linked in signals.neighbours.items():
        for message_id in linked:
            context[message_id] = max(context.get(message_id, 0.0), match.get(source, 0.0))
    scored = []
    for candidate in candidates:
        features = {
            "match": candidate.match,
            "named": 1.0 if candidate.actor_id is not None and candidate.actor_id in signals.named_ids else 0.0,
            "context": context.get(candidate.message_id, 0.0),
            "recency": math.exp(
                -max(0.0, (signals.now - candidate.created_at).total_seconds()) / 86_400 / RECENCY_DAYS
            ),
            "same_actor": 1.0 if candidate.actor_id in signals.requester_ids else 0.0,
            "same_conversation": 1.0 if candidate.conversation_id == signals.conversation_id else 0.0,
            "requester_spoke": 1.0 if candidate.conversation_id in signals.spoke_in else 0.0,
            "current_window": 1.0 if candidate.message_id in signals.window else 0.0,
        }
        score = sum(weights[name] * value for name, value in features.items())
        scored.append((round(score, 6), candidate.message_id, {k: round(v, 4) for k, v in features.items()}))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return scored


# --------------------------------------------------------------------------------------------------


def _requester_identities(perspective: Perspective) -> set[int]:
    """The requester and every actor a verified, unrevoked identity link joins them to."""
    if perspective.requester_id is None:
        return set()
    return {perspective.requester_id, *linked_actors(perspective.agent_id, perspective.requester_id)}


def _resolve_filters(perspective: Perspective, query: HistoryQuery, requester_ids: set[int]) -> Filters | None:
    """Structural filters as SQL that only narrows. None when a filter does not resolve: no results."""
    sql: list[str] = []
    params: dict[str, Any] = {}
    described: dict[str, Any] = {}
    if query.actor:
        if query.actor == "requester":
            actor_ids = sorted(requester_ids)
        else:
            # Resolved through the perspective's own actors, never an id the caller invented.
            candidates = Actor.objects.filter(connector__agent_id=perspective.agent_id)
            text = query.actor.strip()
            actor_ids = sorted(
                candidates.filter(Q(external_id=text) | Q(display_name__iexact=text)).values_list("pk", flat=True)
            )
            if text.isdigit():
                actor_ids = sorted({*actor_ids, *candidates.filter(pk=int(text)).values_list("pk", flat=True)})
        if not actor_ids:
            return None
        sql.append("m.actor_id = ANY(%(f_actors)s::bigint[])")
        params["f_actors"] = actor_ids
        described["actor_ids"] = actor_ids
    if query.conversation_id is not None:
        sql.append("m.conversation_id = %(f_conversation)s")
        params["f_conversation"] = query.conversation_id
        described["conversation_id"] = query.conversation_id
    if query.connector:
        kind, _, name = query.connector.partition(":")
        sql.append(
            "(SELECT cv.connector_id FROM history_conversation cv WHERE cv.id = m.conversation_id)"
            " IN (SELECT id FROM accounts_connector WHERE type = %(f_ctype)s AND name = %(f_cname)s)"
        )
        params.update(f_ctype=kind, f_cname=name)
        described["connector"] = query.connector
    if query.since:
        sql.append("m.created_at >= %(f_since)s")
        params["f_since"] = query.since
        described["since"] = query.since.isoformat()
    if query.until:
        sql.append("m.created_at < %(f_until)s")
        params["f_until"] = query.until
        described["until"] = query.until.isoformat()
    described["limit"] = query.limit
    return Filters(sql="".join(f" AND {s}" for s in sql), params=params, described=described)


#: The sidecar's matches, best ``ts_rank`` first (ties by id), each judged in that order, and only the
#: eligible ones returned, each with the running count of every verdict up to it; the last match is
#: returned too, whatever its verdict, so that a scan that runs out of matches carries its totals. The
#: ranking is computed once, by the inner sort, and each verdict once (``OFFSET 0`` keeps the judging
#: subquery whole, so the counts read its verdict rather than repeat it). Every step above the sort
#: streams (a lateral join judging one match at a time, a window of running counts, a filter), so the
#: ``LIMIT`` stops the judging at the ``q_cap``-th eligible match: a scan that passes thousands of
#: matches the destination may not read sends only what it keeps. It is read through a cursor, declared
#: and read in one round trip: PostgreSQL plans a cursor for its first rows and never runs one in
#: parallel. As a plain statement its sort draws parallel workers, whose start costs the server more CPU
#: than they save (``bench_turn``: 63-67 ms of PostgreSQL CPU a turn, against 55-58 ms through the cursor).
_SCAN = """
DECLARE {cursor} NO SCROLL CURSOR FOR
SELECT message_id, conversation_id, actor_id, created_at, lex, verdict, {running}
FROM (
    SELECT matches.message_id, judged.conversation_id, judged.actor_id, judged.created_at, matches.lex,
           judged.verdict, {counted}, lead(matches.message_id) OVER scan IS NULL AS last
    FROM (
        SELECT d.message_id, {lexical_rank} AS lex
        FROM history_messagesearchdocument d, (SELECT engram_search_query(%(q_text)s) AS q) q
        WHERE {terms_match}
        ORDER BY lex DESC, d.message_id DESC
        OFFSET 0
    ) matches
    CROSS JOIN LATERAL (
        SELECT m.conversation_id, m.actor_id, m.created_at, {verdict} AS verdict
        FROM {owned}
        WHERE m.id = matches.message_id AND {ownership}{structural}
        OFFSET 0
    ) judged
    WINDOW scan AS (ORDER BY matches.lex DESC, matches.message_id DESC ROWS UNBOUNDED PRECEDING)
) judged_in_order
WHERE verdict = 'eligible' OR last
ORDER BY lex DESC, message_id DESC
LIMIT %(q_cap)s;
FETCH ALL FROM {cursor}
"""
#: Names the scans of one process apart (a transaction may hold several, each until it ends).
_scan_numbers = itertools.count()
#: The verdicts a scan counts, in the order its rows carry their running counts.
SCAN_VERDICTS = (*EXCLUSION_RULES, "eligible")


def _pool_and_counts(
    eligible: EligibleMessages, structural: str, params: dict[str, Any]
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """The ranked eligible pool and the exclusion counts, from one scan of the sidecar's best matches.

    Every match the scan reaches is judged by the search's own predicates in order (already in
    context, no evidence, audience, lineage); only those judged eligible can enter the pool. The scan
    reads the ranking (best ``ts_rank`` first, ties by id) until ``CANDIDATE_CAP`` matches are
    eligible or the matches run out, so the pool and counts are those of the prefix it reached.
    """
    verdict = "CASE WHEN m.id = ANY(%(q_excluded)s::bigint[]) THEN 'already_in_context'"
    verdict += "".join(f" WHEN NOT {condition} THEN '{name}'" for name, condition in eligible.rules())
    verdict += " ELSE 'eligible' END"
    sql = _SCAN.format(
        running=", ".join(f"n_{name}" for name in SCAN_VERDICTS),
        counted=", ".join(
            f"count(*) FILTER (WHERE judged.verdict = '{name}') OVER scan AS n_{name}" for name in SCAN_VERDICTS
        ),
        lexical_rank=LEXICAL_RANK,
        terms_match=agent_terms_match("%(el_agent)s", "%(q_text)s"),
        verdict=verdict,
        owned=eligible.owned(),
        ownership=eligible.ownership(),
        structural=structural,
        cursor=f"history_scan_{next(_scan_numbers)}",
    )
    # A cursor lives in a transaction: the caller's, or one of its own.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(sql, params)
        cursor.nextset()  # the FETCH's rows
        rows = cursor.fetchall()
    # The last row read carries the counts of the whole prefix: its CANDIDATE_CAP-th eligible
    # match, or the last match of all.
    counts = dict(zip(SCAN_VERDICTS, rows[-1][6:], strict=True)) if rows else dict.fromkeys(SCAN_VERDICTS, 0)
    pool = [row[:5] for row in rows if row[5] == "eligible"]
    # Best rank, then newest, then lowest id.
    pool.sort(key=lambda row: row[0])
    pool.sort(key=lambda row: (row[4], row[3]), reverse=True)
    ranked = [row[:4] for row in pool]
    return ranked, counts


#: Each side's messages are read from the conversation's time index nearest first, and eligibility is
#: judged one message at a time in that order until one passes (a scalar subquery per message, which
#: the planner cannot turn into a join over every eligible message): the judging, which for a reply
#: checks its stored lineage, costs one or two messages, however many the window holds. The sources
#: are members of the pool this search's scan has just judged; they are not judged again, because the
#: pairs found here only reorder the pool, and whatever is shown is judged again when it is hydrated.
_NEIGHBOURS_OF_SOURCES = """
WITH em AS NOT MATERIALIZED (
    SELECT m.id AS message_id FROM {{owned}}
    WHERE {{predicate}}{{structural}} AND NOT (m.id = ANY(%(q_excluded)s::bigint[]))
),
source AS (
    SELECT m.id AS message_id, m.conversation_id, m.created_at FROM history_message m
    WHERE m.id = ANY(%(n_ids)s::bigint[]) AND m.agent_id = %(el_agent)s
)
{before}
UNION ALL
{after}
"""
#: One side of each source: the nearest message beyond it that the searchable set admits, within the gap.
_NEIGHBOUR_SIDE = """
SELECT source.message_id, {side}.id FROM source CROSS JOIN LATERAL (
    SELECT near.id FROM (
        SELECT m.id, m.created_at FROM history_message m
        WHERE m.conversation_id = source.conversation_id
          AND (m.created_at, m.id) {beyond} (source.created_at, source.message_id)
          AND m.created_at {within} source.created_at {towards} make_interval(secs => %(n_gap)s)
        ORDER BY m.created_at {order}, m.id {order} OFFSET 0) near
    WHERE (SELECT TRUE FROM em WHERE em.message_id = near.id LIMIT 1)
    ORDER BY near.created_at {order}, near.id {order} LIMIT 1) {side}"""
_NEIGHBOURS = _NEIGHBOURS_OF_SOURCES.format(
    before=_NEIGHBOUR_SIDE.format(side="b", beyond="<", within=">=", towards="-", order="DESC"),
    after=_NEIGHBOUR_SIDE.format(side="a", beyond=">", within="<=", towards="+", order="ASC"),
)


def _neighbours(
    eligible: EligibleMessages, structural: str, params: dict[str, Any], source_ids: Sequence[int]
) -> list[tuple[Any, ...]]:
    """``(source id, neighbour id)`` for the message just before and just after each source in the
    searchable set (eligible, filtered, not excluded), if it was written within ``EXCHANGE_GAP`` of
    the source. An ineligible message is never a neighbour: the next eligible one is. One statement,
    bounded by ``CONTEXT_SOURCES``."""
    if not source_ids:
        return []
    sql = _NEIGHBOURS.format(owned=eligible.owned(), predicate=eligible.predicate(), structural=structural)
    with connection.cursor() as cursor:
        cursor.execute(sql, {**params, "n_ids": list(source_ids), "n_gap": EXCHANGE_GAP.total_seconds()})
        return cursor.fetchall()


def named_actors(perspective: Perspective, text: str) -> dict[int, tuple[str, ...]]:
    """Actors the query names by their current display name or external id (possessives included),
    resolved through the perspective's own actors (as the actor filter is), never invented: each id
    with the names it goes by. Of the actors whose name occurs in the query (the ones memory recall
    considers too), only those whose name is one to three of its words, and not a function word, count."""
    words = [word.removesuffix("'s") for word in WORD.findall(text.lower())]
    phrases = {" ".join(words[i : i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)}
    phrases -= FUNCTION_WORDS
    if not phrases:
        return {}
    actors = [
        actor
        for actor in actors_named_in(perspective.agent_id, text)
        if actor.display_name.lower() in phrases or actor.external_id.lower() in phrases
    ]
    named = set(named_actor_ids(text, actors))
    return {a.pk: tuple(n for n in (a.display_name, a.external_id) if n) for a in actors if a.pk in named}


def match_text(text: str, named: dict[int, tuple[str, ...]]) -> str:
    """The query as the relevance arms read it: people it names are matched as authors (``named``),
    not as words or meaning, so messages that merely address them ("thanks, Bob!") do not outrank
    what they said. A query made only of names keeps them."""
    names = sorted({name for aliases in named.values() for name in aliases}, key=len, reverse=True)
    if not names:
        return text
    pattern = "|".join(re.escape(name) for name in names)
    stripped = re.sub(rf"(?<![\w])(?:{pattern})(?:'s)?(?![\w])", " ", text, flags=re.IGNORECASE)
    return stripped if content_terms(stripped) else text


def _revalidate(
    eligible: EligibleMessages, structural: str, params: dict[str, Any], ids: set[int]
) -> list[tuple[Any, ...]]:
    if not ids:
        return []
    sql = (
        f"SELECT m.id, m.conversation_id, m.actor_id, m.created_at FROM {eligible.owned()}"
        f" WHERE m.id = ANY(%(p_ids)s::bigint[]) AND {eligible.predicate()}{structural}"
        " AND NOT (m.id = ANY(%(q_excluded)s::bigint[]))"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {**params, "p_ids": sorted(ids)})
        return cursor.fetchall()


def _conversations_spoken_in(agent_id: int, requester_ids: set[int], conversation_ids: set[int]) -> set[int]:
    if not requester_ids or not conversation_ids:
        return set()
    with prepared_cursor() as cursor:
        # One probe of (actor, conversation) per conversation, not a read of everything they wrote.
        cursor.execute(
            "SELECT c.id FROM unnest(%s::bigint[]) AS c(id) WHERE EXISTS ("
            " SELECT 1 FROM history_message m WHERE m.actor_id = ANY(%s::bigint[]) AND m.conversation_id = c.id"
            " AND m.agent_id = %s)",
            [sorted(conversation_ids), sorted(requester_ids), agent_id],
        )
        return {row[0] for row in cursor.fetchall()}


def _current_window(turn: Turn | None) -> set[int]:
    """The latest messages of the turn's own conversation before the one being answered: the window a
    runtime usually has in the prompt already. Without a turn there is no window to demote."""
    if turn is None:
        return set()
    with prepared_cursor() as cursor:
        # The inbound message's place is read by scalar subqueries, so the conversation is a constant
        # of the scan and its time index is read backwards from that place, CURRENT_WINDOW entries
        # deep. As a join the planner sorted every earlier message of the conversation instead.
        cursor.execute(
            "SELECT m.id FROM history_message m"
            " WHERE m.conversation_id = (SELECT conversation_id FROM history_message WHERE id = %(inbound)s)"
            " AND (m.created_at, m.id) <= (SELECT created_at, id FROM history_message WHERE id = %(inbound)s)"
            " ORDER BY m.created_at DESC, m.id DESC LIMIT %(window)s",
            {"inbound": turn.inbound_message_id, "window": CURRENT_WINDOW},
        )
        return {row[0] for row in cursor.fetchall()}


#: Each hit's neighbours are read as the neighbour lookup reads them: the conversation's messages from
#: its time index, nearest first, each judged by the eligible set in turn (a parameterised subquery,
#: OFFSET 0 keeping it one probe per message) until ``n`` pass. Judging every message on one side of
#: the hit and keeping the nearest two instead reads the whole conversation (replies' lineage included).
_HYDRATE_SIDE = """
    SELECT hit.message_id, {side}, judged.* FROM hit CROSS JOIN LATERAL (
        SELECT judged.* FROM (
            SELECT m.id, m.created_at FROM history_message m
            WHERE m.conversation_id = hit.conversation_id
              AND (m.created_at, m.id) {beyond} (hit.created_at, hit.message_id)
              AND NOT (m.id = ANY(%(q_excluded)s::bigint[]))
            ORDER BY m.created_at {order}, m.id {order} OFFSET 0) near
        CROSS JOIN LATERAL (SELECT em.* FROM em WHERE em.message_id = near.id OFFSET 0) judged
        ORDER BY near.created_at {order}, near.id {order} LIMIT {{n}}) judged"""
_HYDRATE = (
    """
WITH em AS NOT MATERIALIZED ({eligible}),
hit AS (SELECT em.* FROM em WHERE em.message_id = ANY(%(h_ids)s::bigint[])),
found AS (
    SELECT hit.message_id AS hit_id, 0 AS side, hit.* FROM hit
    UNION ALL"""
    + _HYDRATE_SIDE.format(side=-1, beyond="<", order="DESC")
    + """
    UNION ALL"""
    + _HYDRATE_SIDE.format(side=1, beyond=">", order="ASC")
    + """
)
SELECT found.*, actor.display_name AS actor_name, actor.external_id AS actor_external_id
FROM found LEFT JOIN accounts_actor actor ON actor.id = found.actor_id
"""
)


def _hydrate(
    eligible: EligibleMessages,
    params: dict[str, Any],
    chosen: Sequence[tuple[float, int, dict[str, float]]],
    *,
    budget: int,
) -> list[Hit]:
    """Canonical text for the hits and their eligible neighbours, read through the eligible set again."""
    if not chosen:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _HYDRATE.format(eligible=eligible.sql(), n=NEIGHBOURS), {**params, "h_ids": [c[1] for c in chosen]}
        )
        columns = [c.name for c in cursor.description or ()]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]

    def found(row: dict[str, Any]) -> FoundMessage:
        # The safety scan, on every line the agent will be given (hit or neighbour), before it leaves.
        reason = block_reason(row["body"])
        return FoundMessage(
            message_id=row["message_id"],
            conversation_id=row["conversation_id"],
            actor_id=row["actor_id"],
            actor=actor_label(row["actor_name"], row["actor_external_id"]) if row["actor_id"] else None,
            direction=row["direction"],
            created_at=row["created_at"],
            body=blocked_placeholder(reason) if reason else row["body"],
            blocked=reason,
        )

    by_hit: dict[int, dict[int, list[dict[str, Any]]]] = {}
    for row in rows:
        by_hit.setdefault(row["hit_id"], {}).setdefault(row["side"], []).append(row)
    hits: list[Hit] = []
    seen: set[int] = set()
    for score, message_id, components in chosen:
        parts = by_hit.get(message_id)
        if not parts or 0 not in parts:
            continue  # no longer eligible between ranking and hydration
        before = sorted(parts.get(-1, []), key=lambda r: (r["created_at"], r["message_id"]))
        after = sorted(parts.get(1, []), key=lambda r: (r["created_at"], r["message_id"]))
        new_ids = {r["message_id"] for r in [parts[0][0], *before, *after]} - seen
        if len(seen) + len(new_ids) > budget:
            # Near the turn's ceiling: keep the hit, drop neighbours that would overflow it.
            before, after = [], []
            new_ids = {message_id} - seen
            if len(seen) + len(new_ids) > budget:
                break
        seen |= new_ids
        hits.append(
            Hit(
                message=found(parts[0][0]),
                score=score,
                components=components,
                before=[found(r) for r in before],
                after=[found(r) for r in after],
            )
        )
    return hits


EVIDENCE_APPEND = """
UPDATE history_turn SET evidence_message_ids = evidence_message_ids || ARRAY(
    SELECT found.id FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY AS found(id, position)
    WHERE found.id <> ALL(evidence_message_ids) ORDER BY found.position)
WHERE id = %(turn)s RETURNING evidence_message_ids
"""


def _finish(
    perspective: Perspective,
    query: HistoryQuery,
    turn: Turn | None,
    filters: Filters | None,
    hits: list[Hit],
    counts: dict[str, int],
    *,
    code: str = "",
    degradation: str = "",
) -> HistoryResult:
    message_ids: list[int] = []
    blocked_ids: list[int] = []
    for hit in hits:
        for message in [*hit.before, hit.message, *hit.after]:
            if message.message_id not in message_ids:
                message_ids.append(message.message_id)
                if message.blocked:
                    blocked_ids.append(message.message_id)
    with read_audit_transaction():
        if turn is not None and message_ids:
            # The turn's evidence grows in one update of its row (which takes the row lock), so
            # concurrent rounds cannot lose ids; new ids are appended in the order found.
            with prepared_cursor() as cursor:
                cursor.execute(EVIDENCE_APPEND, {"turn": turn.pk, "ids": message_ids})
                (turn.evidence_message_ids,) = cursor.fetchone()
        event = ConversationSearchEvent.objects.create(
            agent_id=perspective.agent_id,
            turn=turn,
            query_digest=audit_digest(query.text) if query.text else "",
            filters=filters.described if filters is not None else {"unresolved_filter": True},
            destination_audience=perspective.destination.as_dict(),
            selected=[{"message_id": hit.message.message_id, "score": hit.score, **hit.components} for hit in hits],
            exclusion_counts=counts,
            blocked_count=len(blocked_ids),
            blocked_message_ids=blocked_ids,
            returned_message_ids=message_ids,
            degradation=degradation,
        )
    return HistoryResult(
        message_ids=message_ids,
        hits=hits,
        event_id=event.pk,
        code=code,
        exclusion_counts=counts,
        degradation=degradation,
        blocked=len(blocked_ids),
    )
