"""History search's ranking, recorded once and scored again with other weights (``replay_history``).

``eval_locomo --unit turns --record-ranking FILE`` writes a header line (the ranking policy and its
features), then one JSON line per question: the pool ``score_candidates`` ranked (each candidate with
its fused match), the signals read beside it, the LoCoMo turn of every pool member, the question's
evidence, and the turns the run ranked. A question not asked (no evidence after normalisation, or no
text) is recorded with an empty pool, so a replay counts it as the run did. The file is written beside
its final name and moved there only when the run ends, so a run that fails leaves no recording.

:func:`replay` ranks every recorded pool again with
:func:`memory.retrieval.history_search.ranking.score_candidates` and scores it with
:mod:`bench.evaluation` exactly as ``eval_locomo`` does: with the shipped weights every question's
ranking is the recorded one (:func:`unchanged_rankings` counts them), so the figures are the run's;
with other weights, it shows what those weights alone would change.

Only the final scoring reruns. The pool, each candidate's fused match and the neighbours looked up for
context are those the recorded run built, so a lever that changes which messages are proposed, the
fusion or the context sources cannot be measured this way: build it into ``search_history`` and run
``eval_locomo``.

:func:`refit` searches the weights (coordinate ascent over multiples of each shipped weight) for the
highest recall@10 over some conversations; with every conversation held out in turn it shows whether a
fit on the others carries over to the one it has not seen.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from unittest import mock

import numpy as np

from bench.evaluation import OVERALL_CATEGORIES, Evaluation, recall_at_k
from memory.retrieval.history_search import search as history_search_module
from memory.retrieval.history_search.query import NamedDate
from memory.retrieval.history_search.ranking import (
    FEATURES,
    POLICY_VERSION,
    WEIGHTS,
    Candidate,
    Signals,
    candidate_features,
    score_candidates,
)

#: Weights :func:`refit` leaves alone: the fused match is the scale the others are measured against,
#: and in a LoCoMo run every question comes from the conversation it searches, outside its recent window.
FIXED = ("match", "same_conversation", "current_window")
#: The multiples of each shipped weight :func:`refit` tries.
MULTIPLES = (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
#: The cut-off :func:`refit` optimises: recall@10, the figure the LoCoMo paper and this project report.
RECALL_DEPTH = 10


class RecordingMismatch(ValueError):
    """A recording made by another ranking policy, or not a recording at all."""


@dataclass(frozen=True)
class RecordedQuestion:
    conversation: str
    category: int
    evidence: tuple[str, ...]
    limit: int | None
    #: The LoCoMo turn of each pool member.
    units: dict[int, str]
    candidates: list[Candidate]
    signals: Signals | None
    #: The turns the recorded run ranked, in order.
    ranked: tuple[str, ...]


def _moment(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _parse_moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def header() -> dict[str, Any]:
    return {"policy": POLICY_VERSION, "features": list(FEATURES)}


def encode(question: RecordedQuestion) -> dict[str, Any]:
    signals = question.signals
    return {
        "conversation": question.conversation,
        "category": question.category,
        "evidence": list(question.evidence),
        "limit": question.limit,
        "ranked": list(question.ranked),
        "units": {str(message_id): unit for message_id, unit in question.units.items()},
        "candidates": [
            [c.message_id, c.conversation_id, c.actor_id, c.created_at.isoformat(), c.match]
            for c in question.candidates
        ],
        "signals": None
        if signals is None
        else {
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
            "asks_when": signals.asks_when,
            "timed": sorted(signals.timed),
        },
    }


def _decode_signals(signals: Mapping[str, Any] | None) -> Signals | None:
    if signals is None:
        return None
    return Signals(
        requester_ids=frozenset(signals["requester_ids"]),
        named_ids=frozenset(signals["named_ids"]),
        spoke_in=frozenset(signals["spoke_in"]),
        window=frozenset(signals["window"]),
        conversation_id=signals["conversation_id"],
        now=datetime.fromisoformat(signals["now"]),
        neighbours={
            int(source): tuple((int(neighbour), int(distance)) for neighbour, distance in pairs)
            for source, pairs in signals["neighbours"].items()
        },
        dates=tuple(
            NamedDate(year=year, month=month, day=day, start=_parse_moment(start), end=_parse_moment(end))
            for year, month, day, start, end in signals["dates"]
        ),
        lengths={int(message_id): length for message_id, length in signals["lengths"].items()},
        asks_when=bool(signals["asks_when"]),
        timed=frozenset(signals["timed"]),
    )


def decode(data: Mapping[str, Any]) -> RecordedQuestion:
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
        signals=_decode_signals(data["signals"]),
        ranked=tuple(data["ranked"]),
    )


class RankingRecorder:
    """Holds the pool each ``search_history`` call ranks until the question it answered is recorded."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._pending: tuple[list[Candidate], Signals, int | None] | None = None
        out.write(json.dumps(header()) + "\n")

    def score(
        self,
        candidates: Sequence[Candidate],
        signals: Signals,
        weights: dict[str, float] | None = None,
        *,
        limit: int | None = None,
    ) -> list[tuple[float, int, dict[str, float]]]:
        """``score_candidates``, remembering what it was given: one ranking per question."""
        if self._pending is not None:
            raise RuntimeError("a second ranking ran before the first one's question was recorded")
        self._pending = (list(candidates), signals, limit)
        return score_candidates(candidates, signals, weights, limit=limit)

    def question(
        self,
        *,
        conversation: str,
        category: int,
        evidence: Sequence[str],
        units: Mapping[int, str],
        ranked: Sequence[str],
    ) -> None:
        """Record the question just asked (or not asked: then nothing was ranked, and the pool is empty)."""
        candidates, signals, limit = self._pending if self._pending is not None else ([], None, None)
        self._pending = None
        pool_units = {c.message_id: units[c.message_id] for c in candidates if c.message_id in units}
        record = RecordedQuestion(
            conversation, category, tuple(evidence), limit, pool_units, candidates, signals, tuple(ranked)
        )
        self.out.write(json.dumps(encode(record)) + "\n")


