"""Memory recall's source arm: eligible memories in the order of the messages they were learned from.

A memory is a short statement distilled from a message, and the message often carries what the
statement left out: the words of the question, the place, the exchange around it. History search's
ranking (:func:`rank_transcript`: its lexical and semantic arms, exchange context, names and dates)
orders the perspective's eligible transcript for the query (each of its arms giving it ``SOURCE_POOL``
candidates rather than the search's 200); the memories learned from its ``SOURCE_MESSAGES`` strongest
messages that matched the query themselves are proposed in that order.
A memory is learned from the message its first revision names as its source: an amended memory keeps
that source (its entry's current revision is the one proposed), and one whose amendment names a source
of its own has that one too, and takes the better rank of the two.

Unlike ``search_history``, the ranking excludes nothing the turn already holds and writes no search
audit: it only orders, and what it proposes is recall's to trace. The message being answered matches
its own words and takes one of the ``SOURCE_MESSAGES`` places, which lifts a memory only once one has
been learned from it.

Privacy: history search's ranking reads only messages the perspective may see (``EligibleMessages``),
so no message outside the audience shapes the order; the proposal names only revisions of the
eligible set, and, as for every provider, the arms statement judges each id against the eligible set
again when it hydrates the candidates, so no ineligible memory can enter. A historical recall (``as_of``
or ``known_at``) is the store as it stood then, and the transcript's ranking has no such bound (it
would read what was written since), so the arm proposes nothing there.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from memory.models import EvidenceKind
from memory.retrieval.eligibility import EligibleRevisions
from memory.retrieval.history_search import (
    Filters,
    MessageCandidateProvider,
    rank_transcript,
    requester_identities,
)
from memory.retrieval.providers import ArmHit, ProviderTimeout
from memory.retrieval.query import RecallQuery

#: How many of the transcript's strongest messages propose the memories learned from them. Against
#: LoCoMo's development split 40 ranked the same as 20 (docs/quality.md).
SOURCE_MESSAGES = 20
#: How many candidates each of history search's arms gives the arm's ranking (the search's own is
#: ``CANDIDATE_CAP``, 200). The lexical scan judges eligibility match by match until it has that many,
#: and the proposals of the semantic arm are judged again, so fewer cost less: on LoCoMo's development
#: split (hybrid, observations) 60 scored recall@10 0.669 against 200's 0.670 (30: 0.656), and recall
#: with the arm took 1.86 rather than 1.98 times as long as without it (``bench_recall --source-arm
#: both``, docs/quality.md).
SOURCE_POOL = 60

#: The eligible memories learned from the given messages: each entry whose revision names one of them as
#: its source, through the entry's current revision (an amendment keeps its memory's source), with the
#: message. Each of the few revisions found is judged by one probe of the eligible set (as the semantic
#: arm judges its nearest rows), not by a join the planner may build over every revision the agent has.
_LEARNED_FROM = (
    "SELECT e.current_revision_id, ev.message_id FROM memory_memoryevidence ev"
    " JOIN memory_memoryrevision r ON r.id = ev.revision_id"
    " JOIN memory_memoryentry e ON e.id = r.entry_id"
    " WHERE ev.kind = %(src_kind)s AND ev.message_id = ANY(%(src_messages)s::bigint[])"
    " AND (SELECT TRUE FROM ({eligible}) el WHERE el.revision_id = e.current_revision_id LIMIT 1)"
)


class SourceMessages:
    """The source arm, as a candidate provider of memory recall; ``message_providers`` are history
    search's semantic arms (none: its lexical arm alone ranks the transcript)."""

    name = "source"
    in_database = True

    def __init__(self, message_providers: Sequence[MessageCandidateProvider]) -> None:
        self.message_providers = message_providers

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        if not query.text.strip() or eligible.historical:
            return []
        perspective = eligible.perspective
        ranked = rank_transcript(
            perspective=perspective,
            text=query.text,
            filters=Filters(),
            requester_ids=requester_identities(perspective),
            excluded=set(),
            providers=self.message_providers,
            lexical=True,
            limit=SOURCE_MESSAGES,
            pool=SOURCE_POOL,
        )
        if ranked.degradation:
            # A semantic arm of history search that failed would leave an order recall's trace could not
            # explain: the arm fails whole, and recall names it (``source_timeout``, ``source_unavailable``).
            if "timeout" in ranked.degradation:
                raise ProviderTimeout(f"history search: {ranked.degradation}")
            raise RuntimeError(f"history search: {ranked.degradation}")
        # Only messages a relevance arm matched: a line that joined history's pool as a strong match's
        # neighbour, with no match of its own, does not speak for the memories learned from it.
        matched = [message_id for _, message_id, components in ranked.chosen if components["match"] > 0]
        message_rank = {message_id: rank for rank, message_id in enumerate(matched, start=1)}
        if not message_rank:
            return []
        with connection.cursor() as cursor:
            cursor.execute(
                _LEARNED_FROM.format(eligible=eligible.sql()),
                {
                    **eligible.params(),
                    "src_kind": EvidenceKind.SOURCE_MESSAGE,
                    "src_messages": sorted(message_rank),
                },
            )
            learned_from = cursor.fetchall()
        best: dict[int, int] = {}
        for revision_id, message_id in learned_from:
            rank = message_rank[message_id]
            best[revision_id] = min(rank, best.get(revision_id, rank))
        ordered = sorted(best.items(), key=lambda item: (item[1], item[0]))[:limit]
        return [ArmHit(self.name, revision_id, rank, round(1.0 / rank, 6)) for revision_id, rank in ordered]
