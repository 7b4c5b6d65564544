"""Retrieval metrics (``bench.evaluation``) on hand-computed examples."""

from __future__ import annotations

import math

import pytest

from bench.evaluation import (
    Evaluation,
    Summary,
    deduplicated,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank,
    score_question,
)

RANKED = ["a", "b", "c", "d", "e", "f"]


def test_recall_counts_distinct_evidence_found_in_the_first_k() -> None:
    """Two evidence turns, one in the top 5 and one at rank 6: recall@5 is 1/2, recall@6 is 1."""
    assert recall_at_k(RANKED, {"b", "f"}, 5) == 0.5
    assert recall_at_k(RANKED, {"b", "f"}, 6) == 1.0
    assert recall_at_k(RANKED, {"b", "f"}, 1) == 0.0
    assert recall_at_k(RANKED, ["z"], 5) == 0.0


def test_k_larger_than_the_ranking_looks_at_all_of_it() -> None:
    """Asking for the top 10 of 3 results is the same as asking for all 3."""
    assert recall_at_k(["a", "b", "c"], {"c", "z"}, 10) == 0.5
    assert recall_at_k([], {"c"}, 10) == 0.0
    assert ndcg_at_k([], {"c"}, 10) == 0.0
    assert reciprocal_rank([], {"c"}) == 0.0


def test_duplicate_units_count_once_at_their_first_position() -> None:
    """A repeated unit neither earns recall twice nor takes a slot from the next unit."""
    assert deduplicated(["a", "a", "b", "a", "c"]) == ["a", "b", "c"]
    # Without de-duplication "b" would sit at rank 3, outside the top 2.
    assert recall_at_k(["a", "a", "b"], {"b"}, 2) == 1.0
    assert reciprocal_rank(["a", "a", "b"], {"b"}) == 0.5
    # Evidence listed twice is one evidence turn.
    assert recall_at_k(["b", "b", "x"], ["b", "b", "c"], 2) == 0.5
    assert ndcg_at_k(["b", "b"], {"b"}, 10) == 1.0


def test_reciprocal_rank_uses_the_first_relevant_unit() -> None:
    """With several relevant units the best-ranked one decides: relevant at ranks 2 and 3 gives 1/2."""
    assert reciprocal_rank(["x", "r1", "r2"], {"r1", "r2"}) == 0.5
    assert reciprocal_rank(["r2", "x", "r1"], {"r1", "r2"}) == 1.0
    assert reciprocal_rank(["x", "y", "z", "r"], {"r"}) == 0.25


def test_ndcg_uses_binary_gains_and_an_ideal_of_min_evidence_k() -> None:
    """Relevant at ranks 2 and 4: DCG = 1/log2(3) + 1/log2(5), ideal = 1 + 1/log2(3)."""
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["a", "r1", "b", "r2"], {"r1", "r2"}, 10) == pytest.approx(expected)
    assert ndcg_at_k(["a", "r1", "b", "r2"], {"r1", "r2"}, 10) == pytest.approx(0.650921, abs=1e-6)
    # Past the cut-off nothing counts.
    assert ndcg_at_k(["a", "r1", "b", "r2"], {"r1", "r2"}, 3) == pytest.approx(
        (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    )
    # More evidence than k: a ranking whose k units are all relevant is ideal.
    assert ndcg_at_k(["r1", "r2"], {"r1", "r2", "r3"}, 2) == 1.0
    assert ndcg_at_k(["r1", "r2", "r3"], {"r1", "r2", "r3"}, 10) == 1.0


def test_metrics_are_undefined_without_evidence_and_for_k_below_one() -> None:
    """Empty evidence is 0/0, not zero: the functions refuse it and score_question answers None."""
    for metric in (
        lambda: recall_at_k(RANKED, set(), 5),
        lambda: reciprocal_rank(RANKED, []),
        lambda: ndcg_at_k(RANKED, (), 10),
    ):
        with pytest.raises(ValueError):
            metric()
    with pytest.raises(ValueError):
        recall_at_k(RANKED, {"a"}, 0)
    with pytest.raises(ValueError):
        ndcg_at_k(RANKED, {"a"}, 0)
    assert score_question(RANKED, (), 1) is None


def test_score_question_computes_every_metric() -> None:
    """Evidence at ranks 3 and 12 of a 12-unit ranking."""
    ranked = [f"u{n}" for n in range(1, 13)]
    score = score_question(ranked, ("u3", "u12"), 2)
    assert score is not None
    assert (score.category, score.recall_at_5, score.recall_at_10, score.mrr) == (2, 0.5, 0.5, pytest.approx(1 / 3))
    assert score.ndcg_at_10 == pytest.approx((1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    assert list(score.as_dict()) == ["recall@5", "recall@10", "mrr", "ndcg@10"]


def test_evaluation_averages_overall_over_categories_1_to_4_and_counts_skipped() -> None:
    """Category 5 is reported on its own and left out of the overall mean; empty evidence is skipped."""
    evaluation = Evaluation()
    evaluation.add(category=1, ranked=["a", "b"], evidence={"a"})  # everything 1.0
    evaluation.add(category=4, ranked=["x", "y"], evidence={"z"})  # everything 0.0
    evaluation.add(category=5, ranked=["a"], evidence={"a"})
    assert evaluation.add(category=3, ranked=["a"], evidence=()) is None
    assert evaluation.add(category=5, ranked=[], evidence=[]) is None

    overall = evaluation.overall()
    assert overall == Summary(questions=2, recall_at_5=0.5, recall_at_10=0.5, mrr=0.5, ndcg_at_10=0.5)
    by_category = evaluation.by_category()
    assert sorted(by_category) == [1, 3, 4, 5]
    assert by_category[3] == Summary(questions=0)
    assert by_category[5].questions == 1 and by_category[5].mrr == 1.0
    assert evaluation.skipped == {3: 1, 5: 1}
    assert evaluation.skipped_total == 2
    assert overall.metrics() == {"recall@5": 0.5, "recall@10": 0.5, "mrr": 0.5, "ndcg@10": 0.5}


def test_an_empty_evaluation_reports_zero_questions() -> None:
    assert Evaluation().overall() == Summary(questions=0)
    assert Evaluation().by_category() == {}