@contextmanager
def recording_rankings(path: Path) -> Iterator[RankingRecorder]:
    """Within the block, what every history search ranks is held for the recorder.

    ``search_history`` builds its pool and signals inside one call and hands only the ranked hits back,
    so the recorder stands in for the ranking function it calls (as ``bench.embedding_cache`` stands in
    for the model): the search is otherwise the product's own. Any caller of the ranking is caught,
    which is why a run records turns only.
    """
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as out:
        recorder = RankingRecorder(out)
        with mock.patch.object(history_search_module, "score_candidates", recorder.score):
            yield recorder
    partial.replace(path)


def load_recording(path: Path) -> list[RecordedQuestion]:
    """The recorded questions; refuses a file of another ranking policy or feature set."""
    with path.open(encoding="utf-8") as lines:
        first = lines.readline()
        try:
            found = json.loads(first) if first.strip() else None
        except json.JSONDecodeError as error:
            raise RecordingMismatch(f"{path} is not a ranking recording: {error}") from error
        if not isinstance(found, dict) or set(found) != set(header()):
            raise RecordingMismatch(f"{path} is not a ranking recording (no header line)")
        if found != header():
            raise RecordingMismatch(
                f"{path} was recorded with ranking {found['policy']} over {found['features']}; "
                f"this code ranks with {POLICY_VERSION} over {list(FEATURES)}"
            )
        return [decode(json.loads(line)) for line in lines if line.strip()]


def ranked_units(question: RecordedQuestion, weights: Mapping[str, float] | None = None) -> list[str]:
    """The turns ``search_history`` would return for the recorded pool with ``weights``, in order."""
    if question.signals is None:
        return []
    chosen_weights = dict(WEIGHTS if weights is None else weights)
    chosen = score_candidates(question.candidates, question.signals, chosen_weights, limit=question.limit)
    return [question.units[message_id] for _, message_id, _ in chosen if message_id in question.units]


