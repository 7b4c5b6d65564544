"""Collapse and diversify the ranked set before it is packed.

- Never show a revision beside the one that superseded it.
- Unresolved conflicts are returned together, each marked with its partners' ids; a partner is kept
  whichever of the two the ranking preferred, and is exempt from the per-subject cap.
- At most ``per_subject`` items per subject, so one much-discussed person cannot take the budget
  (except the people a snapshot is about).
- The cap fits the question: when a question is about one subject and no other subject it is about
  still has candidates left over, the budget the capped pass left unused is refilled from that
  subject's capped-out candidates, in rank order. Subjects the question is not about never refill
  (their best ``per_subject`` items stand), and two subjects the question is about that both overflow
  compete, so the cap holds for both.
- A question that names whom it is about is not answered by statements about anyone else: those
  must match nearly as well as the best item does to be shown at all (a strong match about another
  person still stands beside the answer, so "what did Bob say?" can show that Alice said it).
- Exact restatements are trimmed (the higher-scored one stays); merely similar items are kept but
  carry the near-duplicate penalty, so a genuine second fact about one subject is not deleted.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection

from memory.retrieval.candidates import Candidate
from memory.retrieval.ranking import STANDING_ARMS

WORDS = re.compile(r"[a-z0-9]+")
NEAR_DUPLICATE_JACCARD = 0.8
#: A refilled item must match the query nearly as well as the best item does (its fused match at least
#: this fraction of the best). Items the cap left out below that bar were almost never relevant (LoCoMo
#: dev), so adding them would raise the noise ratio, which spec 001's gates forbid (docs/quality.md).
REFILL_MATCH_RATIO = 0.8
#: The bar when the source arm ranked candidates: the fusion (``ranking.SOURCE_RRF_K``) then separates
#: relevant items from the rest more sharply, and a lower bar still keeps the noise ratio below the
#: arm's at k 60 and a bar of 0.5 (LoCoMo dev, hybrid: recall@10 0.661, 0.665 and 0.670 at 0.4, 0.35 and
#: 0.3, noise ratios 0.8897, 0.8974 and 0.9052 against 0.9058; at 0.3 it rose in two conversations;
#: docs/quality.md, "The source fusion at k 10, and the line a reply answers").
SOURCE_REFILL_MATCH_RATIO = 0.35
#: In a question that names whom it is about, an item about someone else is shown only if its fused
#: match is at least this fraction of the best match. On LoCoMo dev, 96 % of the evidence of a question
#: naming one speaker was that speaker's; the other speaker's weaker matches were nearly all noise, and
#: leaving them out is what lets the refill bar above sit at 0.8 rather than 0.9 without raising the
#: noise ratio (docs/quality.md).
OTHER_SUBJECT_MATCH_RATIO = 0.7


def restatement_key(candidate: Candidate) -> tuple[int | None, str]:
    return (candidate.subject_id, " ".join(WORDS.findall(candidate.body.lower())))


def mark_near_duplicates(ranked: list[Candidate]) -> None:
    """Flag items whose word set nearly equals a higher-ranked item's (penalised, not removed).

    Jaccard >= 0.8 needs the two sizes within a factor of 0.8, so each item is compared only with
    the earlier items of such sizes (kept by size)."""
    seen_by_size: dict[int, list[set[str]]] = {}
    for candidate in ranked:
        words = set(WORDS.findall(candidate.body.lower()))
        size = len(words)
        sizes = range(math.ceil(NEAR_DUPLICATE_JACCARD * size), math.floor(size / NEAR_DUPLICATE_JACCARD) + 1)
        candidate.near_duplicate = any(
            _near(words, other) for other_size in sizes for other in seen_by_size.get(other_size, ())
        )
        seen_by_size.setdefault(size, []).append(words)


def _near(words: set[str], other: set[str]) -> bool:
    """Jaccard of at least the threshold, equal sets excepted (a restatement, which collapse trims).
    The union's size is the sizes' sum less the common words': the union itself is never built."""
    common = len(words & other)
    if common == len(words) == len(other):
        return False
    return common >= NEAR_DUPLICATE_JACCARD * (len(words) + len(other) - common)


