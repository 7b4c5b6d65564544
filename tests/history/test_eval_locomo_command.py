"""``manage.py eval_locomo``: scores history search on a LoCoMo-schema file and leaves the database as it was."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from accounts.models import Actor, Connector, RuntimeAgent, Tenant
from bench.embedding_cache import text_key
from history.models import Conversation, ConversationSearchEvent, Message
from memory.embeddings.index import vectors_stored
from memory.embeddings.model import embedding_model
from memory.models import MemoryEntry, MessageEmbedding, RecallTrace, RevisionEmbedding

pytestmark = pytest.mark.django_db

SAMPLE = [
    {
        "sample_id": "conv-eval",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben! I adopted a beagle puppy called Biscuit."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Congrats! How old is the puppy?"},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "Ten weeks. I am also repainting my kitchen yellow."},
                {"speaker": "Ben", "dia_id": "D1:4", "text": "I started rowing on the river last month."},
            ],
            "session_2_date_time": "10:15 am on 20 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "How is the kitchen coming along?"},
                {"speaker": "Ana", "dia_id": "D2:2", "text": "Finished! And Biscuit loves the garden."},
                {"speaker": "Ben", "dia_id": "D2:3", "text": "We won our first rowing regatta on Saturday."},
                {"speaker": "Ana", "dia_id": "D2:4", "text": "That is wonderful news."},
            ],
        },
        "qa": [
            {
                "question": "What breed is the puppy Ana adopted?",
                "answer": "a beagle",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "When did Ben win a rowing regatta?",
                "answer": "the Saturday before 20 June 2023",
                "evidence": ["D2:3", "D1:4"],
                "category": 2,
            },
            {
                "question": "What colour did Ben paint his kitchen?",
                "adversarial_answer": "yellow",
                "evidence": ["D1:3"],
                "category": 5,
            },
            {"question": "What is Ana's favourite film?", "answer": "unknown", "evidence": ["D9:9"], "category": 3},
        ],
        "observation": {
            "session_1_observation": {
                "Ana": [
                    ["Ana adopted a beagle puppy called Biscuit.", "D1:1"],
                    ["Ana is repainting her kitchen yellow.", "D1:3"],
                ],
                "Ben": [["Ben started rowing on the river.", "D1:4"]],
            },
            "session_2_observation": {"Ben": [["Ben won a rowing regatta with his team.", "D2:3"]]},
        },
    }
]


@pytest.fixture
def sample_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_tiny.json"
    path.write_text(json.dumps(SAMPLE), encoding="utf-8")
    return path


@pytest.fixture
def pgvector() -> None:
    """Semantic modes need pgvector; without it Engram runs lexical-only by design."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        if cursor.fetchone() is None:
            pytest.skip("the server has no pgvector")


def _row_counts() -> tuple[int, ...]:
    return tuple(
        model.objects.count()
        for model in (
            Tenant,
            RuntimeAgent,
            Connector,
            Actor,
            Conversation,
            Message,
            ConversationSearchEvent,
            MemoryEntry,
            RecallTrace,
            *((MessageEmbedding, RevisionEmbedding) if vectors_stored() else ()),
        )
    )


