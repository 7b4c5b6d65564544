"""Contradictions found at write time: a new belief and a live one that give the same single-valued
predicate of the same subject different values are linked as a ``RevisionConflict``.

Linking is all this does. Neither belief changes, and nothing is resolved: retrieval returns both
with a ``conflicts=`` marker, and an operator resolves the pair from the conflict queue (spec 001 §6:
formation refuses to guess, and retrieval must not quietly resolve at read time).

Only beliefs the writer may see are compared: the same agent's live current revisions that the
eligible set (:mod:`memory.retrieval.eligibility`, the one visibility rule) admits in the audience the
new revision was written for. A belief the new one's readers could not see is never named beside it.
What counts as the same predicate and a different value is :mod:`memory.statements`.
"""

from __future__ import annotations

from django.db import connection

from history.audience import Audience
from memory.models import MemoryRevision, RevisionConflict
from memory.retrieval.eligibility import EligibleRevisions, Perspective
from memory.statements import contradicts, parse_claim

#: At most this many live beliefs of one subject are read to compare with a new one.
COMPARED_LIMIT = 500


def link_conflicts(revision: MemoryRevision) -> list[RevisionConflict]:
    """Link ``revision`` with every visible live belief it contradicts; return the links created."""
    claim = parse_claim(revision.body)
    if claim is None or revision.subject_id is None:
        return []
    audience: Audience = revision.audience
    eligible = EligibleRevisions(
        Perspective(
            agent_id=revision.agent_id,
            destination=audience,
            conversation_id=revision.restricted_to_conversation_id,
            project=revision.origin_scope,
        )
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT el.revision_id, el.body FROM ({eligible.sql()}) el"
            " WHERE el.subject_id = %(c_subject)s AND el.entry_id <> %(c_entry)s"
            " ORDER BY el.revision_id LIMIT %(c_limit)s",
            {
                **eligible.params(),
                "c_subject": revision.subject_id,
                "c_entry": revision.entry_id,
                "c_limit": COMPARED_LIMIT,
            },
        )
        rows = cursor.fetchall()
    linked: list[RevisionConflict] = []
    for other_id, body in rows:
        other = parse_claim(body)
        if other is None or not contradicts(claim, other):
            continue
        first, second = sorted((int(other_id), revision.pk))
        conflict, created = RevisionConflict.objects.get_or_create(
            agent_id=revision.agent_id, revision_a_id=first, revision_b_id=second
        )
        if created:
            linked.append(conflict)
    return linked
