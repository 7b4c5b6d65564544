"""``manage.py bench_all``: one run at a tiny scale builds the corpus in three sizes, measures every
figure, writes the JSON result, the Markdown report and its plots, and prints the JSON last."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.models import RuntimeAgent, Tenant
from bench.management.commands.bench_all import AllSpec, Corpus
from history.models import Message
from memory.models import IndexOutbox, MemoryEntry
from tests.history.test_eval_locomo_command import SAMPLE

FIGURES = {
    "sql_rare_ms",
    "sql_common_ms",
    "recall_lexical_p50_ms",
    "recall_lexical_p95_ms",
    "recall_hybrid_p50_ms",
    "recall_hybrid_p95_ms",
    "history_p50_ms",
    "history_p95_ms",
    "turn_p50_ms",
    "turn_p95_ms",
    "ingest_messages_per_s",
    "embed_texts_per_s",
    "db_mb_per_million_messages",
}


@pytest.mark.timeout(600)
def test_bench_all_reports_every_figure_writes_the_report_and_reuses_its_corpus(
    transactional_db: None, tmp_path: Path
) -> None:
    """The HTTP turns are served by gunicorn, another process that sees only committed rows: hence
    ``transactional_db``. At scale 0.001 the corpus is 1,000 messages and 200 revisions over 10 agents
    in 2 tenants, measured at 1, 3 and 10 agents; its writes queue no embedding work."""
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps(SAMPLE))
    out = tmp_path / "bench"
    stdout = StringIO()
    call_command(
        "bench_all",
        *("--scale", "0.001", "--repeats", "2", "--locomo", str(locomo), "--out", str(out)),
        verbosity=0,
        stdout=stdout,
    )

    lines = stdout.getvalue().strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[0].startswith("corpus built: 1 agents, 100 messages, 20 revisions")
    assert set(result) >= FIGURES
    assert result["corpus"] == {"messages": 1000, "revisions": 200, "agents": 10, "tenants": 2, "status": "built"}
    for name in FIGURES - {"recall_hybrid_p50_ms", "recall_hybrid_p95_ms"}:
        assert result[name] > 0, name
    assert result["recall_lexical_p50_ms"] <= result["recall_lexical_p95_ms"]
    assert result["turn_p50_ms"] <= result["turn_p95_ms"]
    assert set(result["overhead"]) == {"recall_lexical", "recall_hybrid", "history", "ingest"}
    assert result["overhead"]["recall_lexical"] > 0 and result["overhead"]["ingest"] > 0
    assert [size["agents"] for size in result["sizes"]] == [1, 3, 10]
    assert set(result["run"]["cpu_probe_s"]) == {"before", "after"} and min(result["run"]["cpu_probe_s"].values()) > 0
    assert [size["messages"] for size in result["sizes"]] == [100, 300, 1000]
    curves = result["locomo"]
    assert {"turns/lexical", "observations/lexical"} <= set(curves)
    for curve in curves.values():
        assert curve["questions"] == 2 and len(curve["recall_at_k"]) == 20
        assert curve["recall_at_k"] == sorted(curve["recall_at_k"])

    assert json.loads((out / "bench_all.json").read_text())["sizes"] == result["sizes"]
    report = (out / "bench_all.md").read_text()
    assert "bench_all_latency.png" in report and "bench_all_recall_at_k.png" in report
    for plot in ("bench_all_latency.png", "bench_all_recall_at_k.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    corpus = MemoryEntry.objects.filter(agent__tenant__slug__startswith="bench-all")
    assert corpus.count() == 200
    assert Tenant.objects.filter(slug__startswith="bench-all").count() == 2
    # The corpus's messages: inbound, without a connector id (the HTTP turns' messages have one).
    messages = Message.objects.filter(
        agent__tenant__slug__startswith="bench-all", direction="inbound", external_id__isnull=True
    )
    assert messages.count() == 1000
    assert not IndexOutbox.objects.filter(target="message", target_id__in=messages.values("pk")).exists()

    # A second run finds every agent of the corpus and builds nothing.
    agents, built = Corpus(AllSpec.at(0.001, 1), locomo).ensure(10, quiet=True)
    assert not built and len(agents) == 10
    assert RuntimeAgent.objects.filter(tenant__slug__startswith="bench-all").count() == 10