def test_eval_locomo_reports_the_figures_as_its_last_line_and_changes_nothing(sample_file: Path) -> None:
    """The last line is one JSON object with the overall, per-category and per-conversation figures and
    the recall curves; the single-hop
    question's only evidence turn is the first hit; the question whose evidence names no turn is
    skipped; the evaluation's workspace, messages and audit rows are all rolled back."""
    before = _row_counts()
    out = StringIO()
    call_command("eval_locomo", "--file", str(sample_file), verbosity=0, stdout=out)

    lines = out.getvalue().strip().splitlines()
    report = json.loads(lines[-1])
    assert set(report) == {
        "mode",
        "unit",
        "questions",
        "recall@5",
        "recall@10",
        "mrr",
        "ndcg@10",
        "by_category",
        "by_conversation",
        "recall_curve",
        "skipped",
        "embedding_seconds",
        "question_ms_p50",
        "question_ms_p95",
    }
    assert report["embedding_seconds"] == 0.0  # lexical: nothing to embed
    assert (report["mode"], report["unit"]) == ("lexical", "turns")
    # Categories 4 and 2 count overall; 5 is reported on its own; the category-3 question is skipped.
    assert report["questions"] == 2
    assert report["skipped"] == 1
    assert set(report["by_category"]) == {"2", "3", "4", "5"}
    single_hop = report["by_category"]["4"]
    assert single_hop == {"questions": 1, "skipped": 0, "recall@5": 1.0, "recall@10": 1.0, "mrr": 1.0, "ndcg@10": 1.0}
    assert report["by_category"]["3"]["questions"] == 0
    assert report["by_category"]["3"]["skipped"] == 1
    assert report["by_category"]["2"]["recall@10"] > 0
    for name in ("recall@5", "recall@10", "mrr", "ndcg@10"):
        assert 0.0 <= report[name] <= 1.0
    assert any(line.startswith("4 single-hop") for line in lines)
    assert any(line.startswith("overall 1-4") for line in lines)
    # Per conversation: categories 1-4 only, as overall; the table names it and shows the spread.
    conversation = report["by_conversation"]["conv-eval"]
    assert conversation == {"questions": 2} | {
        name: report[name] for name in ("recall@5", "recall@10", "mrr", "ndcg@10")
    }
    assert any(line.startswith("conv-eval") for line in lines)
    assert any(line.startswith("spread (lowest-highest)") for line in lines)
    # recall@1..20, overall and per category; recall@5 and @10 are points of the curve.
    curve = report["recall_curve"]
    assert set(curve) == {"overall", "2", "3", "4", "5"}
    assert len(curve["overall"]) == 20 and curve["3"] == []
    assert (curve["overall"][4], curve["overall"][9]) == (report["recall@5"], report["recall@10"])
    assert curve["4"][0] == 1.0

    assert _row_counts() == before


def test_eval_locomo_scores_observations_through_memory_recall(sample_file: Path) -> None:
    """Observations are stored as memories and recalled; an item counts as its source turn. The
    single-hop question's observation (from D1:1) is the first item, and nothing is left behind."""
    before = _row_counts()
    out = StringIO()
    call_command("eval_locomo", "--file", str(sample_file), "--unit", "observations", verbosity=0, stdout=out)
    report = json.loads(out.getvalue().strip().splitlines()[-1])
    assert (report["mode"], report["unit"]) == ("lexical", "observations")
    assert report["by_category"]["4"]["mrr"] == 1.0
    assert report["by_category"]["2"]["recall@10"] > 0
    assert _row_counts() == before


def test_eval_recall_noise_reports_noise_beside_the_same_recall_and_changes_nothing(sample_file: Path) -> None:
    """eval_recall_noise asks the questions as eval_locomo --unit observations does, so its recall
    figures equal that command's; its noise ratio is the share of returned items whose source turn is no
    evidence, a fraction; nothing is left behind."""
    before = _row_counts()
    recall_out, noise_out = StringIO(), StringIO()
    call_command("eval_locomo", "--file", str(sample_file), "--unit", "observations", verbosity=0, stdout=recall_out)
    call_command("eval_recall_noise", "--file", str(sample_file), "--mode", "lexical", verbosity=0, stdout=noise_out)
    recall_report = json.loads(recall_out.getvalue().strip().splitlines()[-1])
    noise_report = json.loads(noise_out.getvalue().strip().splitlines()[-1])
    for metric in ("recall@5", "recall@10", "mrr"):
        assert noise_report[metric] == recall_report[metric], metric
    assert 0.0 <= noise_report["noise_ratio"] <= 1.0
    assert noise_report["returned_per_question"] > 0
    # What ranking could reach: every turn recall returns was considered, and came from an observation.
    reach = noise_report["reach"]
    assert noise_report["recall@10"] <= reach["considered"] <= reach["observed"] <= 1.0
    assert set(reach["by_category"]) <= {"1 multi-hop", "2 temporal", "3 open-domain", "4 single-hop"}
    assert _row_counts() == before


