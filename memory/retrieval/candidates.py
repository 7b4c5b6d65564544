"""Hydrating candidates from canonical rows, through the eligible set again.

Arms return ids; the text and attributes shown to anyone are read here, after authorization, from
``memory_memoryrevision`` itself (never from an index row). Because the hydration query is the
eligibility subquery narrowed to the candidate ids, it is also the revalidation step: an id a
provider returned that eligibility does not admit simply does not come back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from django.db import connection

from memory.retrieval.eligibility import EligibleRevisions

#: The ranking features, in the order ``Candidate.features`` holds them (see ``memory.retrieval.ranking``);
#: the penalty, which subtracts, comes last.
FEATURE_NAMES = (
    "match",
    "subject",
    "asked_subject",
    "conversation",
    "salience",
    "confidence",
    "reinforce",
    "authority",
    "scope",
    "utility",
    "penalty",
)


@dataclass(slots=True)
class Candidate:
    revision_id: int
    entry_id: int
    number: int
    body: str
    subject_id: int | None
    source_actor_id: int | None
    source_actor_ids: list[int]
    belief_type: str
    portability: str
    origin_scope: str
    confidence: float
    authority: str
    salience: float
    always_on: bool
    lifecycle: str
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    restricted_to_conversation_id: int | None
    supersedes_id: int | None
    utility: float
    last_used_at: datetime | None
    flagged_for_review: bool
    evidence_count: int
    source_message_id: int | None
    #: Learned in (or restricted to) the conversation being answered.
    in_conversation: bool
    #: arm name -> rank within that arm
    arms: dict[str, int] = field(default_factory=dict)
    arm_scores: dict[str, float] = field(default_factory=dict)
    #: The ranking features' values, in ``FEATURE_NAMES`` order, as scoring computed them.
    features: tuple[float, ...] = ()
    score: float = 0.0
    reason: str = ""
    carried: bool = False
    band: str = "low"
    blocked: str = ""
    conflicts: list[int] = field(default_factory=list)
    near_duplicate: bool = False
    #: Shown for its conflict partner's sake: no arm proposed it, or it fell below the relevance floor.
    paired: bool = False

    @property
    def match(self) -> float:
        """The fused relevance feature (0 before scoring)."""
        return self.features[0] if self.features else 0.0

    @property
    def components(self) -> dict[str, float]:
        """The features by name, rounded as traces and payloads show them (empty before scoring)."""
        if not self.features:
            return {}
        return {name: round(value, 4) for name, value in zip(FEATURE_NAMES, self.features, strict=True)}

    @property
    def order_key(self) -> tuple[float, int]:
        """Total order for rendering: score descending, then revision id ascending."""
        return (-round(self.score, 9), self.revision_id)


#: The attributes of one eligible revision (``el`` in scope, joined to :data:`EVIDENCE_SUMMARY`), read
#: from the canonical rows after authorization. Shared by :func:`hydrate` and the arms statement,
#: which hydrates its own hits.
HYDRATED_COLUMNS = """
       el.revision_id, el.entry_id, el.number, el.body, el.subject_id, el.source_actor_id, el.source_actor_ids,
       el.belief_type, el.portability, el.origin_scope, el.confidence, el.authority, el.salience, el.always_on,
       el.lifecycle,
       el.valid_from, el.valid_to, el.recorded_at, el.restricted_to_conversation_id, el.supersedes_id,
       el.utility, el.last_used_at, el.flagged_for_review, evs.evidence_count, evs.source_message_id,
       (el.restricted_to_conversation_id IS NOT DISTINCT FROM %(el_conversation)s OR evs.in_conversation)
         AS in_conversation,
       ARRAY(SELECT CASE WHEN rc.revision_a_id = el.revision_id THEN rc.revision_b_id ELSE rc.revision_a_id END
             FROM memory_revisionconflict rc
             WHERE rc.agent_id = %(el_agent)s AND rc.resolved_at IS NULL
               AND (rc.revision_a_id = el.revision_id OR rc.revision_b_id = el.revision_id)) AS conflict_partners"""

#: A revision's evidence in one pass (``evs``): how much there is, its first source message, and
#: whether any of it was said in the conversation being answered. Follows the ``el`` it summarizes.
EVIDENCE_SUMMARY = """
CROSS JOIN LATERAL (
    SELECT count(*) AS evidence_count,
           min(ev.message_id) FILTER (WHERE ev.kind = 'source_message') AS source_message_id,
           coalesce(bool_or(m.conversation_id = %(el_conversation)s), false) AS in_conversation
    FROM memory_memoryevidence ev LEFT JOIN history_message m ON m.id = ev.message_id
    WHERE ev.revision_id = el.revision_id) evs"""

_HYDRATE = f"""
WITH el AS NOT MATERIALIZED ({{eligible}})
SELECT {HYDRATED_COLUMNS}
FROM el {EVIDENCE_SUMMARY}
WHERE el.revision_id = ANY(%(candidate_ids)s::bigint[])
"""


_FIELD_NAMES = [f.name for f in fields(Candidate)]
#: What :data:`HYDRATED_COLUMNS` fills: the candidate's leading fields, in order (its conflict partners follow).
HYDRATED_FIELDS = tuple(_FIELD_NAMES[: _FIELD_NAMES.index("in_conversation") + 1])


def candidate_reader(columns: Sequence[str]) -> Callable[[Sequence[Any]], Candidate]:
    """Reads one row of :data:`HYDRATED_COLUMNS`, named by ``columns`` (checked once, then read by position)."""
    if tuple(columns) != (*HYDRATED_FIELDS, "conflict_partners"):
        raise ValueError(f"hydrated columns {list(columns)} do not match the candidate's fields")
    hydrated = len(HYDRATED_FIELDS)

    def read(row: Sequence[Any]) -> Candidate:
        candidate = Candidate(*row[:hydrated])
        candidate.conflicts = sorted(row[hydrated])
        return candidate

    return read


def hydrate(eligible: EligibleRevisions, revision_ids: Iterable[int]) -> dict[int, Candidate]:
    """The eligible revisions among ``revision_ids``, hydrated; ids eligibility does not admit are absent.

    ``Candidate.conflicts`` holds every unresolved conflict partner; callers keep the ones they show.
    """
    ids = sorted(set(revision_ids))
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_HYDRATE.format(eligible=eligible.sql()), {**eligible.params(), "candidate_ids": ids})
        read = candidate_reader([c.name for c in cursor.description or ()])
        candidates = [read(row) for row in cursor.fetchall()]
    return {c.revision_id: c for c in candidates}


def conflict_partners(
    eligible: EligibleRevisions, candidates: Iterable[Candidate], known: Collection[int]
) -> dict[int, Candidate]:
    """The unresolved conflict partners of ``candidates`` that are not among ``known``, hydrated.

    A partner is read like every candidate, through the eligible set (:func:`hydrate`): one this
    perspective may not see does not come back, so it can neither be shown nor named.
    """
    wanted = sorted({p for c in candidates for p in c.conflicts if p not in known})
    if not wanted:
        return {}
    return hydrate(eligible, wanted)
