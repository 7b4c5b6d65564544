"""Truthful confirmation: the committed ledger as an instruction, and the narrow claim guard.

The ledger is built only from ``MemoryOperation`` rows, which the write services record from what
the store returned, never from what a model asked for. Before a reply is generated it is handed to
the model as a developer-role instruction naming every operation, entry and resulting revision, and
prohibiting the claims no committed operation supports.

The claim guard then fails a reply that still asserts such a mutation. It matches first-person,
past-tense assertions and deliberately does not parse negation, hypotheticals or reported speech:
prose is not a security boundary, and the guard exists to make ignoring the ledger loud.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memory.models import MemoryOperation, Operation, short_id

# "I", "I've", "I have just", optionally followed by an earlier past-tense clause and "and"/"then",
# so that "I've re-attributed it and marked the old entry as superseded" asserts both mutations.
_I = r"\bI(?:\s+have|'ve|\s+just|\s+also)*\s+(?:[a-z-]+ed\b[^.!?\n]{0,80}?\b(?:and|then)\s+(?:also\s+|have\s+)?)?"

#: Claim kind -> first-person past-tense patterns asserting that kind of durable mutation.
CLAIM_PATTERNS: dict[str, list[re.Pattern[str]]] = {
    "reattribution": [
        re.compile(_I + r"(?:re-?attributed|re-?assigned|reassigned)\b", re.IGNORECASE),
        re.compile(_I + r"(?:attributed|assigned)\b[^.!?\n]{0,60}\bto\b", re.IGNORECASE),
        re.compile(_I + r"changed\b[^.!?\n]{0,40}\b(?:subject|attribution|owner)\b", re.IGNORECASE),
    ],
    "supersession": [
        re.compile(_I + r"(?:marked|flagged|set)\b[^.!?\n]{0,60}\bsuperseded\b", re.IGNORECASE),
        re.compile(
            _I + r"(?:superseded|replaced|overwr(?:ote|itten)|updated|amended|corrected|revised|edited)\b",
            re.IGNORECASE,
        ),
    ],
    "deletion": [
        re.compile(_I + r"(?:deleted|removed|erased|forgot(?:ten)?|wiped|purged|retired)\b", re.IGNORECASE),
    ],
    "anonymous_storage": [
        re.compile(r"\b(?:stored|saved|kept|remembered|recorded|filed)\b[^.!?\n]{0,60}\banonymous(?:ly)?\b", re.I),
        re.compile(r"\banonymous(?:ly)?\b[^.!?\n]{0,30}\b(?:stored|saved|kept|recorded)\b", re.IGNORECASE),
    ],
}


@dataclass(frozen=True)
class Licences:
    """Which claims the committed ledger supports."""

    supersession: bool
    reattribution: bool
    deletion: bool

    @classmethod
    def from_ledger(cls, operations: Sequence[MemoryOperation]) -> Licences:
        kinds = {op.kind for op in operations}
        return cls(
            supersession=bool(kinds & {Operation.AMEND, Operation.FORGET}),
            reattribution=any(op.kind == Operation.AMEND and op.subject_changed for op in operations),
            deletion=Operation.FORGET in kinds,
        )

    def allows(self, claim: str) -> bool:
        # Engram never stores anything anonymously, so that claim is never licensed.
        return {"supersession": self.supersession, "reattribution": self.reattribution, "deletion": self.deletion}.get(
            claim, False
        )


@dataclass(frozen=True)
class UnsupportedClaim:
    kind: str
    text: str


def unsupported_claims(reply: str, operations: Sequence[MemoryOperation]) -> list[UnsupportedClaim]:
    """The mutation claims in ``reply`` that the committed operations do not support."""
    licences = Licences.from_ledger(operations)
    found: list[UnsupportedClaim] = []
    for kind, patterns in CLAIM_PATTERNS.items():
        if licences.allows(kind):
            continue
        for pattern in patterns:
            match = pattern.search(reply)
            if match:
                found.append(UnsupportedClaim(kind=kind, text=match.group(0).strip()))
                break
    return found


def ledger_instruction(operations: Sequence[MemoryOperation]) -> str:
    """The developer-role instruction handed to the model before it writes its reply."""
    lines = ["Memory operations committed in this turn (authoritative; recorded from the store, not from requests):"]
    if not operations:
        lines.append("- none: no memory was created, amended, forgotten or shared in this turn.")
    for op in operations:
        revision = f"[{short_id(op.revision_id)}]" if op.revision_id else "(no revision)"
        if op.kind == Operation.REMEMBER:
            # Memories are named by their m: id alone, as people meet them (never by row numbers).
            lines.append(f"- remember: created memory {revision}.")
        elif op.kind == Operation.AMEND:
            subject = "its subject changed" if op.subject_changed else "same subject (not re-attributed)"
            lines.append(
                f"- amend: {revision} replaces [{short_id(op.previous_revision_id or 0)}] "
                f"(revision {op.revision_number} of the same memory); {subject}."
            )
        elif op.kind == Operation.FORGET:
            lines.append(f"- forget: {revision} retired from recall; its history is kept.")
        elif op.kind == Operation.REQUEST_SHARING:
            lines.append(
                f"- request_memory_sharing: asked to share {revision}; nothing is shared until the person confirms."
            )
    licences = Licences.from_ledger(operations)
    prohibitions = []
    if not licences.supersession:
        prohibitions.append("that any memory was superseded, replaced, updated or corrected")
    if not licences.reattribution:
        prohibitions.append("that any memory was re-attributed to someone else")
    if not licences.deletion:
        prohibitions.append("that any memory was deleted or forgotten")
    prohibitions.append("that anything was stored anonymously (Engram never does)")
    lines.append("Do not claim " + "; nor ".join(prohibitions) + ".")
    lines.append("Describe only the operations listed above, and only as they are listed.")
    return "\n".join(lines)
