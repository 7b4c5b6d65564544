"""History search's ranking, recorded once and scored again with other weights (``replay_history``).

``eval_locomo --unit turns --record-ranking FILE`` writes one JSON line per question it asked: the pool
``score_candidates`` ranked (each candidate with its fused match), the signals read beside it, the
question's evidence and the LoCoMo turn id of every pool member. :func:`replay` ranks every recorded
pool again with :func:`memory.retrieval.history_search.ranking.score_candidates` and scores the result
with :mod:`bench.evaluation` exactly as ``eval_locomo`` does, so with the shipped weights it gives the
recorded run's figures; with others, what those weights alone would change.

Only the final scoring reruns. The pool, each candidate's fused match and the neighbours looked up for
context are those the recorded run built, so a lever that changes which messages are proposed, the
fusion or the context sources cannot be measured this way: build it into ``search_history`` and run
``eval_locomo``.

:func:`refit` searches the weights (coordinate ascent over a grid of multiples of each shipped weight)
for the highest recall@10 over some conversations; with every conversation held out in turn it shows
whether a fit on the others carries over to the one it has not seen.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from unittest import mock

import numpy as np

from bench.evaluation import OVERALL_CATEGORIES, Evaluation
from memory.retrieval.history_search import search as history_search_module
from memory.retrieval.history_search.query import NamedDate
from memory.retrieval.history_search.ranking import FEATURES, WEIGHTS, Candidate, Signals, score_candidates

#: Weights :func:`refit` leaves alone: the fused match is the scale the others are measured against,
#: and in a LoCoMo run every question comes from the conversation it searches, outside its recent window.
FIXED = ("match", "same_conversation", "current_window")
#: The multiples of each shipped weight :func:`refit` tries.
MULTIPLES = (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
DEPTH = 10


@dataclass(frozen=True)
class RecordedQuestion:
    conversation: str
    category: int
    evidence: tuple[str, ...]
    limit: int | None
    units: dict[int, str]
    candidates: list[Candidate]
    signals: Signals


def _moment(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _parse_moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def encode(question: RecordedQuestion) -> dict[str, Any]:
    signals = question.signals
    return {
        "conversation": question.conversation,
        "category": question.category,
        "evidence": list(question.evidence),
        "limit": question.limit,
        "units": {str(message_id): unit for message_id, unit in question.units.items()},
        "candidates": [
            [c.message_id, c.conversation_id, c.actor_id, c.created_at.isoformat(), c.match]
            for c in question.candidates
        ],
        "signals": {
            "requester_ids": sorted(signals.requester_ids),
            "named_ids": sorted(signals.named_ids),
            "spoke_in": sorted(signals.spoke_in),
            "window": sorted(signals.window),
            "conversation_id": signals.conversation_id,
            "now": signals.now.isoformat(),
            "neighbours": {str(source): [list(pair) for pair in pairs] for source, pairs in signals.neighbours.items()},
            "dates": [
                [date.year, date.month, date.day, _moment(date.start), _moment(date.end)] for date in signals.dates
            ],
            "lengths": {str(message_id): length for message_id, length in signals.lengths.items()},
        },
    }


def decode(data: Mapping[str, Any]) -> RecordedQuestion:
    signals = data["signals"]
    return RecordedQuestion(
        conversation=data["conversation"],
        category=int(data["category"]),
        evidence=tuple(data["evidence"]),
        limit=data["limit"],
        units={int(message_id): unit for message_id, unit in data["units"].items()},
        candidates=[
            Candidate(message_id, conversation_id, actor_id, datetime.fromisoformat(created_at), match)
            for message_id, conversation_id, actor_id, created_at, match in data["candidates"]
        ],
        signals=Signals(
            requester_ids=frozenset(signals["requester_ids"]),
            named_ids=frozenset(signals["named_ids"]),
            spoke_in=frozenset(signals["spoke_in"]),
            window=frozenset(signals["window"]),
            conversation_id=signals["conversation_id"],
            now=datetime.fromisoformat(signals["now"]),
            neighbours={
                int(source): tuple((int(m), int(d)) for m, d in pairs)
                for source, pairs in signals["neighbours"].items()
            },
            dates=tuple(
                NamedDate(year=y, month=m, day=d, start=_parse_moment(s), end=_parse_moment(e))
                for y, m, d, s, e in signals["dates"]
            ),
            lengths={int(message_id): length for message_id, length in signals["lengths"].items()},
        ),
    )


class RankingRecorder:
    """Catches what ``score_candidates`` is given during ``search_history`` and writes it, with the
    question's evidence, as one JSON line per question."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.recorded = 0
        self._pending: tuple[list[Candidate], Signals, int | None] | None = None

    def _score(
        self,
        candidates: Sequence[Candidate],
        signals: Signals,
        weights: dict[str, float] | None = None,
        *,
        limit: int | None = None,
    ) -> list[tuple[float, int, dict[str, float]]]:
        self._pending = (list(candidates), signals, limit)
        return score_candidates(candidates, signals, weights, limit=limit)

    def question(self, *, conversation: str, category: int, evidence: Sequence[str], units: Mapping[int, str]) -> None:
        """The search just run was this question's: write what its ranking was given."""
        if self._pending is None:
            raise RuntimeError("no ranking was recorded for this question")
        candidates, signals, limit = self._pending
        self._pending = None
        pool_units = {c.message_id: units[c.message_id] for c in candidates if c.message_id in units}
        record = RecordedQuestion(conversation, category, tuple(evidence), limit, pool_units, candidates, signals)
        self.out.write(json.dumps(encode(record)) + "\n")
        self.recorded += 1


