"""Conversation history search: the full transcript, under exactly the disclosure rule memory uses.

Search is a candidate source and a ranking problem, not a new authorization boundary: every hit and
every neighbour comes from :class:`memory.retrieval.eligibility.EligibleMessages` (agent through the
conversation, source evidence, audience, lineage), decided in SQL before anything is ranked. The
sidecar only narrows the scan; text is hydrated from ``history_message`` after authorization.

Query words are OR'd (``engram_search_query``) and the sidecar's best ``ts_rank`` matches are read; the
arm's matches are then ordered by BM25, whose term statistics are those of the eligible pool's own
documents. The semantic arm (a provider) proposes candidates beside it and the two are fused by
reciprocal rank. People the query names (resolved through the perspective's own actors, as the actor
filter is) are matched as the authors of messages rather than as words. Structural filters (actor,
conversation, connector, time range) only narrow, and an actor filter that does not resolve in the
perspective returns nothing. Ranking (history@6) adds: authorship by a named person; exchange context
(the summed match of a message's eligible neighbours, two a side, the second at half weight, since a
question and its answer are adjacent and often only one shares the query's words); the dates the query
names (a day, month, year or relative span, matched against when each message was written); for a
question asking when (or how long), the lines that tell a time ("yesterday", "last week", "in May",
"two years ago": :mod:`memory.retrieval.dates`, read only for the pool's own members); the sitting
(a run of one conversation's pool members without a long gap) that holds the most of the strongest
matches; a line's length as a share of the pool's average (a one-line reaction rarely holds an answer);
recency, same actor, same conversation, a small boost for rooms the requester spoke in, and a demotion
of the window the turn already loaded. Context comes from one bounded neighbour query through the same
eligible set (with the same filters and exclusions): the strongest matches' neighbours join the pool,
with no match of their own, whether or not an arm proposed them; nothing else does. The message being
answered and the loaded window are excluded. Every search, empty or not, writes a
``ConversationSearchEvent`` with a keyed digest and exclusion counts by the first rule that removed each
match; if that write fails the search fails. Results join the turn's evidence. (``rank_transcript`` is
the ranking alone, under the same eligibility: it excludes what its caller names, hydrates nothing and
writes no audit.)

Transcript lines are data, never instructions, exactly like memories: every hit and every neighbour
goes through memory recall's safety scan (:func:`memory.retrieval.safety.block_reason`) when it is
hydrated, before anything reaches the agent. A line that looks like a prompt injection or holds a
credential is returned as ``[BLOCKED]`` with its id, position and metadata kept (so the exchange still
reads in order and provenance still names it) and its text never shown; blocking is per message, and
the search audit records how many were withheld and their ids (``blocked_count``,
``blocked_message_ids``).

The package is split by idea: :mod:`.query` (the query, its filters, the people and dates it names),
:mod:`.candidates` (the lexical scan, provider re-validation and the lookups ranking reads), :mod:`.times`
(which of the pool's own lines tell a time),
:mod:`.ranking` (the policy: a pure function of the pool), :mod:`.assembly` (hydration, evidence, audit)
and :mod:`.search` (the service that runs them in order). Importers use the names re-exported here.
"""

from memory.retrieval.history_search.assembly import (
    MESSAGES_PER_HIT,
    NEIGHBOURS,
    TURN_EVIDENCE_CEILING,
    FoundMessage,
    HistoryResult,
    Hit,
    blocked_placeholder,
)
from memory.retrieval.history_search.candidates import (
    CANDIDATE_CAP,
    CURRENT_WINDOW,
    EXCHANGE_GAP,
    EXCLUSION_RULES,
    MessageCandidateProvider,
)
from memory.retrieval.history_search.query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Filters,
    HistoryQuery,
    match_text,
    named_actors,
    requester_identities,
)
from memory.retrieval.history_search.ranking import (
    CONTEXT_DECAY,
    CONTEXT_REACH,
    CONTEXT_SOURCES,
    POLICY_VERSION,
    RECENCY_DAYS,
    RRF_K,
    WEIGHTS,
    Candidate,
    Signals,
    context_sources,
    fused_match,
    score_candidates,
)
from memory.retrieval.history_search.search import rank_transcript, search_history

__all__ = [
    "CANDIDATE_CAP",
    "CONTEXT_DECAY",
    "CONTEXT_REACH",
    "CONTEXT_SOURCES",
    "CURRENT_WINDOW",
    "DEFAULT_LIMIT",
    "EXCHANGE_GAP",
    "EXCLUSION_RULES",
    "MAX_LIMIT",
    "MESSAGES_PER_HIT",
    "NEIGHBOURS",
    "POLICY_VERSION",
    "RECENCY_DAYS",
    "RRF_K",
    "TURN_EVIDENCE_CEILING",
    "WEIGHTS",
    "Candidate",
    "Filters",
    "FoundMessage",
    "HistoryQuery",
    "HistoryResult",
    "Hit",
    "MessageCandidateProvider",
    "Signals",
    "blocked_placeholder",
    "context_sources",
    "fused_match",
    "match_text",
    "named_actors",
    "rank_transcript",
    "requester_identities",
    "score_candidates",
    "search_history",
]
