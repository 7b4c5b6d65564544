"""Retrieval quality metrics for conversation benchmarks (LoCoMo's own definition), as pure functions.

A question is scored on the ranked units (turn ids) a retriever returned for it against its evidence
ids. Relevance is binary: a unit is relevant if it is one of the question's evidence ids.

- A ranking is a strict order. A unit repeated in it counts once, at its first position, and later
  copies are removed before the cut-off, so a retriever cannot earn recall twice for one unit or
  lose a slot to its own duplicate. Ties in whatever scores produced the ranking are the caller's
  to break; these functions never reorder.
- ``recall_at_k``: the fraction of the distinct evidence ids found in the first ``k`` units. ``k``
  larger than the ranking simply looks at all of it.
- ``reciprocal_rank``: ``1 / rank`` of the first relevant unit, 0 if none is returned (MRR is its mean).
- ``ndcg_at_k``: binary-gain nDCG, ``DCG = sum(1 / log2(rank + 1))`` over relevant units in the first
  ``k``, divided by the DCG of an ideal ranking that puts ``min(|evidence|, k)`` relevant units first.
- Evidence that is empty cannot be scored (every metric would be 0/0): :func:`score_question`
  answers None and :class:`Evaluation` counts the question as skipped, per category.

:class:`Evaluation` aggregates per category and overall; "overall" is the mean over the questions of
the categories it is given (LoCoMo reports categories 1-4; category 5 is adversarial and is reported
on its own). Evaluations of parts (one per conversation) are merged with :meth:`Evaluation.absorb`, so
that each part's figures can be reported beside the whole's. Each score also keeps recall@1..``CURVE_DEPTH``,
for recall curves.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

#: LoCoMo's categories: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
#: The categories the overall figures average over.
OVERALL_CATEGORIES = (1, 2, 3, 4)
METRIC_NAMES = ("recall@5", "recall@10", "mrr", "ndcg@10")
#: How deep the recall curve of each question goes (recall@1 .. recall@CURVE_DEPTH).
CURVE_DEPTH = 20


def deduplicated(ranked: Iterable[str]) -> list[str]:
    """The ranking with each unit kept at its first position only."""
    return list(dict.fromkeys(ranked))


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Fraction of the distinct ``relevant`` units among the first ``k`` distinct units of ``ranked``."""
    if k < 1:
        raise ValueError("k must be at least 1")
    wanted = set(relevant)
    if not wanted:
        raise ValueError("recall is undefined without relevant units")
    return len(wanted.intersection(deduplicated(ranked)[:k])) / len(wanted)


def reciprocal_rank(ranked: Sequence[str], relevant: Collection[str]) -> float:
    """``1 / rank`` (1-based, after de-duplication) of the first relevant unit; 0 when none appears."""
    wanted = set(relevant)
    if not wanted:
        raise ValueError("reciprocal rank is undefined without relevant units")
    for rank, unit in enumerate(deduplicated(ranked), start=1):
        if unit in wanted:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Binary-gain nDCG over the first ``k`` distinct units."""
    if k < 1:
        raise ValueError("k must be at least 1")
    wanted = set(relevant)
    if not wanted:
        raise ValueError("nDCG is undefined without relevant units")
    dcg = sum(
        1.0 / math.log2(rank + 1) for rank, unit in enumerate(deduplicated(ranked)[:k], start=1) if unit in wanted
    )
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(wanted), k) + 1))
    return dcg / ideal


@dataclass(frozen=True)
class QuestionScore:
    category: int
    recall_at_5: float
    recall_at_10: float
    mrr: float
    ndcg_at_10: float
    #: recall@1 .. recall@CURVE_DEPTH.
    recall_curve: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, float]:
        return dict(zip(METRIC_NAMES, (self.recall_at_5, self.recall_at_10, self.mrr, self.ndcg_at_10), strict=True))


def score_question(ranked: Sequence[str], evidence: Collection[str], category: int) -> QuestionScore | None:
    """Every metric for one question; None when its evidence is empty (it cannot be scored)."""
    if not evidence:
        return None
    return QuestionScore(
        category=category,
        recall_at_5=recall_at_k(ranked, evidence, 5),
        recall_at_10=recall_at_k(ranked, evidence, 10),
        mrr=reciprocal_rank(ranked, evidence),
        ndcg_at_10=ndcg_at_k(ranked, evidence, 10),
        recall_curve=tuple(recall_at_k(ranked, evidence, k) for k in range(1, CURVE_DEPTH + 1)),
    )


@dataclass(frozen=True)
class Summary:
    """Mean metrics over ``questions`` scored questions (all 0.0 when there are none)."""

    questions: int
    recall_at_5: float = 0.0
    recall_at_10: float = 0.0
    mrr: float = 0.0
    ndcg_at_10: float = 0.0

    @classmethod
    def of(cls, scores: Sequence[QuestionScore]) -> Summary:
        if not scores:
            return cls(questions=0)
        n = len(scores)
        return cls(
            questions=n,
            recall_at_5=sum(s.recall_at_5 for s in scores) / n,
            recall_at_10=sum(s.recall_at_10 for s in scores) / n,
            mrr=sum(s.mrr for s in scores) / n,
            ndcg_at_10=sum(s.ndcg_at_10 for s in scores) / n,
        )

    def metrics(self, digits: int = 4) -> dict[str, float]:
        values = (self.recall_at_5, self.recall_at_10, self.mrr, self.ndcg_at_10)
        return {name: round(value, digits) for name, value in zip(METRIC_NAMES, values, strict=True)}


@dataclass
class Evaluation:
    """Question scores collected one at a time, summarised overall and per category."""

    overall_categories: tuple[int, ...] = OVERALL_CATEGORIES
    scores: list[QuestionScore] = field(default_factory=list)
    skipped: dict[int, int] = field(default_factory=dict)

    def add(self, *, category: int, ranked: Sequence[str], evidence: Collection[str]) -> QuestionScore | None:
        """Score one question, or count it as skipped when its evidence is empty."""
        score = score_question(ranked, evidence, category)
        if score is None:
            self.skipped[category] = self.skipped.get(category, 0) + 1
        else:
            self.scores.append(score)
        return score

    def overall(self) -> Summary:
        return Summary.of([s for s in self.scores if s.category in self.overall_categories])

    def by_category(self) -> dict[int, Summary]:
        categories = sorted({s.category for s in self.scores} | set(self.skipped))
        return {c: Summary.of([s for s in self.scores if s.category == c]) for c in categories}

    def recall_curve(self, categories: Collection[int] | None = None) -> list[float]:
        """Mean recall@1 .. recall@CURVE_DEPTH over the scored questions of ``categories`` (default: the
        overall ones); empty when there are none."""
        wanted = self.overall_categories if categories is None else categories
        curves = [s.recall_curve for s in self.scores if s.category in wanted and s.recall_curve]
        if not curves:
            return []
        return [sum(values) / len(curves) for values in zip(*curves, strict=True)]

    def absorb(self, part: Evaluation) -> None:
        """Add a part's scores and skipped counts to this evaluation (the part is left unchanged)."""
        self.scores.extend(part.scores)
        for category, count in part.skipped.items():
            self.skipped[category] = self.skipped.get(category, 0) + count

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())
