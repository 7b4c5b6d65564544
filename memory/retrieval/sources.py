"""Memory recall's source arm: recall's candidates ranked by the messages they were learned from.

A memory is a short statement distilled from a message, and the message often carries what the
statement left out: the words of the question, the place, the exchange around it. Once recall's other
arms have gathered the candidate pool, the messages its memories were learned from are ranked for the
question as history search ranks messages by relevance: by their words (``ts_rank`` over the message's
search document) and by their meaning (the message's vector, where the semantic arm runs, read with the
vector of the message said just before it: the exchange a reply answers), fused by reciprocal rank.
The candidates learned from the ``SOURCE_MESSAGES`` strongest messages that matched take the arm's
ranks, each the rank of its best message.

It adds no candidate, and it is one statement: on LoCoMo's development split the arm that ranked the
whole transcript with history search's full ranking and proposed what it found scored the same
restricted to the memories the other arms had already found (docs/quality.md), so what the arm has to
rank is the few hundred messages the pool was learned from, each read by id.

A memory is learned from the messages any revision of its entry names as its source: an amended
memory keeps its first revision's source, and one whose amendment names a source of its own has that
one too, and takes the better rank of the two.

The question reads as the relevance arms read it (:attr:`RecallQuery.arm_text`: without the names of the
people it names), for the words and the meaning alike, so a question that names nobody needs no model
run of its own (its vector is the semantic arm's). A message written a moment ago, not yet embedded, is
ranked over its words alone, never read as a poor match (the fresh-line rule).

Privacy: every candidate was admitted by the eligible set (the arms statement hydrated it), and each
source message is judged by history search's own eligibility (``EligibleMessages``) in the statement,
so a message outside the audience ranks nothing: its memory keeps the ranks its own arms gave it. The
message said before a source is judged by the same eligibility: one the perspective may not read lends
no meaning, and the nearest earlier one it may read is the exchange instead. A
historical recall (``as_of`` or ``known_at``) is the store as it stood then, and the messages' vectors
and search documents have no such bound, so the arm ranks nothing there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.db import connection
from pgvector import Vector

from memory.embeddings.search import SemanticMessages
from memory.models import EvidenceKind, MessageEmbedding
from memory.retrieval.candidates import Candidate
from memory.retrieval.eligibility import EligibleMessages, EligibleRevisions
from memory.retrieval.history_search import EXCHANGE_GAP, fused_match
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import RecallQuery

#: How many of the pool's source messages, the strongest that matched the question, rank the memories
#: learned from them. More rank more memories, and the lower refill bar then lets more in: on LoCoMo's
#: development split (hybrid, at k 60 and a refill bar of 0.5) 10 gave recall@10 0.637 with a noise
#: ratio below the default's, 20 and 40
#: gave 0.646 and 0.653 with noise ratios far above it (docs/quality.md, "The source arm on by default").
SOURCE_MESSAGES = 10
#: A source message is read for its meaning with the exchange it answers: its distance to the question
#: is this share the distance of the message said just before it (the nearest earlier message of its
#: conversation the perspective may read, written within history search's ``EXCHANGE_GAP``), the rest
#: its own. A reply ("Sure, the blue one.") often says little the question shares, and the line it
#: answers says the rest. On LoCoMo's development split (hybrid, observations, refill bar 0.4) shares of
#: 0.2, 0.3 and 0.4 all raised recall@10, by 0.004 to 0.010, with a lower noise ratio (docs/quality.md,
#: "The source fusion at k 10, and the line a reply answers").
EXCHANGE_SHARE = 0.3

#: The pool's entries' source messages that the perspective may read, each with its ``ts_rank`` for the
#: question where its search document matches it (NULL where it does not), its vector's cosine distance
#: to the question (NULL where it has no vector in the live generation) and the distance of the message
#: said just before it (:data:`_BEFORE`; NULL where there is none, or it has no vector). Each message is
#: judged by one probe of its row, and its document and vectors are read by id: nothing is scanned.
_RANKED_SOURCES = """
WITH learned AS MATERIALIZED (
    SELECT r.entry_id, ev.message_id FROM memory_memoryrevision r
    JOIN memory_memoryevidence ev ON ev.revision_id = r.id
    WHERE r.entry_id = ANY(%(src_entries)s::bigint[]) AND ev.kind = %(src_kind)s
), em AS NOT MATERIALIZED (
    SELECT m.id AS message_id FROM {owned} WHERE {predicate}
), judged AS MATERIALIZED (
    SELECT m.id AS message_id, m.conversation_id, m.created_at,
           (SELECT ts_rank(d.tsv, q.q) FROM history_messagesearchdocument d,
                   (SELECT engram_search_query(%(q_text)s) AS q) q
            WHERE d.message_id = m.id AND d.agent_id = %(el_agent)s AND d.tsv @@ q.q) AS lex,
           {distance} AS distance
    FROM {owned}
    WHERE m.id IN (SELECT message_id FROM learned) AND {predicate}
)
SELECT learned.entry_id, judged.message_id, judged.lex, judged.distance, {before} AS before
FROM learned JOIN judged ON judged.message_id = learned.message_id
"""
_DISTANCE = (
    "(SELECT v.vector <=> %(s_query)s::vector FROM {table} v WHERE v.message_id = m.id"
    " AND v.generation_id = %(s_generation)s AND v.dims = %(s_dims)s)"
)
#: The distance to the question of the message said just before a source (``judged``): the nearest
#: earlier message of its conversation, written within the exchange gap, that the perspective may read
#: (``em``: the same eligibility as the source's). The conversation's time index is read nearest first,
#: and each message is judged in that order until one passes, as history search reads a hit's
#: neighbours: one the perspective may not read is never the exchange, and takes no place.
_BEFORE = """(SELECT v.vector <=> %(s_query)s::vector FROM {table} v
    WHERE v.generation_id = %(s_generation)s AND v.dims = %(s_dims)s AND v.message_id = (
        SELECT near.id FROM (
            SELECT p.id, p.created_at FROM history_message p
            WHERE p.conversation_id = judged.conversation_id
              AND (p.created_at, p.id) < (judged.created_at, judged.message_id)
              AND p.created_at >= judged.created_at - make_interval(secs => %(s_gap)s)
            ORDER BY p.created_at DESC, p.id DESC OFFSET 0) near
        WHERE (SELECT TRUE FROM em WHERE em.message_id = near.id LIMIT 1)
        ORDER BY near.created_at DESC, near.id DESC LIMIT 1))"""


class SourceMessages:
    """The source arm of memory recall. ``message_vectors`` is history search's semantic arm, whose
    generation holds the messages' vectors (none: the words alone rank them)."""

    name = "source"

    def __init__(self, message_vectors: Sequence[SemanticMessages]) -> None:
        self.message_vectors = message_vectors

    def rank(self, eligible: EligibleRevisions, query: RecallQuery, pool: Mapping[int, Candidate]) -> list[ArmHit]:
        """The arm's hits over ``pool`` (recall's hydrated candidates, by revision id): each candidate
        learned from one of the strongest matching source messages, at its best message's rank."""
        if query.empty or eligible.historical or not pool:
            return []
        revision_of = {candidate.entry_id: candidate.revision_id for candidate in pool.values()}
        messages = EligibleMessages(eligible.perspective)
        text = query.arm_text
        params = {
            **messages.params(),
            "q_text": text,
            "src_entries": sorted(revision_of),
            "src_kind": EvidenceKind.SOURCE_MESSAGE,
        }
        vectors = self.message_vectors[0] if self.message_vectors else None
        distance = before = "NULL::float8"
        if vectors is not None:
            distance = _DISTANCE.format(table=MessageEmbedding._meta.db_table)
            before = _BEFORE.format(table=MessageEmbedding._meta.db_table)
            params |= {
                "s_query": Vector(vectors.query_vector(text)).to_text(),
                "s_generation": vectors.generation.pk,
                "s_dims": int(vectors.generation.dims),
                "s_gap": EXCHANGE_GAP.total_seconds(),
            }
        sql = _RANKED_SOURCES.format(
            distance=distance, before=before, owned=messages.owned(), predicate=messages.predicate()
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        message_rank = self._message_ranks(rows, semantic_floor=vectors.floor if vectors is not None else None)
        best: dict[int, int] = {}
        for entry_id, message_id, *_ in rows:
            rank = message_rank.get(message_id)
            if rank is not None:
                revision_id = revision_of[entry_id]
                best[revision_id] = min(rank, best.get(revision_id, rank))
        ordered = sorted(best.items(), key=lambda item: (item[1], item[0]))
        return [ArmHit(self.name, revision_id, rank, round(1.0 / rank, 6)) for revision_id, rank in ordered]

    @staticmethod
    def _message_ranks(
        rows: Sequence[tuple[int, int, float | None, float | None, float | None]], *, semantic_floor: float | None
    ) -> dict[int, int]:
        """The strongest ``SOURCE_MESSAGES`` messages that matched, by reciprocal-rank fusion of their
        words' rank and (where vectors exist) their meaning's rank among the pool's source messages,
        each message's meaning read with the message said just before it (``EXCHANGE_SHARE``)."""
        words = {message_id: lex for _, message_id, lex, _, _ in rows if lex is not None}
        ranks = {"lexical": _ranked(sorted(words, key=lambda m: (-words[m], m)))}
        arms = ["lexical"]
        unranked: dict[str, set[int]] = {}
        if semantic_floor is not None:
            meaning = {
                message_id: own if before is None else (1 - EXCHANGE_SHARE) * own + EXCHANGE_SHARE * before
                for _, message_id, _, own, before in rows
                if own is not None
            }
            near = {message_id: d for message_id, d in meaning.items() if d <= 1 - semantic_floor}
            ranks["semantic"] = _ranked(sorted(near, key=lambda m: (near[m], m)))
            arms.append("semantic")
            # Not embedded yet: ranked over its words alone, never read as a poor match.
            unranked["semantic"] = {message_id for _, message_id, _, own, _ in rows if own is None}
        match = {message_id: fused_match(message_id, ranks, arms, unranked) for _, message_id, *_ in rows}
        strongest = sorted((m for m in match if match[m] > 0), key=lambda m: (-match[m], m))[:SOURCE_MESSAGES]
        return _ranked(strongest)


def _ranked(ids: Sequence[int]) -> dict[int, int]:
    return {message_id: rank for rank, message_id in enumerate(ids, start=1)}