@contextmanager
def recording_rankings(path: Path) -> Iterator[RankingRecorder]:
    """Within the block, every ``search_history`` call's ranking inputs are caught for the recorder."""
    with path.open("w", encoding="utf-8") as out:
        recorder = RankingRecorder(out)
        with mock.patch.object(history_search_module, "score_candidates", recorder._score):
            yield recorder


def load_recording(path: Path) -> list[RecordedQuestion]:
    with path.open(encoding="utf-8") as lines:
        return [decode(json.loads(line)) for line in lines if line.strip()]


def replay(
    questions: Sequence[RecordedQuestion], weights: Mapping[str, float] | None = None
) -> tuple[Evaluation, dict[str, Evaluation]]:
    """Every recorded pool ranked with ``weights`` (the shipped ones by default) and scored as
    ``eval_locomo`` scores it: overall, and per conversation."""
    chosen_weights = dict(WEIGHTS if weights is None else weights)
    evaluation = Evaluation()
    by_conversation: dict[str, Evaluation] = {}
    for question in questions:
        ranked = [
            question.units[message_id]
            for _, message_id, _ in score_candidates(
                question.candidates, question.signals, chosen_weights, limit=question.limit
            )
            if message_id in question.units
        ]
        by_conversation.setdefault(question.conversation, Evaluation()).add(
            category=question.category, ranked=ranked, evidence=question.evidence
        )
    for part in by_conversation.values():
        evaluation.absorb(part)
    return evaluation, by_conversation


@dataclass(frozen=True)
class _Features:
    """One question's candidates as a feature matrix (rows in ``score_candidates``' component order),
    for the many rankings :func:`refit` tries; its figures are then confirmed with :func:`replay`."""

    conversation: str
    ids: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    relevant: list[str | None]
    evidence: frozenset[str]


def _features(question: RecordedQuestion) -> _Features:
    scored = score_candidates(question.candidates, question.signals, None, limit=None)
    return _Features(
        conversation=question.conversation,
        ids=np.array([message_id for _, message_id, _ in scored]),
        values=np.array([[components[name] for name in FEATURES] for _, _, components in scored]),
        relevant=[question.units.get(message_id) for _, message_id, _ in scored],
        evidence=frozenset(question.evidence),
    )


def _recall(features: Sequence[_Features], weights: Mapping[str, float]) -> float:
    vector = np.array([weights[name] for name in FEATURES])
    total = 0.0
    for question in features:
        scores = np.round(question.values @ vector, 6)
        first = np.lexsort((question.ids, -scores))[:DEPTH]
        found = {question.relevant[i] for i in first} & question.evidence
        total += len(found) / len(question.evidence)
    return total / len(features) if features else 0.0


def refit(
    questions: Sequence[RecordedQuestion], conversations: Sequence[str], *, rounds: int = 3
) -> tuple[dict[str, float], float]:
    """The weights with the highest recall@10 (categories 1-4) over ``conversations``, found by
    coordinate ascent from the shipped weights: each free weight in turn takes the best of its
    multiples, for at most ``rounds`` passes. Answers the weights and their recall@10 there."""
    features = [
        _features(q)
        for q in questions
        if q.conversation in conversations and q.category in OVERALL_CATEGORIES and q.evidence
    ]
    weights = dict(WEIGHTS)
    best = _recall(features, weights)
    for _ in range(rounds):
        improved = False
        for name in (n for n in FEATURES if n not in FIXED):
            for multiple in MULTIPLES:
                trial = dict(weights)
                trial[name] = round(WEIGHTS[name] * multiple, 6)
                value = _recall(features, trial)
                if value > best + 1e-9:
                    best, weights, improved = value, trial, True
        if not improved:
            break
    return weights, best
