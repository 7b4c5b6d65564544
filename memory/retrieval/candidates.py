"""Hydrating candidates from canonical rows, through the eligible set again.

Arms return ids; the text and attributes shown to anyone are read here, after authorization, from
``memory_memoryrevision`` itself (never from an index row). Because the hydration query is the
eligibility subquery narrowed to the candidate ids, it is also the revalidation step: an id a
provider returned that eligibility does not admit simply does not come back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection

from memory.retrieval.eligibility import EligibleRevisions


@dataclass
class Candidate:
    revision_id: int
    entry_id: int
    number: int
    body: str
    subject_id: int | None
    source_actor_id: int | None
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
    components: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    reason: str = ""
    carried: bool = False
    band: str = "low"
    blocked: str = ""
    conflicts: list[int] = field(default_factory=list)
    near_duplicate: bool = False

    @property
    def order_key(self) -> tuple[float, int]:
        """Total order for rendering: score descending, then revision id ascending."""
        return (-round(self.score, 9), self.revision_id)


#: The attributes of one eligible revision (``el`` in scope), read from the canonical rows after
#: authorization. Shared by :func:`hydrate` and the arms statement, which hydrates its own hits.
HYDRATED_COLUMNS = """
       el.revision_id, el.entry_id, el.number, el.body, el.subject_id, el.source_actor_id, el.belief_type,
       el.portability, el.origin_scope, el.confidence, el.authority, el.salience, el.always_on, el.lifecycle,
       el.valid_from, el.valid_to, el.recorded_at, el.restricted_to_conversation_id, el.supersedes_id,
       el.utility, el.last_used_at, el.flagged_for_review,
       (SELECT count(*) FROM memory_memoryevidence ev WHERE ev.revision_id = el.revision_id) AS evidence_count,
       (SELECT min(ev.message_id) FROM memory_memoryevidence ev
         WHERE ev.revision_id = el.revision_id AND ev.kind = 'source_message') AS source_message_id,
       (el.restricted_to_conversation_id IS NOT DISTINCT FROM %(el_conversation)s OR EXISTS (
           SELECT 1 FROM memory_memoryevidence ev JOIN history_message m ON m.id = ev.message_id
           WHERE ev.revision_id = el.revision_id AND m.conversation_id = %(el_conversation)s)) AS in_conversation,
       ARRAY(SELECT CASE WHEN rc.revision_a_id = el.revision_id THEN rc.revision_b_id ELSE rc.revision_a_id END
             FROM memory_revisionconflict rc
             WHERE rc.agent_id = %(el_agent)s AND rc.resolved_at IS NULL
               AND (rc.revision_a_id = el.revision_id OR rc.revision_b_id = el.revision_id)) AS conflict_partners"""

_HYDRATE = f"""
WITH el AS NOT MATERIALIZED ({{eligible}})
SELECT {HYDRATED_COLUMNS}
FROM el
WHERE el.revision_id = ANY(%(candidate_ids)s::bigint[])
"""


def candidate_from_row(columns: Sequence[str], row: Sequence[Any]) -> Candidate:
    """A candidate from one row of :data:`HYDRATED_COLUMNS` (named by ``columns``)."""
    values: dict[str, Any] = dict(zip(columns, row, strict=True))
    partners = values.pop("conflict_partners")
    candidate = Candidate(**values)
    candidate.conflicts = sorted(partners)
    return candidate


def hydrate(eligible: EligibleRevisions, revision_ids: Iterable[int]) -> dict[int, Candidate]:
    """The eligible revisions among ``revision_ids``, hydrated; ids eligibility does not admit are absent.

    ``Candidate.conflicts`` holds every unresolved conflict partner; callers keep the ones they show.
    """
    ids = sorted(set(revision_ids))
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_HYDRATE.format(eligible=eligible.sql()), {**eligible.params(), "candidate_ids": ids})
        columns = [c.name for c in cursor.description or ()]
        candidates = [candidate_from_row(columns, row) for row in cursor.fetchall()]
    return {c.revision_id: c for c in candidates}