@pytest.mark.parametrize("unit", ["turns", "observations"])
def test_eval_locomo_hybrid_and_semantic_embed_inside_the_evaluation(
    sample_file: Path, pgvector: None, unit: str
) -> None:
    """The imported text is embedded inside the rolled-back transaction; the time is reported apart."""
    before = _row_counts()
    for mode in ("semantic", "hybrid"):
        out = StringIO()
        call_command("eval_locomo", "--file", str(sample_file), "--mode", mode, "--unit", unit, verbosity=0, stdout=out)
        report = json.loads(out.getvalue().strip().splitlines()[-1])
        assert (report["mode"], report["unit"]) == (mode, unit)
        assert report["embedding_seconds"] > 0
        assert report["by_category"]["4"]["recall@10"] == 1.0
    assert _row_counts() == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--mode", "fuzzy"], "invalid choice"),
        (["--unit", "sessions"], "invalid choice"),
        (["--limit", "21"], "--limit"),
    ],
)
def test_eval_locomo_refuses_what_it_cannot_measure(sample_file: Path, arguments: list[str], message: str) -> None:
    """Unknown modes and units, and limits the search refuses, are clear command errors."""
    with pytest.raises(CommandError, match=message):
        call_command("eval_locomo", "--file", str(sample_file), *arguments, verbosity=0, stdout=StringIO())


def test_eval_locomo_refuses_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot read"):
        call_command("eval_locomo", "--file", str(tmp_path / "missing.json"), verbosity=0, stdout=StringIO())
    empty = tmp_path / "empty.json"
    empty.write_text("[]", encoding="utf-8")
    with pytest.raises(CommandError, match="no conversations"):
        call_command("eval_locomo", "--file", str(empty), verbosity=0, stdout=StringIO())


def test_plot_locomo_draws_the_curves_of_each_mode(sample_file: Path, tmp_path: Path) -> None:
    """plot_locomo reads eval_locomo's last line from each file and writes one PNG; a file without
    that line is refused."""
    out = StringIO()
    call_command("eval_locomo", "--file", str(sample_file), verbosity=0, stdout=out)
    result = tmp_path / "lexical.txt"
    result.write_text(out.getvalue())
    png = tmp_path / "curves.png"
    call_command("plot_locomo", str(result), "--out", str(png), stdout=StringIO())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty.txt"
    empty.write_text("no summary here\n")
    with pytest.raises(CommandError, match="no eval_locomo summary line"):
        call_command("plot_locomo", str(empty), "--out", str(png), stdout=StringIO())


def test_eval_recall_noise_reads_and_writes_an_embedding_cache(
    sample_file: Path, pgvector: None, tmp_path: Path
) -> None:
    """With ``--embedding-cache`` the vectors are written to the file and the figures are those of a run
    without it; nothing is left behind."""
    before = _row_counts()
    cache = tmp_path / "vectors.npz"
    reports = []
    for extra in ((), ("--embedding-cache", str(cache)), ("--embedding-cache", str(cache))):
        out = StringIO()
        call_command(
            "eval_recall_noise", "--file", str(sample_file), "--mode", "hybrid", *extra, verbosity=0, stdout=out
        )
        reports.append(json.loads(out.getvalue().strip().splitlines()[-1]))
    assert cache.exists()
    for metric in ("recall@10", "mrr", "noise_ratio"):
        assert reports[0][metric] == reports[1][metric] == reports[2][metric], metric
    assert _row_counts() == before


def _recall_noise_report(sample_file: Path, *extra: str) -> dict[str, Any]:
    out = StringIO()
    call_command("eval_recall_noise", "--file", str(sample_file), "--mode", "hybrid", *extra, verbosity=0, stdout=out)
    report: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    return report


def test_eval_recall_noise_with_outside_vectors_of_the_same_model_scores_as_the_model_does(
    sample_file: Path, pgvector: None, tmp_path: Path
) -> None:
    """The texts a run embedded, encoded outside and read back with ``--embedding-vectors``, give that
    run's figures when the outside vectors are the model's own; the report names their model."""
    texts_path = tmp_path / "texts.json"
    plain = _recall_noise_report(sample_file, "--embedding-texts", str(texts_path))
    texts = json.loads(texts_path.read_text())
    assert texts and len(texts) == len(set(texts))
    vectors = tmp_path / "vectors.npz"
    np.savez(
        vectors,
        model=np.array("the-same-model-outside"),
        keys=np.array([text_key(text) for text in texts]),
        vectors=embedding_model().embed(texts),
    )
    outside = _recall_noise_report(sample_file, "--embedding-vectors", str(vectors))
    assert outside["embedding_vectors"] == "the-same-model-outside" and "embedding_vectors" not in plain
    for metric in ("recall@10", "mrr", "noise_ratio"):
        assert outside[metric] == plain[metric], metric
    with pytest.raises(CommandError, match="exclude each other"):
        _recall_noise_report(
            sample_file, "--embedding-vectors", str(vectors), "--embedding-cache", str(tmp_path / "cache.npz")
        )