def replay(
    questions: Sequence[RecordedQuestion], weights: Mapping[str, float] | None = None
) -> tuple[Evaluation, dict[str, Evaluation]]:
    """Every recorded pool ranked with ``weights`` (the shipped ones by default) and scored as
    ``eval_locomo`` scores it: overall, and per conversation."""
    evaluation = Evaluation()
    by_conversation: dict[str, Evaluation] = {}
    for question in questions:
        by_conversation.setdefault(question.conversation, Evaluation()).add(
            category=question.category, ranked=ranked_units(question, weights), evidence=question.evidence
        )
    for part in by_conversation.values():
        evaluation.absorb(part)
    return evaluation, by_conversation


def unchanged_rankings(questions: Sequence[RecordedQuestion]) -> int:
    """How many questions the shipped weights rank exactly as the recorded run did."""
    return sum(ranked_units(question) == list(question.ranked) for question in questions)


@dataclass(frozen=True)
class QuestionFeatures:
    """One scored question's pool as a matrix of its unrounded features (rows in id order), for the many
    rankings :func:`refit` tries."""

    conversation: str
    ids: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    #: Each row's LoCoMo turn, or None.
    units: list[str | None]
    evidence: frozenset[str]
    limit: int | None


def question_features(questions: Sequence[RecordedQuestion]) -> list[QuestionFeatures]:
    """The questions the overall figure scores (categories 1-4, with evidence), as feature matrices."""
    features = []
    for question in questions:
        if question.category not in OVERALL_CATEGORIES or not question.evidence:
            continue
        values = candidate_features(question.candidates, question.signals) if question.signals else {}
        ids = sorted(values)
        features.append(
            QuestionFeatures(
                conversation=question.conversation,
                ids=np.array(ids, dtype=np.int64),
                values=np.array([values[i] for i in ids], dtype=np.float64).reshape(len(ids), len(FEATURES)),
                units=[question.units.get(i) for i in ids],
                evidence=frozenset(question.evidence),
                limit=question.limit,
            )
        )
    return features


def recall_at_depth(features: Sequence[QuestionFeatures], weights: Mapping[str, float]) -> float:
    """Mean recall@``RECALL_DEPTH`` of ``features`` ranked with ``weights``: exactly what :func:`replay`
    gives, computed as ``score_candidates`` computes a score (each weighted feature added in order, then
    rounded to six places) and cut as ``search_history`` cuts (its limit, then the turns)."""
    if not features:
        return 0.0
    total = 0.0
    for question in features:
        scores = np.zeros(len(question.ids))
        for column, name in enumerate(FEATURES):
            scores = scores + weights[name] * question.values[:, column]
        rounded = np.array([round(float(score), 6) for score in scores])
        order = np.lexsort((question.ids, -rounded))[: question.limit]
        units = [unit for unit in (question.units[i] for i in order) if unit is not None]
        total += recall_at_k(units, question.evidence, RECALL_DEPTH)
    return total / len(features)


def refit(
    features: Sequence[QuestionFeatures], conversations: Collection[str], *, rounds: int = 3
) -> tuple[dict[str, float], float]:
    """The weights with the highest recall@10 (categories 1-4) over ``conversations``, found by
    coordinate ascent from the shipped weights: each weight outside :data:`FIXED` in turn takes the
    best of its :data:`MULTIPLES`, for at most ``rounds`` passes; a change is taken only if it raises
    recall@10. Answers the weights and their recall@10 there."""
    chosen = [question for question in features if question.conversation in conversations]
    weights = dict(WEIGHTS)
    best = recall_at_depth(chosen, weights)
    for _ in range(rounds):
        improved = False
        for name in (n for n in FEATURES if n not in FIXED):
            for multiple in MULTIPLES:
                trial = dict(weights)
                trial[name] = round(WEIGHTS[name] * multiple, 6)
                value = recall_at_depth(chosen, trial)
                if value > best + 1e-12:
                    best, weights, improved = value, trial, True
        if not improved:
            break
    return weights, best
