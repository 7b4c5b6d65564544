"""Candidates for history search: the lexical scan of the sidecar (eligibility judged in SQL as each
match is read, with the exclusion counts the audit records), the re-validation of what provider arms
propose, and the lookups ranking reads (exchange neighbours, rooms the requester spoke in, the window
the turn already loaded).

Nothing here adds to what the eligible set admits: every statement reads through
:class:`memory.retrieval.eligibility.EligibleMessages`, and a provider's proposal counts only once the
same eligibility, exclusions and filters admit it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from django.db import connection, transaction

from config.database.base import prepared_cursor
from history.models import Turn, agent_terms_match
from memory.retrieval.eligibility import EligibleMessages
from memory.retrieval.history_search.ranking import CONTEXT_REACH, EXCHANGE_GAP, PoolDocument
from memory.retrieval.providers import ArmHit, unindexed_column

CANDIDATE_CAP = 200
#: Lexical matches are read from the sidecar best ``ts_rank`` first and judged as they are read
#: (eligibility, exclusions, filters); the scan stops once ``CANDIDATE_CAP`` are eligible or the
#: matches run out. Every match read is judged (for the exclusion counts, which hold up to the scan's end).
#: How many of the current conversation's latest messages count as "the window already loaded".
CURRENT_WINDOW = 30
#: How the sidecar ranks matches. ``ts_rank`` (frequency) rather than ``ts_rank_cd`` (cover density):
#: the query's words are OR'd, and cover density rewarded long messages that repeat one common word.
LEXICAL_RANK = "ts_rank(d.tsv, q.q)"
#: The audit's exclusion rules, in the order the first rule that removed a match is attributed.
EXCLUSION_RULES = ("already_in_context", "no_evidence", "audience", "lineage")


class MessageCandidateProvider(Protocol):
    """A non-SQL candidate source for history search (semantic search over message embeddings)."""

    name: str
    in_database: bool

    def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]: ...


#: The query's terms as BM25 reads them: those of ``engram_search_query``, read back from its text as
#: ``engram_agent_search_query`` reads them, each with its one-term query. Materialised, so that the
#: query is parsed once per statement rather than once per document read.
_QUERY_TERMS = r"""query_terms AS MATERIALIZED (
    SELECT DISTINCT lexeme, quote_literal(lexeme)::tsquery AS q FROM (
        SELECT replace(m[1], '''''', '''') AS lexeme
        FROM regexp_matches(coalesce(engram_search_query(%(q_text)s)::text, ''), '''((?:[^'']|'''')*)''', 'g') AS m
    ) matched
)"""
#: A pool member's sidecar document as BM25 reads it (:func:`memory.retrieval.history_search.ranking.
#: lexical_order`): its length in distinct lexemes and which of the query's terms it holds, each counted
#: once (a chat message rarely repeats a word, and reading every lexeme's positions cost more than the
#: rest of the statement). It is read only for a row the statement has just admitted to the pool (an
#: eligible match of the scan, a re-validated proposal), where the caller has ``located`` it, and only
#: if it is that message's and the agent's, so the term statistics are those of the eligible pool and
#: no message outside it shapes the order; a row without a document reads NULLs.
_POOL_DOCUMENT = """LEFT JOIN LATERAL (
    SELECT length(d.tsv) AS length,
           ARRAY(SELECT t.lexeme FROM query_terms t WHERE d.tsv @@ t.q) AS terms
    FROM history_messagesearchdocument d
    WHERE {located} AND d.message_id = {row}.message_id AND d.agent_id = %(el_agent)s
) document ON TRUE"""


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
WITH {query_terms}
SELECT message_id, conversation_id, actor_id, created_at, lex, verdict, {running}, {unindexed} AS unindexed,
       document.length, document.terms
FROM (
    SELECT matches.message_id, judged.conversation_id, judged.actor_id, judged.created_at, matches.lex,
           matches.document_tid, judged.verdict, {counted}, lead(matches.message_id) OVER scan IS NULL AS last
    FROM (
        SELECT d.message_id, {lexical_rank} AS lex, d.ctid AS document_tid
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
{document}
WHERE verdict = 'eligible' OR last
ORDER BY lex DESC, message_id DESC
LIMIT %(q_cap)s;
FETCH ALL FROM {cursor}
"""
#: Names the scans of one process apart (a transaction may hold several, each until it ends).
_scan_numbers = itertools.count()
#: The verdicts a scan counts, in the order its rows carry their running counts.
SCAN_VERDICTS = (*EXCLUSION_RULES, "eligible")


@dataclass(frozen=True)
class LexicalPool:
    """What one scan of the sidecar admitted: the pool's rows ``(id, conversation, actor, created at)``
    best first, the exclusion counts, and the admitted rows' documents as BM25 reads them."""

    ranked: list[tuple[Any, ...]]
    counts: dict[str, int]
    documents: dict[int, PoolDocument]
    #: The admitted rows' indexed arms whose index does not hold them yet; only ids with any.
    unindexed: dict[int, list[str]]


def lexical_pool(
    eligible: EligibleMessages, structural: str, params: dict[str, Any], *, indexed: Sequence[object] = ()
) -> LexicalPool:
    """The ranked eligible pool, the exclusion counts and the pool's documents, from one scan of the
    sidecar's best matches; with each admitted row, those of the ``indexed`` providers
    (:class:`memory.retrieval.providers.IndexedArm`) whose index does not hold it yet, read in the
    same statement.

    Every match the scan reaches is judged by the search's own predicates in order (already in
    context, no evidence, audience, lineage); only those judged eligible can enter the pool, and only
    theirs are documents of the pool. The scan reads the ranking (best ``ts_rank`` first, ties by id)
    until ``CANDIDATE_CAP`` matches are eligible or the matches run out, so the pool and counts are
    those of the prefix it reached.
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
        query_terms=_QUERY_TERMS,
        # The match's document is read again where the scan found it (its tuple id, valid for the
        # statement's snapshot), not through the primary key: half the cost of reading it.
        document=_POOL_DOCUMENT.format(located="d.ctid = judged_in_order.document_tid", row="judged_in_order"),
        unindexed=unindexed_column(indexed, "judged_in_order.message_id"),
    )
    # A cursor lives in a transaction: the caller's, or one of its own.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(sql, params)
        cursor.nextset()  # the FETCH's rows
        rows = cursor.fetchall()
    # The last row read carries the counts of the whole prefix: its CANDIDATE_CAP-th eligible
    # match, or the last match of all (returned whatever its verdict, and no member of the pool unless
    # it is eligible).
    verdicts = len(SCAN_VERDICTS)
    counts = (
        dict(zip(SCAN_VERDICTS, rows[-1][6 : 6 + verdicts], strict=True)) if rows else dict.fromkeys(SCAN_VERDICTS, 0)
    )
    admitted = [row for row in rows if row[5] == "eligible"]
    pool = [row[:5] for row in admitted]
    # Best rank, then newest, then lowest id.
    pool.sort(key=lambda row: row[0])
    pool.sort(key=lambda row: (row[4], row[3]), reverse=True)
    return LexicalPool(
        ranked=[row[:4] for row in pool],
        counts=counts,
        documents=_documents((row[0], *row[-2:]) for row in admitted),
        unindexed={row[0]: row[-3] for row in admitted if row[-3]},
    )


def _documents(rows: Iterable[tuple[int, int | None, list[str] | None]]) -> dict[int, PoolDocument]:
    """``(id, length, terms held)`` rows as BM25's documents; a message without a document has none."""
    return {
        message_id: PoolDocument(length=length, terms=frozenset(terms))
        for message_id, length, terms in rows
        if length is not None and terms is not None
    }


#: Each side's messages are read from the conversation's time index nearest first, and eligibility is
#: judged one message at a time in that order until one passes (a scalar subquery per message, which
#: the planner cannot turn into a join over every eligible message): the judging, which for a reply
#: checks its stored lineage, costs one or two messages, however many the window holds. The sources
#: are members of the pool this search's scan has just judged; they are not judged again. The
#: neighbours are judged here (eligible, filtered, not excluded), so one the arms did not propose may
#: join the pool; whatever is shown is judged again when it is hydrated.
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
#: One side of each source: the nearest ``CONTEXT_REACH`` messages beyond it that the searchable set
#: admits, within the gap of the source, each with its time, side (-1 before, 1 after), conversation and
#: author. The author is read with the time, from the message row the scan of the conversation's time
#: index visits anyway (on ``bench_history``'s corpus: +0.05 ms a search; a primary-key probe per kept
#: neighbour cost +0.2 ms).
_NEIGHBOUR_SIDE = """
SELECT source.message_id, {side}.id, {side}.created_at, {step}, source.conversation_id, {side}.actor_id
FROM source CROSS JOIN LATERAL (
    SELECT near.id, near.created_at, near.actor_id FROM (
        SELECT m.id, m.created_at, m.actor_id FROM history_message m
        WHERE m.conversation_id = source.conversation_id
          AND (m.created_at, m.id) {beyond} (source.created_at, source.message_id)
          AND m.created_at {within} source.created_at {towards} make_interval(secs => %(n_gap)s)
        ORDER BY m.created_at {order}, m.id {order} OFFSET 0) near
    WHERE (SELECT TRUE FROM em WHERE em.message_id = near.id LIMIT 1)
    ORDER BY near.created_at {order}, near.id {order} LIMIT %(n_reach)s) {side}"""
_NEIGHBOURS = _NEIGHBOURS_OF_SOURCES.format(
    before=_NEIGHBOUR_SIDE.format(side="b", step=-1, beyond="<", within=">=", towards="-", order="DESC"),
    after=_NEIGHBOUR_SIDE.format(side="a", step=1, beyond=">", within="<=", towards="+", order="ASC"),
)


class NeighbourPair(NamedTuple):
    """A neighbour of a context source: a message of the searchable set (eligible, filtered, not
    excluded), ``distance`` messages from the source on its side (1: adjacent)."""

    source_id: int
    message_id: int
    distance: int
    conversation_id: int
    actor_id: int | None
    created_at: datetime


def neighbour_pairs(
    eligible: EligibleMessages, structural: str, params: dict[str, Any], source_ids: Sequence[int]
) -> list[NeighbourPair]:
    """The ``CONTEXT_REACH`` messages just before and just after each source in the searchable set
    (eligible, filtered, not excluded) that were written within ``EXCHANGE_GAP`` of the source; distance
    1 is the adjacent message on its side. An ineligible message is never a neighbour and takes no
    place: the next eligible one is. Each comes with what ranking reads of a candidate (conversation,
    author, time), so that a neighbour the arms did not propose can join the pool. One statement,
    bounded by ``CONTEXT_SOURCES``."""
    if not source_ids:
        return []
    sql = _NEIGHBOURS.format(owned=eligible.owned(), predicate=eligible.predicate(), structural=structural)
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                **params,
                "n_ids": list(source_ids),
                "n_gap": EXCHANGE_GAP.total_seconds(),
                "n_reach": CONTEXT_REACH,
            },
        )
        rows = cursor.fetchall()
    # Each side's messages counted outwards from the source, nearest first.
    sides: dict[tuple[int, int], list[tuple[datetime, int, int, int | None]]] = {}
    for source_id, message_id, created_at, step, conversation_id, actor_id in rows:
        sides.setdefault((source_id, step), []).append((created_at, message_id, conversation_id, actor_id))
    pairs: list[NeighbourPair] = []
    for (source_id, step), found in sides.items():
        found.sort(reverse=step < 0)
        pairs.extend(
            NeighbourPair(source_id, message_id, distance, conversation_id, actor_id, created_at)
            for distance, (created_at, message_id, conversation_id, actor_id) in enumerate(found, 1)
        )
    return pairs


