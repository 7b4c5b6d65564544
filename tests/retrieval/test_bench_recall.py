"""``manage.py bench_recall``: builds a corpus with bulk SQL, times recall, ends with one JSON line."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from memory.models import MemoryEntry, MemoryEvidence, MemoryRevision, RevisionSearchDocument

pytestmark = pytest.mark.django_db


def test_bench_recall_reports_percentiles_as_its_last_line_and_reuses_the_corpus() -> None:
    """A small run builds 2,000 revisions over 2 agents (each a live entry's current revision with
    source evidence and a search document) and prints one JSON object with the figures last; a second
    run with the same arguments reuses the corpus instead of writing another."""
    out = StringIO()
    call_command("bench_recall", "--revisions", "2000", "--agents", "2", "--queries", "20", stdout=out)

    lines = out.getvalue().strip().splitlines()
    report = json.loads(lines[-1])
    assert set(report) == {"revisions", "agents", "queries", "p50_ms", "p95_ms", "p99_ms"}
    assert (report["revisions"], report["agents"], report["queries"]) == (2000, 2, 20)
    assert 0 < report["p50_ms"] <= report["p95_ms"] <= report["p99_ms"]
    assert lines[0].startswith("corpus built")

    revisions = MemoryRevision.objects.filter(agent__tenant__slug="bench-recall")
    assert revisions.count() == 2000
    assert (
        MemoryEntry.objects.filter(agent__tenant__slug="bench-recall", current_revision__isnull=False).count() == 2000
    )
    assert MemoryEvidence.objects.filter(revision__in=revisions, message__isnull=False).count() == 2000
    assert RevisionSearchDocument.objects.filter(revision__in=revisions).count() == 2000

    again = StringIO()
    call_command("bench_recall", "--revisions", "2000", "--agents", "2", "--queries", "5", stdout=again)
    assert again.getvalue().startswith("corpus reused")
    assert revisions.count() == 2000


def test_bench_recall_times_the_source_arm_side_by_side() -> None:
    """``--source-arm both`` times every question without and with the source arm in one run: the
    JSON's top-level figures are without it, ``source_arm`` holds the figures with it and
    ``p95_ratio`` the one p95 over the other."""
    out = StringIO()
    call_command(
        "bench_recall", "--revisions", "600", "--agents", "1", "--queries", "10", "--source-arm", "both", stdout=out
    )

    lines = out.getvalue().strip().splitlines()
    report = json.loads(lines[-1])
    assert {"source_arm", "p95_ratio"} <= set(report)
    assert 0 < report["source_arm"]["p50_ms"] <= report["source_arm"]["p95_ms"]
    assert report["p95_ratio"] == pytest.approx(report["source_arm"]["p95_ms"] / report["p95_ms"], abs=0.01)
    assert any(line.startswith("recall with the source arm x10") for line in lines)
