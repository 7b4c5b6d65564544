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
from memory.retrieval.history_search.ranking import FEATURES, POLICY_VERSION
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
    """One line per question after the header, asked or not (a question whose evidence names no turn is
    recorded with an empty pool); ranked again with the shipped weights, every question's ranking is the
    recorded one and every figure, overall and per conversation, is the run's."""
    recording = tmp_path / "ranking.jsonl"
    recorded = _record(two_conversations, recording)

    assert json.loads(recording.read_text().splitlines()[0]) == {"policy": POLICY_VERSION, "features": list(FEATURES)}
    questions = load_recording(recording)
    assert [(q.conversation, q.category, len(q.candidates) > 0) for q in questions] == [
        (name, category, asked)
        for name in ("conv-eval", "conv-eval-2")
        for category, asked in ((4, True), (2, True), (5, True), (3, False))
    ]
    # Every pool member is named by its LoCoMo turn; the single-hop question's evidence is its first hit.
    assert all(set(q.units) == {c.message_id for c in q.candidates} for q in questions)
    assert (questions[0].evidence, questions[0].ranked[0]) == (("D1:1",), "D1:1")

    replayed = _replay(recording)

    assert replayed["weights"] == {}
    assert replayed["ranked_as_recorded"] == len(questions) == 8
    assert {name: replayed[name] for name in METRICS} == {name: recorded[name] for name in METRICS}
    assert replayed["questions"] == recorded["questions"] == 4
    for name, figures in recorded["by_conversation"].items():
        assert replayed["by_conversation"][name] == figures


def test_a_changed_weight_changes_the_replayed_ranking(two_conversations: Path, tmp_path: Path) -> None:
    """With the fused match counted against a line, the best match falls: the single-hop question's
    evidence is no longer first."""
    recording = tmp_path / "ranking.jsonl"
    recorded = _record(two_conversations, recording)

    replayed = _replay(recording, "--weight", "match=-1")

    assert replayed["weights"] == {"match": -1.0}
    assert "ranked_as_recorded" not in replayed
    assert recorded["mrr"] == 1.0
    assert replayed["mrr"] < recorded["mrr"]


def test_refit_and_hold_out_report_each_conversation(two_conversations: Path, tmp_path: Path) -> None:
    """The search itself is tested on pools built by hand (test_ranking_replay.py); here, the command
    reports each held-out conversation's recall@10 with the shipped weights, which is the recorded one."""
    recording = tmp_path / "ranking.jsonl"
    recorded = _record(two_conversations, recording)

    refitted = _replay(recording, "--refit", "--hold-out-each")

    assert refitted["recall@10"] >= recorded["recall@10"]
    assert set(refitted["held_out"]) == {"conv-eval", "conv-eval-2"}
    for name, figures in refitted["held_out"].items():
        assert figures["shipped"] == recorded["by_conversation"][name]["recall@10"]
        assert 0.0 <= figures["refitted"] <= 1.0


def test_recording_and_replay_refuse_what_they_cannot_do(two_conversations: Path, tmp_path: Path) -> None:
    """Each refusal is a command error that names the problem: a recording of memory recall, a folder
    that does not exist, a file that is not a recording or was made by another ranking, an unknown or
    unreadable weight, and weights given beside a refit."""
    recording = tmp_path / "ranking.jsonl"
    for arguments, message in (
        (["--unit", "observations", "--record-ranking", str(recording)], "--unit turns"),
        (["--record-ranking", str(tmp_path / "missing" / "ranking.jsonl")], "does not exist"),
    ):
        with pytest.raises(CommandError, match=message):
            call_command("eval_locomo", "--file", str(two_conversations), *arguments, verbosity=0, stdout=StringIO())
    assert not recording.exists()

    with pytest.raises(CommandError, match="cannot read the recording"):
        call_command("replay_history", str(tmp_path / "missing.jsonl"), stdout=StringIO())
    with pytest.raises(CommandError, match="not a ranking recording"):
        call_command("replay_history", str(two_conversations), stdout=StringIO())
    _record(two_conversations, recording)
    lines = recording.read_text().splitlines()
    stale = tmp_path / "stale.jsonl"
    stale.write_text("\n".join([json.dumps({"policy": "history@4", "features": list(FEATURES)}), *lines[1:]]))
    with pytest.raises(CommandError, match="recorded with ranking history@4"):
        call_command("replay_history", str(stale), stdout=StringIO())
    for bad in ("loudness=2", "match", "match=high"):
        with pytest.raises(CommandError, match="--weight"):
            call_command("replay_history", str(recording), "--weight", bad, stdout=StringIO())
    with pytest.raises(CommandError, match="cannot be combined"):
        call_command("replay_history", str(recording), "--weight", "date=0.5", "--refit", stdout=StringIO())