def revalidate(
    eligible: EligibleMessages, structural: str, params: dict[str, Any], ids: set[int]
) -> tuple[list[tuple[Any, ...]], dict[int, PoolDocument]]:
    """The proposed ``ids`` that the search's eligibility, exclusions and filters admit, as rows
    ``(id, conversation, actor, created at)``, and their documents as BM25 reads them; one statement."""
    if not ids:
        return [], {}
    sql = (
        f"WITH {_QUERY_TERMS} SELECT admitted.*, document.length, document.terms FROM ("
        f"SELECT m.id AS message_id, m.conversation_id, m.actor_id, m.created_at FROM {eligible.owned()}"
        f" WHERE m.id = ANY(%(p_ids)s::bigint[]) AND {eligible.predicate()}{structural}"
        f" AND NOT (m.id = ANY(%(q_excluded)s::bigint[]))) admitted "
        f" {_POOL_DOCUMENT.format(located='TRUE', row='admitted')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {**params, "p_ids": sorted(ids)})
        rows = cursor.fetchall()
    return [row[:4] for row in rows], _documents((row[0], *row[4:]) for row in rows)


def conversations_spoken_in(agent_id: int, requester_ids: set[int], conversation_ids: set[int]) -> set[int]:
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


def current_window(turn: Turn | None) -> set[int]:
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
