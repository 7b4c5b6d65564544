"""The per-subject cap fits the question (spec 001 §6: one heavily discussed entity cannot consume the
budget). The capped pass keeps at most ``per_subject`` items of each subject; the budget it leaves
unused is refilled from the capped-out candidates, in rank order, only when exactly one subject the
question is about has candidates left over. A subject the question is not about never refills, two
asked-about subjects that both overflow compete (the cap holds for both), and a refilled
near-duplicate keeps its penalty."""

from __future__ import annotations

import pytest

from memory.retrieval.candidates import FEATURE_NAMES, Candidate
from memory.retrieval.collapse import collapse
from tests.retrieval.conftest import Workspace, revision_ids
from tests.retrieval.test_near_duplicates import candidate

ALICE, BOB = 1, 2


def ranked(*subjects: int | None) -> list[Candidate]:
    """Candidates in rank order (scores descending), one distinct statement each, all strong matches."""
    items = []
    for n, subject in enumerate(subjects, start=1):
        item = candidate(n, f"statement number {n} about {subject}", subject_id=subject)
        item.score = 1.0 - n / 100
        item.features = (1.0 - n / 1000, *(0.0,) * (len(FEATURE_NAMES) - 1))
        items.append(item)
    return items


def kept(items: list[Candidate], **options: object) -> list[int]:
    return [c.revision_id for c in collapse(items, per_subject=2, **options)]  # type: ignore[arg-type]


def test_a_subject_the_question_is_not_about_stays_capped() -> None:
    """Bob has the most matches, but the question is about Alice, who has no more: Bob keeps two."""
    items = ranked(BOB, BOB, BOB, BOB, ALICE)
    assert kept(items, asked_subjects=[ALICE], room=10) == [1, 2, 5]


def test_the_cap_holds_when_two_asked_about_subjects_compete() -> None:
    items = ranked(ALICE, ALICE, ALICE, BOB, BOB, BOB)
    assert kept(items, asked_subjects=[ALICE, BOB], room=10) == [1, 2, 4, 5]


def test_the_cap_holds_without_room_or_a_question() -> None:
    items = ranked(ALICE, ALICE, ALICE, ALICE)
    assert kept(items) == [1, 2]
    assert kept(ranked(ALICE, ALICE, ALICE, ALICE), asked_subjects=[ALICE], room=2) == [1, 2]


def test_the_subject_of_the_question_refills_the_unused_budget_in_rank_order() -> None:
    """Alice is the only asked-about subject with candidates left: she takes what the budget has left,
    best first, and the result stays in rank order; Bob, not asked about, stays capped."""
    items = ranked(ALICE, ALICE, BOB, ALICE, BOB, BOB, ALICE, None, ALICE)
    assert kept(items, asked_subjects=[ALICE], room=7) == [1, 2, 3, 4, 5, 7, 8]


def test_one_of_two_asked_about_subjects_refills_when_the_other_has_nothing_left() -> None:
    items = ranked(ALICE, ALICE, ALICE, BOB)
    assert kept(items, asked_subjects=[ALICE, BOB], room=10) == [1, 2, 3, 4]


def test_a_weak_match_is_not_refilled() -> None:
    """The refill adds only items that match nearly as well as the best one (``REFILL_MATCH_RATIO``):
    the rest were almost never relevant, and would only dilute the block."""
    items = ranked(ALICE, ALICE, ALICE, ALICE)
    items[3].features = (0.5, *(0.0,) * (len(FEATURE_NAMES) - 1))
    assert kept(items, asked_subjects=[ALICE], room=10) == [1, 2, 3]


def test_a_refilled_near_duplicate_keeps_its_penalty_and_restatements_stay_trimmed() -> None:
    items = ranked(ALICE, ALICE, ALICE, ALICE, ALICE)
    items[2].near_duplicate = True
    items[2].score = 0.5  # penalised below the others, as ranking leaves it
    items[4].body = items[3].body  # an exact restatement of a capped-out item
    items.sort(key=lambda c: c.order_key)
    result = collapse(items, per_subject=2, asked_subjects=[ALICE], room=10)
    assert [c.revision_id for c in result] == [1, 2, 4, 3]
    assert result[-1].near_duplicate


def test_a_conflict_partner_stays_exempt_and_is_not_counted_against_the_refill() -> None:
    items = ranked(ALICE, ALICE, ALICE, ALICE)
    items[0].conflicts, items[3].conflicts = [4], [1]
    assert kept(items, asked_subjects=[], room=10) == [1, 2, 3, 4]


# --- through the one retrieval service ----------------------------------------------------------


@pytest.fixture
def talkative(ws: Workspace) -> Workspace:
    """Alice has told the agent six things about her garden; Bob five things about his garden."""
    for n, thing in enumerate(("tomatoes", "basil", "roses", "mint", "beans", "peppers")):
        ws.remember(f"Alice grows {thing} in her garden, bed {n}.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    for n, thing in enumerate(("tulips", "lettuce", "onions", "garlic", "carrots")):
        ws.remember(f"Bob grows {thing} in his garden, bed {n}.", said_in=ws.general, by=ws.bob, about=ws.bob)
    return ws


def subjects_of(ws: Workspace, ids: list[int]) -> list[int | None]:
    from memory.models import MemoryRevision

    by_id = dict(MemoryRevision.objects.filter(pk__in=ids).values_list("pk", "subject_id"))
    return [by_id[i] for i in ids]


def test_recall_about_one_subject_uses_the_budget_the_cap_left(talkative: Workspace) -> None:
    ws = talkative
    result = ws.ask(ws.alice_dm, ws.alice, "What grows in my garden?", max_items=12)
    subjects = subjects_of(ws, revision_ids(result))
    assert subjects.count(ws.alice.pk) == 6  # beyond the cap of four: nobody else asked about competes


def test_recall_about_two_subjects_keeps_the_cap(talkative: Workspace) -> None:
    ws = talkative
    result = ws.ask(ws.alice_dm, ws.alice, "What do Alice and Bob grow in the garden?", max_items=12)
    subjects = subjects_of(ws, revision_ids(result))
    assert subjects.count(ws.alice.pk) == 4 and subjects.count(ws.bob.pk) == 4