def collapse(
    ranked: list[Candidate],
    *,
    per_subject: int,
    uncapped_subjects: Collection[int] = (),
    asked_subjects: Collection[int] = (),
    focus_subjects: Collection[int] = (),
    room: int = 0,
    refill_ratio: float = REFILL_MATCH_RATIO,
) -> list[Candidate]:
    """``ranked`` is in final order; returns the kept items in the same order.

    ``uncapped_subjects`` are exempt from the per-subject cap (the snapshot exists to describe the
    person in the conversation, so the cap guards against everyone else).

    ``asked_subjects`` are the subjects the question is about and ``room`` the number of items the
    budget holds: see :func:`refill`, which takes items matching at least ``refill_ratio`` of the best.

    ``focus_subjects`` are the people a question names (and the requester, if it is in the first
    person); when given, an item about anyone else is left out unless its match reaches
    ``OTHER_SUBJECT_MATCH_RATIO`` of the best. Items about no one, conflict partners and standing
    items are exempt.
    """
    present = {c.revision_id for c in ranked}
    superseded = {c.supersedes_id for c in ranked if c.supersedes_id in present}
    partners = {c.revision_id for c in ranked if any(p in present for p in c.conflicts)}
    best = max((c.match for c in ranked), default=0.0)
    other_bar = OTHER_SUBJECT_MATCH_RATIO * best
    kept: list[Candidate] = []
    restatements: set[tuple[int | None, str]] = set()
    per_subject_count: Counter[int] = Counter()
    capped_out: list[Candidate] = []
    for candidate in ranked:
        if candidate.revision_id in superseded:
            continue
        key = restatement_key(candidate)
        if key in restatements:
            continue
        is_partner = candidate.revision_id in partners
        if (
            focus_subjects
            and candidate.subject_id is not None
            and candidate.subject_id not in focus_subjects
            and not is_partner
            and candidate.match < other_bar
            and not any(arm in candidate.arms for arm in STANDING_ARMS)
        ):
            continue
        if candidate.subject_id is not None and not is_partner and candidate.subject_id not in uncapped_subjects:
            if per_subject_count[candidate.subject_id] >= per_subject:
                capped_out.append(candidate)
                continue
            per_subject_count[candidate.subject_id] += 1
        restatements.add(key)
        candidate.conflicts = [p for p in candidate.conflicts if p in present]
        kept.append(candidate)
    bar = refill_ratio * best
    refilled = refill(capped_out, restatements, asked_subjects=asked_subjects, room=room - len(kept), bar=bar)
    if not refilled:
        return kept
    for candidate in refilled:
        candidate.conflicts = [p for p in candidate.conflicts if p in present]
    return sorted(kept + refilled, key=lambda c: c.order_key)


def refill(
    capped_out: list[Candidate],
    restatements: set[tuple[int | None, str]],
    *,
    asked_subjects: Collection[int],
    room: int,
    bar: float = 0.0,
) -> list[Candidate]:
    """The capped-out candidates that take the budget the capped pass left unused, in rank order.

    Only when exactly one subject the question is about has candidates left over: that subject is
    the question, and nobody else the question asks about is waiting for the same slots. Only items
    whose match reaches ``bar`` are taken. The items keep their scores (a near-duplicate keeps its
    penalty), and an exact restatement is still trimmed.
    """
    overflowing = {c.subject_id for c in capped_out if c.subject_id in asked_subjects}
    if room <= 0 or len(overflowing) != 1:
        return []
    refilled: list[Candidate] = []
    for candidate in capped_out:
        if len(refilled) >= room:
            break
        key = restatement_key(candidate)
        if candidate.subject_id not in overflowing or key in restatements or candidate.match < bar:
            continue
        restatements.add(key)
        refilled.append(candidate)
    return refilled
