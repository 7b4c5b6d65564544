"""The search itself: query forming, candidates, ranking and assembly, in that order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.utils import timezone

from config.replica import routed_read
from history.models import Turn
from memory.embeddings.search import semantic_providers
from memory.retrieval.dates import asks_when
from memory.retrieval.eligibility import EligibleMessages, Perspective
from memory.retrieval.history_search.assembly import (
    MESSAGES_PER_HIT,
    TURN_EVIDENCE_CEILING,
    HistoryResult,
    finish,
    hydrate,
)
from memory.retrieval.history_search.candidates import (
    CANDIDATE_CAP,
    EXCLUSION_RULES,
    MessageCandidateProvider,
    conversations_spoken_in,
    current_window,
    lexical_pool,
    neighbour_pairs,
    revalidate,
)
from memory.retrieval.history_search.query import (
    Filters,
    HistoryQuery,
    match_text,
    named_actors,
    named_dates,
    requester_identities,
    resolve_filters,
)
from memory.retrieval.history_search.ranking import (
    Candidate,
    PoolDocument,
    Signals,
    context_sources,
    fused_match,
    lexical_order,
    score_candidates,
)
from memory.retrieval.history_search.times import timed_lines
from memory.retrieval.providers import ProviderCall, run_providers, unranked_by_arm


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
    requester_ids = requester_identities(perspective)
    filters = resolve_filters(perspective, query, requester_ids)
    remaining = TURN_EVIDENCE_CEILING - len(set(evidence))
    if remaining <= 0:
        return finish(perspective, query, turn, filters, [], {}, code="search_budget_exhausted")
    if filters is None or not query.text.strip():
        return finish(perspective, query, turn, filters, [], {})
    # Near the ceiling, ask for fewer hits so that hits plus neighbours still fit.
    limit = max(1, min(query.limit, remaining // MESSAGES_PER_HIT))
    ranked = rank_transcript(
        perspective=perspective,
        text=query.text,
        filters=filters,
        requester_ids=requester_ids,
        excluded=excluded,
        providers=providers,
        lexical=lexical,
        limit=limit,
        turn=turn,
    )
    chosen, counts = ranked.chosen, ranked.counts
    eligible_count = counts.get("eligible", 0) if lexical else ranked.pool_size
    counts["below_cutoff"] = max(0, eligible_count - len(chosen))
    counts.pop("eligible", None)
    hits = hydrate(ranked.eligible, ranked.params, chosen, budget=remaining)
    degradation = ",".join(d for d in (unavailable, ranked.degradation) if d)
    return finish(perspective, query, turn, filters, hits, counts, degradation=degradation)


@dataclass
class RankedTranscript:
    """The strongest messages of one search, best first, before any is hydrated or audited."""

    chosen: list[tuple[float, int, dict[str, float]]]
    counts: dict[str, int]
    pool_size: int
    degradation: str
    eligible: EligibleMessages
    params: dict[str, Any]


def rank_transcript(
    *,
    perspective: Perspective,
    text: str,
    filters: Filters,
    requester_ids: set[int],
    excluded: set[int],
    providers: Sequence[MessageCandidateProvider],
    lexical: bool,
    limit: int,
    turn: Turn | None = None,
) -> RankedTranscript:
    """History search's candidates and ranking: the eligible transcript's strongest ``limit`` messages
    for ``text``, within the filters and without the excluded ids, best first. Nothing is hydrated or
    audited: :func:`search_history` does that for the hits it returns. Each arm gives at most
    ``CANDIDATE_CAP`` candidates (the lexical scan stops at that many eligible matches)."""
    eligible = EligibleMessages(perspective)
    params = {
        **eligible.params(),
        "q_text": text,
        "q_excluded": sorted(excluded),
        "q_cap": CANDIDATE_CAP,
        **filters.params,
    }
    structural = filters.sql
    named = named_actors(perspective, text)
    matched = match_text(text, named)
    ranks: dict[str, dict[int, int]] = {}
    rows: dict[int, tuple[Any, ...]] = {}
    counts: dict[str, int] = dict.fromkeys(EXCLUSION_RULES, 0) | {"eligible": 0}
    # Every admitted row's document as BM25 reads it, read by the statement that admitted the row.
    documents: dict[int, PoolDocument] = {}
    # Which pool rows an indexed arm cannot rank yet: the scan reads it with each row. A proposal is a
    # text its provider's index holds (the semantic arm is the one indexed arm), so what the providers
    # propose needs no such reading.
    unindexed: dict[int, list[str]] = {}
    if lexical:
        scanned = lexical_pool(eligible, structural, {**params, "q_text": matched}, indexed=providers)
        counts, documents, unindexed = scanned.counts, scanned.documents, scanned.unindexed
        ranks["lexical"] = {}
        for rank, row in enumerate(scanned.ranked, start=1):
            ranks["lexical"][row[0]] = rank
            rows[row[0]] = row
    outcome = run_providers(
        [
            ProviderCall(p.name, p.in_database, partial(p.message_candidates, eligible, matched, CANDIDATE_CAP))
            for p in providers
        ],
        cap=CANDIDATE_CAP,
    )
    proposed = {hit.target_id for hit in outcome.hits}
    # Provider ids count only once the same eligibility, exclusions and filters admit them.
    admitted, admitted_documents = revalidate(
        eligible, structural, {**params, "q_text": matched}, proposed - rows.keys()
    )
    for row in admitted:
        rows[row[0]] = row
    documents.update(admitted_documents)
    for hit in outcome.hits:
        if hit.target_id in rows:
            arm = ranks.setdefault(hit.arm, {})
            arm[hit.target_id] = min(hit.rank, arm.get(hit.target_id, hit.rank))
    if len(ranks.get("lexical", ())) > 1:
        # The lexical arm's matches in BM25 order, its statistics those of the admitted pool's documents;
        # one match or none has no order to change.
        ranks["lexical"] = {
            message_id: rank for rank, message_id in enumerate(lexical_order(list(ranks["lexical"]), documents), 1)
        }
    # An arm that failed or missed the deadline is not in the fusion's scale: the search degrades to
    # what the others found, ranked as if it had not been asked.
    relevance_arms = [*(["lexical"] if lexical else []), *(p.name for p in providers if p.name not in outcome.failed)]
    # A message written a moment ago has no vector until the worker embeds it: the semantic arm cannot
    # rank it, so it is matched over the arms that can (``fused_match``), never read as a poor match.
    unranked = unranked_by_arm(relevance_arms, outcome.hits, unindexed)
    candidates = {
        message_id: Candidate(
            message_id=message_id,
            conversation_id=conversation_id,
            actor_id=actor_id,
            created_at=created_at,
            match=fused_match(message_id, ranks, relevance_arms, unranked),
        )
        for message_id, conversation_id, actor_id, created_at in rows.values()
    }
    # Exchange context: the messages adjacent, in the eligible transcript, to the strongest matches (one
    # bounded query). A neighbour neither arm proposed joins the pool with no match of its own (the
    # answer to a matching question often shares neither its words nor its meaning): the statement
    # judged it by the same eligibility, filters and exclusions, and only its context can lift it.
    neighbours: dict[int, list[tuple[int, int]]] = {}
    sources = context_sources(candidates.values())
    for pair in neighbour_pairs(eligible, structural, params, sources):
        if pair.message_id not in candidates:
            candidates[pair.message_id] = Candidate(
                pair.message_id, pair.conversation_id, pair.actor_id, pair.created_at, match=0.0
            )
        neighbours.setdefault(pair.source_id, []).append((pair.message_id, pair.distance))
    now = timezone.now()
    asking = asks_when(text)
    timed = timed_lines(agent_id=perspective.agent_id, message_ids=candidates.keys(), asks_when=asking)
    signals = Signals(
        requester_ids=frozenset(requester_ids),
        named_ids=frozenset(named),
        spoke_in=frozenset(
            conversations_spoken_in(
                perspective.agent_id, requester_ids, {c.conversation_id for c in candidates.values()}
            )
        ),
        window=frozenset(current_window(turn)),
        conversation_id=perspective.conversation_id,
        now=now,
        neighbours={source: tuple(ids) for source, ids in neighbours.items()},
        dates=named_dates(text, now),
        lengths={message_id: document.length for message_id, document in documents.items()},
        asks_when=asking,
        timed=timed,
    )
    chosen = score_candidates(list(candidates.values()), signals, limit=limit)
    return RankedTranscript(
        chosen=chosen,
        counts=counts,
        pool_size=len(candidates),
        degradation=outcome.degradation,
        eligible=eligible,
        params=params,
    )
