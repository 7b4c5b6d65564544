"""The fingerprint of a belief: what a rejection remembers so that the belief can never come back.

One function computes it for both sides, the rejection that records it and every write path that
must refuse a rejected belief (``memory.services``), so the two can never disagree about what
"the same belief" means. Two statements are the same belief when they say the same thing about the
same subject after normalisation: Unicode compatibility forms folded, case folded, whitespace
collapsed, surrounding quotes and final punctuation dropped. Rewording is a different belief.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from memory.models import MemoryRevision, Rejection, RejectionKind

_SPACE = re.compile(r"\s+")
#: Quotes (straight and curly) and sentence punctuation around a statement carry no meaning.
_EDGES = "\"'`\u201c\u201d\u2018\u2019 .!?;:,"

#: Kinds that say the statement itself is false (now): only these refuse a re-learned copy. "Not here"
#: and "something's wrong" leave the belief true somewhere, so they never block a write.
REPLAYED_KINDS = (RejectionKind.NOT_TRUE, RejectionKind.CHANGED)


def normalise_statement(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", folded).strip(_EDGES)


def belief_fingerprint(body: str, subject_id: int | None) -> str:
    """sha256 (hex) of the normalised statement and its subject actor id ("" when unresolved)."""
    key = f"{normalise_statement(body)}\x1f{subject_id if subject_id is not None else ''}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def revision_fingerprint(revision: MemoryRevision) -> str:
    return belief_fingerprint(revision.body, revision.subject_id)


def is_rejected(*, agent_id: int, body: str, subject_id: int | None) -> bool:
    """Has an end user rejected this statement about this subject as untrue, in this agent's memory?"""
    return Rejection.objects.filter(
        agent_id=agent_id, fingerprint=belief_fingerprint(body, subject_id), kind__in=REPLAYED_KINDS
    ).exists()
