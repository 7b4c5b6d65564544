"""``manage.py bench_history``: builds a transcript with bulk SQL, measures search, ends with one JSON line."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from history.models import Message, MessageSearchDocument, MessageSourceEvidence

pytestmark = pytest.mark.django_db


def test_bench_history_reports_its_figures_as_the_last_line_and_reuses_the_corpus() -> None:
    """A small run builds 3,000 messages over 2 agents, each with connector-signed evidence and a
    sidecar document written by the trigger, and prints the figures as one JSON object; a second run
    with the same arguments reuses the corpus instead of writing another."""
    arguments = ("--messages", "3000", "--agents", "2", "--queries", "10")
    out = StringIO()
    call_command("bench_history", *arguments, verbosity=0, stdout=out)

    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith("corpus built")
    report = json.loads(lines[-1])
    assert set(report) == {"messages", "bitmap_and", "sql_rare_ms", "sql_common_ms", "service_p50_ms", "service_p95_ms"}
    assert report["messages"] == 3000
    assert isinstance(report["bitmap_and"], bool)
    assert report["sql_rare_ms"] >= 0 and report["sql_common_ms"] >= 0
    assert 0 < report["service_p50_ms"] <= report["service_p95_ms"]

    messages = Message.objects.filter(agent__tenant__slug="bench-history")
    assert messages.count() == 3000
    assert messages.values("conversation__audience_kind").distinct().count() == 2  # workspace and members
    assert MessageSourceEvidence.objects.filter(message__in=messages, method="connector_signed").count() == 3000
    assert MessageSearchDocument.objects.filter(message__in=messages).count() == 3000

    again = StringIO()
    call_command("bench_history", *arguments, verbosity=0, stdout=again)
    assert again.getvalue().startswith("corpus reused")
    assert messages.count() == 3000
