"""``eval_locomo --record-ranking`` and ``replay_history``: history search's ranking, recorded once and
scored again, reproduces the recorded figures and shows what other weights would change."""

from __future__ import annotations

import copy
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from bench.ranking_replay import load_recording
from memory.retrieval.history_search.ranking import WEIGHTS
from tests.history.test_eval_locomo_command import SAMPLE

pytestmark = pytest.mark.django_db

METRICS = ("recall@5", "recall@10", "mrr", "ndcg@10")


@pytest.fixture
def two_conversations(tmp_path: Path) -> Path:
    second = copy.deepcopy(SAMPLE[0])
    second["sample_id"] = "conv-eval-2"
    path = tmp_path / "locomo_two.json"
    path.write_text(json.dumps([*SAMPLE, second]), encoding="utf-8")
    return path


def _last_json(out: StringIO) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    return report


def _record(source: Path, recording: Path) -> dict[str, Any]:
    out = StringIO()
    call_command("eval_locomo", "--file", str(source), "--record-ranking", str(recording), verbosity=0, stdout=out)
    return _last_json(out)


def _replay(recording: Path, *arguments: str) -> dict[str, Any]:
    out = StringIO()
    call_command("replay_history", str(recording), *arguments, stdout=out)
    return _last_json(out)


def test_a_recorded_run_replays_to_the_figures_it_recorded(two_conversations: Path, tmp_path: Path) -> None:
    """One line per question asked (a question whose evidence names no turn is not asked), and ranked
    again with the shipped weights every figure, overall and per conversation, is the recorded run's."""
    recording = tmp_path / "ranking.jsonl"
    recorded = _record(two_conversations, recording)

    questions = load_recording(recording)
    assert [(q.conversation, q.category) for q in questions] == [
        ("conv-eval", 4),
        ("conv-eval", 2),
        ("conv-eval", 5),
        ("conv-eval-2", 4),
        ("conv-eval-2", 2),
        ("conv-eval-2", 5),
    ]
    # Every pool member is named by its LoCoMo turn, and the evidence is the question's.
    assert all(set(q.units) == {c.message_id for c in q.candidates} for q in questions)
    assert questions[0].evidence == ("D1:1",)

    replayed = _replay(recording)
    assert replayed["weights"] == {}
    assert {name: replayed[name] for name in METRICS} == {name: recorded[name] for name in METRICS}
    assert replayed["questions"] == recorded["questions"] == 4
    for name, figures in recorded["by_conversation"].items():
        assert replayed["by_conversation"][name] == {metric: figures[metric] for metric in METRICS}


def test_a_changed_weight_changes_the_replayed_ranking(two_conversations: Path, tmp_path: Path) -> None:
    """With the fused match counted against a line, the best match falls: the single-hop question's
    evidence is no longer first."""
    recording = tmp_path / "ranking.jsonl"
    recorded = _record(two_conversations, recording)

    replayed = _replay(recording, "--weight", "match=-1")

    assert replayed["weights"] == {"match": -1.0}
    assert recorded["mrr"] == 1.0
    assert replayed["mrr"] < recorded["mrr"]


def test_a_refit_never_ends_below_where_it_started(two_conversations: Path, tmp_path: Path) -> None:
    """Coordinate ascent starts from the shipped weights and takes only a change that raises recall@10;
    holding each conversation out reports its recall@10 with the shipped and the refitted weights."""
    recording = tmp_path / "ranking.jsonl"
    recorded = _record(two_conversations, recording)

    refitted = _replay(recording, "--refit", "--hold-out-each")

    assert refitted["recall@10"] >= recorded["recall@10"]
    assert set(refitted["weights"]) <= set(WEIGHTS) - {"match", "same_conversation", "current_window"}
    assert set(refitted["held_out"]) == {"conv-eval", "conv-eval-2"}
    for figures in refitted["held_out"].values():
        assert figures["shipped"] == recorded["by_conversation"]["conv-eval"]["recall@10"]
        assert 0.0 <= figures["refitted"] <= 1.0


def test_recording_and_replay_refuse_what_they_cannot_do(two_conversations: Path, tmp_path: Path) -> None:
    recording = tmp_path / "ranking.jsonl"
    with pytest.raises(CommandError, match="--unit turns"):
        call_command(
            "eval_locomo",
            "--file",
            str(two_conversations),
            "--unit",
            "observations",
            "--record-ranking",
            str(recording),
            verbosity=0,
            stdout=StringIO(),
        )
    with pytest.raises(CommandError, match="cannot read the recording"):
        call_command("replay_history", str(tmp_path / "missing.jsonl"), stdout=StringIO())
    _record(two_conversations, recording)
    for bad in ("loudness=2", "match", "match=high"):
        with pytest.raises(CommandError, match="--weight"):
            call_command("replay_history", str(recording), "--weight", bad, stdout=StringIO())
