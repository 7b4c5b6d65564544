"""Candidate arms. Each starts from the eligible set (``el``) and may only narrow it; each returns at
most ``ARM_CAP`` candidates as (revision id, rank, arm score).

The SQL arms run as one statement (one round trip; PostgreSQL evaluates each branch against the
inlined eligibility predicate, driving from its own index). Provider arms (semantic search) sit
behind :class:`CandidateProvider` and run before it under a shared deadline; whatever they return
enters that statement as one more branch, joined to the eligible set by id (the revalidation), so a
provider can never add a row eligibility removed, and its hits are hydrated with the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import connection

from history.models import agent_terms_match
from memory.retrieval.candidates import EVIDENCE_SUMMARY, HYDRATED_COLUMNS, Candidate, candidate_reader
from memory.retrieval.eligibility import ELIGIBLE_ROWS, EligibleRevisions
from memory.retrieval.providers import ArmHit, unindexed_column
from memory.retrieval.query import RecallQuery

ARM_CAP = 200
#: The lexical arm keeps its first 100 admitted matches (the other arms keep ``ARM_CAP``): a recall
#: renders at most a few dozen items, and matches ranked past the hundredth did not reach them. Against
#: 200, LoCoMo observations score the same (lexical and hybrid: recall@5/@10, MRR, nDCG@10 identical), and
#: on the ``bench_turn`` corpus 300 of 300 turn-like recalls rendered the same items, while a recall
#: hydrates and scores half as many candidates (docs/performance.md, "Choices measured on the way").
LEXICAL_CAP = 100
#: How the lexical arm ranks matches: ``ts_rank`` (term frequency). Cover density (``ts_rank_cd``)
#: cost nine times as much per match (4.9 vs 0.55 ms for 936 matches) for the OR'd query words, and
#: ranked no better (LoCoMo observations, lexical recall@10 0.514 with it, 0.517 without).
LEXICAL_RANK = "ts_rank(d.tsv, q.q)"
#: The lexical match, through the sidecar's agent-qualified terms index.
TERMS_MATCH = agent_terms_match("%(el_agent)s", "%(q_text)s")
#: Leading columns of an arms row: the withheld count, then a revision's arms and its ranks and
#: scores in them (arrays), and the indexed arms whose index does not hold it yet; the revision's
#: hydrated columns follow.
HIT_COLUMNS = 5

#: Statements that ask about ownership: "has", "owns", "drives", "uses", without a negated or past form.
OWNERSHIP_PATTERN = r"\m(has|have|owns|own|drives|drive|uses|use|rides)\M"
NEGATED_OWNERSHIP_PATTERN = r"\m(not|no longer|never|used to|sold|formerly)\M"

#: Anchor weights (spec 001): exact subject 1.0 > ownership 0.5 > type-only 0.25.
OWNERSHIP_ANCHOR = 0.5
TYPE_ANCHOR = 0.25


@dataclass(frozen=True)
class TypedRevisions(EligibleRevisions):
    """The eligible set narrowed to some belief types (the recall verb's ``type_hints``).

    Not an eligibility rule: a filter over the whole eligible subquery, so it can only remove rows.
    Every reader of a recall (the arms, the providers, hydration, the withheld count) reads this in
    place of the eligible set, so the arms' caps are spent on the hinted types alone.
    """

    belief_types: tuple[str, ...] = ()

    def params(self) -> dict[str, Any]:
        return {**super().params(), "el_belief_types": list(self.belief_types)}

    def sql(self) -> str:
        return self._narrowed(super().sql())

    def withheld_unknown_sql(self) -> str:
        return self._narrowed(super().withheld_unknown_sql())

    def _narrowed(self, eligible: str) -> str:
        if not self.belief_types:
            return eligible
        return f"SELECT * FROM ({eligible}) typed WHERE typed.belief_type = ANY(%(el_belief_types)s::text[])"


@dataclass(frozen=True)
class ArmsResult:
    hits: list[ArmHit]
    #: Every hit, hydrated through the eligible set in the same statement.
    pool: dict[int, Candidate]
    withheld_unknown: int
    #: Each hit's indexed arms (``indexed``) whose index does not hold it yet; only ids with any.
    unindexed: dict[int, list[str]]


class CandidateProvider(Protocol):
    """A non-SQL candidate source for memory recall (semantic search), searching within the eligible set."""

    name: str
    #: True when it queries Engram's own database (it then runs in the request's connection).
    in_database: bool

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]: ...


def sql_arms(
    eligible: EligibleRevisions,
    query: RecallQuery,
    *,
    delta_after: int | None = None,
    boosts_as_arms: bool = False,
    lexical: bool = True,
    provided: Sequence[ArmHit] = (),
    indexed: Sequence[object] = (),
) -> ArmsResult:
    """Run every applicable SQL arm in one statement: the hits, hydrated, and the unknown-withheld count.

    ``provided`` are provider hits (semantic search): those the eligible set admits come back among
    the hits, with their arm, rank and score, hydrated like the others; the rest are dropped.

    ``lexical=False`` leaves the lexical arm out (to measure the other arms alone); every other arm,
    and eligibility, are unchanged.

    ``boosts_as_arms`` makes subject and conversation candidate sources even for a non-empty query
    (the snapshot's core profile, which has no relevance requirement).

    ``delta_after`` adds the delta arm: beliefs written after a session snapshot's watermark.

    ``indexed`` are the providers that ran and can rank only what their index holds
    (:class:`memory.retrieval.providers.IndexedArm`): each hit is read with those whose index does not
    hold it yet, in the same statement (the fresh-line rule costs no round trip of its own).
    """
    params: dict[str, Any] = {
        **eligible.params(),
        "q_text": query.arm_text,
        "q_subjects": list(query.subject_ids),
        "q_requester": query.subject_ids[0] if query.subject_ids else None,
        "q_types": list(query.anchor_types),
        "q_cap": ARM_CAP,
        "q_lexical_cap": LEXICAL_CAP,
        "q_delta_after": delta_after,
    }
    branches: list[str] = []
    if lexical and not query.empty:
        # The matches in rank order, each admitted only through the eligible set, the first
        # LEXICAL_CAP admitted kept: eligibility is judged match by match from the best down, until the
        # cap is reached, rather than for every match before ranking (the same hits either way).
        branches.append(
            "SELECT 'lexical' AS arm, revision_id, rank, score FROM ("
            " SELECT m.revision_id, row_number() OVER (ORDER BY m.score DESC, m.revision_id) AS rank, m.score"
            f" FROM (SELECT d.revision_id, {LEXICAL_RANK}::float8 AS score"
            " FROM memory_revisionsearchdocument d, (SELECT engram_search_query(%(q_text)s) AS q) q"
            f" WHERE {TERMS_MATCH} ORDER BY score DESC, d.revision_id OFFSET 0) m"
            " WHERE EXISTS (SELECT 1 FROM el WHERE el.revision_id = m.revision_id)"
            " ORDER BY m.score DESC, m.revision_id LIMIT %(q_lexical_cap)s) lexical"
        )
    # Arms that draw from the eligible set by a filter of their own: (name, filter, score, rank
    # order). They read one materialized pool of the rows any of them wants, so the statement holds
    # one copy of the eligibility rules for all of them (each copy costs milliseconds of planning),
    # and the pool is fetched through whichever indexes the filters allow.
    drawn: list[tuple[str, str, str, str]] = []
    # For a non-empty query, subject and conversation only boost (they are features computed at
    # hydration): as candidate sources they would add items that can never pass the relevance rule.
    boosts = query.empty or boosts_as_arms
    if query.subject_ids and boosts:
        drawn.append(
            (
                "subject",
                "el.subject_id = ANY(%(q_subjects)s::bigint[])",
                "1.0",
                "(el.subject_id = %(q_requester)s) DESC, el.salience DESC, el.recorded_at DESC, el.revision_id",
            )
        )
    if eligible.perspective.conversation_id is not None and boosts:
        drawn.append(
            (
                "conversation",
                "el.restricted_to_conversation_id = %(el_conversation)s OR EXISTS ("
                " SELECT 1 FROM memory_memoryevidence ev JOIN history_message m ON m.id = ev.message_id"
                " WHERE ev.revision_id = el.revision_id AND m.conversation_id = %(el_conversation)s)",
                "1.0",
                "el.recorded_at DESC, el.revision_id",
            )
        )
    drawn.append(("always_on", "el.always_on", "1.0", "el.salience DESC, el.revision_id"))
    if query.subject_ids and (query.anchor_types or query.owned_resources):
        ownership = (
            f"(el.belief_type IN ('user_model_attr', 'resource', 'project_fact') AND el.body ~* '{OWNERSHIP_PATTERN}'"
            f" AND el.body !~* '{NEGATED_OWNERSHIP_PATTERN}')"
            if query.owned_resources
            else "FALSE"
        )
        drawn.append(
            (
                "anchor",
                f"el.subject_id = %(q_requester)s AND (el.belief_type = ANY(%(q_types)s::text[]) OR {ownership})",
                f"CASE WHEN {ownership} THEN {OWNERSHIP_ANCHOR} ELSE {TYPE_ANCHOR} END",
                f"({ownership}) DESC, el.salience DESC, el.revision_id",
            )
        )
    if query.empty:
        drawn.append(("recency", "TRUE", "1.0", "el.recorded_at DESC, el.revision_id DESC"))
    if delta_after is not None:
        drawn.append(("delta", "el.revision_id > %(q_delta_after)s", "1.0", "el.revision_id DESC"))
    for name, where, score, order in drawn:
        branches.append(
            f"SELECT '{name}', revision_id, rank, score FROM ("
            f" SELECT el.revision_id, {score}::float8 AS score, row_number() OVER (ORDER BY {order}) AS rank"
            f" FROM drawn el WHERE {where} ORDER BY rank LIMIT %(q_cap)s) {name}"
        )
    drawn_rows = " OR ".join(f"({where})" for _, where, _, _ in drawn)
    if provided:
        # Revalidation: a provider's id counts only if the eligible set admits it, now, in this snapshot.
        params.update(
            p_arms=[hit.arm for hit in provided],
            p_ids=[hit.target_id for hit in provided],
            p_ranks=[hit.rank for hit in provided],
            p_scores=[hit.score for hit in provided],
        )
        branches.append(
            "SELECT p.arm, el.revision_id, p.rank, p.score"
            " FROM unnest(%(p_arms)s::text[], %(p_ids)s::bigint[], %(p_ranks)s::int[], %(p_scores)s::float8[])"
            " AS p(arm, revision_id, rank, score) JOIN el ON el.revision_id = p.revision_id"
        )
    withheld = "0"
    if not query.empty and eligible.may_withhold_unknown():
        withheld = (
            f"(SELECT count(*) FROM ({eligible.withheld_unknown_sql()}) wu"
            " JOIN memory_revisionsearchdocument d ON d.revision_id = wu.revision_id"
            f" WHERE {TERMS_MATCH})"
        )
    union = " UNION ALL ".join(branches)
    # Hits are hydrated in the same statement (same snapshot, one round trip), one row per revision
    # carrying its arms, ranks and scores. Every hit was drawn from ``el`` in this statement, so its
    # row is read by id without applying eligibility twice, driven from the hits (however few the
    # planner expects there to be). A statement with no hits returns one row carrying the withheld count.
    sql = (
        f"WITH el AS NOT MATERIALIZED ({eligible.sql()}), drawn AS MATERIALIZED (SELECT * FROM el WHERE {drawn_rows}), "
        f"hits(arm, revision_id, rank, score) AS ({union}), "
        "by_revision AS (SELECT revision_id, array_agg(arm) AS arms, array_agg(rank) AS ranks,"
        " array_agg(score) AS scores FROM hits GROUP BY revision_id), "
        f"hydrated AS (SELECT h.arms, h.ranks, h.scores, {unindexed_column(indexed, 'el.revision_id')} AS unindexed,"
        f" {HYDRATED_COLUMNS}"
        f" FROM by_revision h JOIN ({ELIGIBLE_ROWS}) el ON el.revision_id = h.revision_id {EVIDENCE_SUMMARY}) "
        "SELECT w.withheld, hydrated.* "
        f"FROM (SELECT {withheld} AS withheld) w LEFT JOIN hydrated ON TRUE"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        read = candidate_reader([c.name for c in cursor.description or ()][HIT_COLUMNS:])
        rows = cursor.fetchall()
    hits: list[ArmHit] = []
    pool: dict[int, Candidate] = {}
    unindexed: dict[int, list[str]] = {}
    for row in rows:
        arms, ranks, scores, not_indexed = row[1:HIT_COLUMNS]
        if arms is None:
            continue
        candidate = read(row[HIT_COLUMNS:])
        pool[candidate.revision_id] = candidate
        if not_indexed:
            unindexed[candidate.revision_id] = not_indexed
        hits.extend(
            ArmHit(arm, candidate.revision_id, int(rank), float(score))
            for arm, rank, score in zip(arms, ranks, scores, strict=True)
        )
    withheld_count = int(rows[0][0]) if rows else 0
    return ArmsResult(hits, pool, withheld_count, unindexed)
