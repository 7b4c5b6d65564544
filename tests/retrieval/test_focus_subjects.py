"""A question that names whom it is about is answered by statements about them. A statement about anyone
else is shown only when it matches nearly as well as the best item (``OTHER_SUBJECT_MATCH_RATIO`` of
the best match), so a strong match about another person still stands beside the answer; statements
about no one, conflict partners and standing items are never left out for their subject, and a
question that names nobody leaves nobody out. A first-person question is about the requester too."""

from __future__ import annotations

from collections.abc import Sequence

from accounts.models import Actor
from memory.models import MemoryRevision
from memory.retrieval.candidates import FEATURE_NAMES, Candidate
from memory.retrieval.collapse import collapse
from memory.retrieval.eligibility import EligibleRevisions, perspective_for_conversation
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import RecallQuery, form_query
from memory.retrieval.service import focus_subjects, recall, task_budget
from tests.retrieval.conftest import Workspace, revision_ids
from tests.retrieval.test_subject_cap import ALICE, BOB, ranked


def kept(items: list[Candidate], **options: object) -> list[int]:
    return [c.revision_id for c in collapse(items, per_subject=4, **options)]  # type: ignore[arg-type]


def with_matches(items: list[Candidate], *matches: float) -> list[Candidate]:
    for item, match in zip(items, matches, strict=True):
        item.features = (match, *(0.0,) * (len(FEATURE_NAMES) - 1))
    return items


def test_a_weak_match_about_someone_the_question_does_not_name_is_left_out() -> None:
    items = with_matches(ranked(BOB, ALICE, BOB, ALICE), 1.0, 0.75, 0.9, 0.5)
    assert kept(items, asked_subjects=[BOB], focus_subjects=[BOB], room=10) == [1, 2, 3]


def test_without_a_named_subject_nobody_is_left_out() -> None:
    items = with_matches(ranked(BOB, ALICE, BOB, ALICE), 1.0, 0.75, 0.9, 0.5)
    assert kept(items, asked_subjects=[ALICE], room=10) == [1, 2, 3, 4]


def test_statements_about_no_one_conflict_partners_and_standing_items_are_not_left_out() -> None:
    items = with_matches(ranked(BOB, None, ALICE, ALICE, ALICE, ALICE), 1.0, 0.1, 0.2, 0.2, 0.2, 0.2)
    items[2].conflicts, items[0].conflicts = [1], [3]
    items[3].arms = {"always_on": 1}
    items[4].arms = {"delta": 1}
    assert kept(items, asked_subjects=[BOB], focus_subjects=[BOB], room=10) == [1, 2, 3, 4, 5]


def test_the_focus_is_the_people_named_and_the_requester_of_a_first_person_question() -> None:
    third = RecallQuery(text="What does Bob grow?", subject_ids=(ALICE, BOB), named_subject_ids=(BOB,))
    first = RecallQuery(
        text="Do I grow what Bob grows?", subject_ids=(ALICE, BOB), named_subject_ids=(BOB,), first_person=True
    )
    nobody = RecallQuery(text="What do I grow?", subject_ids=(ALICE,), first_person=True)
    assert focus_subjects(third) == (BOB,)
    assert focus_subjects(first) == (ALICE, BOB)
    assert focus_subjects(nobody) == ()


# --- through the one retrieval service ----------------------------------------------------------


class SaysGardens:
    """A semantic provider that finds the statements about gardens (and nothing else) similar."""

    name = "semantic"
    in_database = True

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        gardens = MemoryRevision.objects.filter(agent_id=eligible.perspective.agent_id, body__icontains="garden")
        ids = gardens.order_by("pk").values_list("pk", flat=True)
        return [ArmHit("semantic", pk, rank, 0.9) for rank, pk in enumerate(ids, 1)]


def ask(ws: Workspace, text: str) -> list[int]:
    result = recall(
        perspective=perspective_for_conversation(ws.general, requester_id=ws.alice.pk),
        query=form_query(
            message=text,
            requester_id=ws.alice.pk,
            known_actors=list(Actor.objects.filter(connector__agent=ws.agent)),
        ),
        budget=task_budget(max_items=12),
        providers=[SaysGardens()],
    )
    return revision_ids(result)


def test_a_question_about_bob_leaves_out_a_weak_match_about_alice(ws: Workspace) -> None:
    """Both statements match "grows" (the names are not matched), but only Bob's is also about gardens."""
    bobs = ws.remember("Bob grows tulips in his garden.", said_in=ws.general, by=ws.bob, about=ws.bob)
    alices = ws.remember("Alice grows impatient in meetings.", said_in=ws.general, by=ws.alice, about=ws.alice)
    assert ask(ws, "What does Bob grow in his garden?") == [bobs.pk]
    # The same weak match stays when the question names nobody, or is Alice's own.
    assert set(ask(ws, "Who grows things in a garden?")) == {bobs.pk, alices.pk}
    assert set(ask(ws, "Do I grow a garden like Bob?")) == {bobs.pk, alices.pk}


def test_a_strong_match_about_someone_else_stands_beside_the_answer(ws: Workspace) -> None:
    bobs = ws.remember("Bob grows tulips in his garden.", said_in=ws.general, by=ws.bob, about=ws.bob)
    alices = ws.remember("Alice grows tulips in her garden.", said_in=ws.general, by=ws.alice, about=ws.alice)
    assert set(ask(ws, "What does Bob grow in his garden?")) == {bobs.pk, alices.pk}
