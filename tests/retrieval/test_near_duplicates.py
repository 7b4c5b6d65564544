"""The near-duplicate rule: an item whose word set nearly equals a higher-ranked item's (Jaccard of at
least 0.8) carries the penalty; the higher-ranked one never does, and an exact restatement (equal word
sets) is left to the collapse step, which trims it."""

from __future__ import annotations

from datetime import UTC, datetime

from memory.retrieval.candidates import Candidate
from memory.retrieval.collapse import collapse, mark_near_duplicates

RECORDED = datetime(2026, 1, 1, tzinfo=UTC)


def candidate(revision_id: int, body: str, subject_id: int | None = 1) -> Candidate:
    return Candidate(
        revision_id=revision_id,
        entry_id=revision_id,
        number=1,
        body=body,
        subject_id=subject_id,
        source_actor_id=None,
        source_actor_ids=[],
        belief_type="preference",
        portability="portable",
        origin_scope="",
        confidence=0.9,
        authority="user_stated",
        salience=0.5,
        always_on=False,
        lifecycle="active",
        valid_from=RECORDED,
        valid_to=None,
        recorded_at=RECORDED,
        restricted_to_conversation_id=None,
        supersedes_id=None,
        utility=0.0,
        last_used_at=None,
        flagged_for_review=False,
        evidence_count=1,
        source_message_id=None,
        in_conversation=False,
    )


def flags(*bodies: str) -> list[bool]:
    ranked = [candidate(n, body) for n, body in enumerate(bodies, start=1)]
    mark_near_duplicates(ranked)
    return [c.near_duplicate for c in ranked]


def test_an_item_sharing_four_of_five_words_with_a_better_one_is_a_near_duplicate() -> None:
    # {a b c d} against {a b c d e}: 4 common words of 5 in all, Jaccard 0.8 exactly.
    assert flags("alice likes green tea", "Alice likes green tea daily.") == [False, True]


def test_an_item_below_the_threshold_is_not_a_near_duplicate() -> None:
    # {a b c} against {a b c d}: 3 of 4, Jaccard 0.75.
    assert flags("alice likes tea", "alice likes tea daily") == [False, False]
    # Sizes too far apart to reach 0.8: 4 of 6.
    assert flags("alice likes green tea", "alice likes green tea every morning") == [False, False]


def test_the_better_ranked_item_keeps_no_penalty_whichever_is_longer() -> None:
    assert flags("Alice likes green tea daily.", "alice likes green tea") == [False, True]


def test_an_exact_restatement_is_not_penalised_but_collapsed() -> None:
    ranked = [candidate(1, "Alice likes green tea."), candidate(2, "alice LIKES green tea")]
    mark_near_duplicates(ranked)
    assert [c.near_duplicate for c in ranked] == [False, False]
    assert [c.revision_id for c in collapse(ranked, per_subject=5)] == [1]


def test_a_near_duplicate_of_any_earlier_item_is_flagged() -> None:
    assert flags(
        "bob plays chess on sundays",
        "carol writes poems",
        "bob plays chess on sundays again",
        "carol writes long poems",
    ) == [False, False, True, False]
