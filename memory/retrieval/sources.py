"""Memory recall's source arm: eligible memories in the order of the messages they were learned from.

A memory is a short statement distilled from a message, and the message often carries what the
statement left out: the words of the question, the place, the exchange around it. History search
ranks the perspective's eligible transcript for the query (lexical and semantic arms, exchange
context, names and dates); the memories whose source message is among its ``SOURCE_MESSAGES``
strongest, and matched the query itself, are proposed in that order, a memory taking the rank of its
best source.

Privacy: history search reads only messages the perspective may see (its own eligibility, filters
and exclusions), so no message outside the audience shapes the order; the proposal names only
revisions of the eligible set, and, as for every provider, the arms statement judges each id against
the eligible set again when it hydrates the candidates, so no ineligible memory can enter.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from memory.models import EvidenceKind
from memory.retrieval.eligibility import EligibleRevisions
from memory.retrieval.history_search.candidates import MessageCandidateProvider
from memory.retrieval.history_search.query import HistoryQuery, requester_identities, resolve_filters
from memory.retrieval.history_search.search import rank_transcript
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import RecallQuery

#: How many of the transcript's strongest messages propose the memories learned from them. Against
#: LoCoMo's development split 40 ranked the same as 20 (docs/quality.md).
SOURCE_MESSAGES = 20

#: The eligible revisions learned from the given messages, with the message each was learned from. Each
#: of the few revisions found is judged by one probe of the eligible set (as the semantic arm judges its
#: nearest rows), not by a join the planner may build over every revision the agent has.
_LEARNED_FROM = (
    "SELECT ev.revision_id, ev.message_id FROM memory_memoryevidence ev"
    " WHERE ev.kind = %(src_kind)s AND ev.message_id = ANY(%(src_messages)s::bigint[])"
    " AND (SELECT TRUE FROM ({eligible}) el WHERE el.revision_id = ev.revision_id LIMIT 1)"
)


class SourceMessages:
    """The source arm, as a candidate provider of memory recall; ``message_providers`` are history
    search's semantic arms (none: its lexical arm alone ranks the transcript)."""

    name = "source"
    in_database = True

    def __init__(self, message_providers: Sequence[MessageCandidateProvider]) -> None:
        self.message_providers = message_providers

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        if not query.text.strip():
            return []
        perspective = eligible.perspective
        requester_ids = requester_identities(perspective)
        filters = resolve_filters(perspective, HistoryQuery(text=query.text), requester_ids)
        if filters is None:
            return []
        ranked = rank_transcript(
            perspective=perspective,
            text=query.text,
            filters=filters,
            requester_ids=requester_ids,
            excluded=set(),
            providers=self.message_providers,
            lexical=True,
            limit=SOURCE_MESSAGES,
        )
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
