"""``manage.py bench_all``: one run at a tiny scale builds the corpus size by size, measures every
figure and the ratios between them, writes the JSON result, the Markdown report and its plots, and
prints the JSON last."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from accounts.models import RuntimeAgent, Tenant
from bench.harness.report import ratio_table
from bench.management.commands.bench_all import AllSpec, Corpus, p95_growth, size_ratios
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
    in 2 tenants, measured at 1 and 10 agents (a hundredth and a tenth of 10 agents both round to
    one); its writes queue no embedding work. The plain full-text baseline's table is gone after."""
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
    assert [size["agents"] for size in result["sizes"]] == [1, 10]
    assert set(result["run"]["cpu_probe_s"]) == {"before", "after"} and min(result["run"]["cpu_probe_s"].values()) > 0
    assert [size["messages"] for size in result["sizes"]] == [100, 1000]
    ratios = result["ratios"]
    assert ratios["full"] == result["overhead"]
    assert [size["messages"] for size in ratios["sizes"]] == [100, 1000]
    for size in ratios["sizes"]:
        for key in ("recall_lexical", "history", "history_vs_plain_fts_all_p95", "history_vs_plain_fts_any_p95"):
            assert isinstance(size[key], float) and size[key] > 0, key
    growth = ratios["p95_growth"]
    assert growth["messages"] == [100, 1000]
    for key in ("recall_lexical", "history", "plain_fts_all", "plain_fts_any"):
        assert growth[key][0] == 1.0 and growth[key][1] > 0, key
    for size in result["sizes"]:
        assert 0 < size["plain_fts_all_p50_ms"] <= size["plain_fts_all_p95_ms"]
        assert 0 < size["plain_fts_any_p50_ms"] <= size["plain_fts_any_p95_ms"]
    assert "history search / plain full-text search, any term (p95)" in stdout.getvalue()
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('bench_plain_fts')")
        assert cursor.fetchone()[0] is None
    curves = result["locomo"]
    assert {"turns/lexical", "observations/lexical"} <= set(curves)
    for curve in curves.values():
        assert curve["questions"] == 2 and len(curve["recall_at_k"]) == 20
        assert curve["recall_at_k"] == sorted(curve["recall_at_k"])

    assert json.loads((out / "bench_all.json").read_text())["sizes"] == result["sizes"]
    report = (out / "bench_all.md").read_text()
    assert "bench_all_latency.png" in report and "bench_all_recall_at_k.png" in report
    assert "## Ratios" in report and "p95 growth from 100 messages" in report
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


def _size(agents: int, *, history_p95: float, plain_p95: float) -> dict[str, float]:
    return {
        "agents": agents,
        "messages": agents * 10_000,
        "recall_lexical_p50_ms": 12.0,
        "recall_lexical_p95_ms": 20.0 * agents,
        "recall_lexical_bare_p50_ms": 3.0,
        "history_p50_ms": 15.0,
        "history_p95_ms": history_p95,
        "history_bare_p50_ms": 0.5,
        "plain_fts_all_p50_ms": 1.0,
        "plain_fts_all_p95_ms": plain_p95,
        "plain_fts_any_p50_ms": 2.0,
        "plain_fts_any_p95_ms": 2 * plain_p95,
    }


def test_ratios_divide_figures_of_one_run_and_grow_from_the_first_size() -> None:
    """Service / bare SQL at p50, history / plain search at p95, and each p95 over the first size's;
    the table puts the full size's overheads in the last column."""
    sizes = [_size(1, history_p95=20.0, plain_p95=4.0), _size(10, history_p95=30.0, plain_p95=10.0)]
    assert size_ratios(sizes[0]) == {
        "recall_lexical": 4.0,
        "history": 30.0,
        "history_vs_plain_fts_all_p95": 5.0,
        "history_vs_plain_fts_any_p95": 2.5,
    }
    growth = p95_growth(sizes)
    assert growth == {
        "messages": [10_000, 100_000],
        "recall_lexical": [1.0, 10.0],
        "history": [1.0, 1.5],
        "plain_fts_all": [1.0, 2.5],
        "plain_fts_any": [1.0, 2.5],
    }
    result = {
        "ratios": {
            "full": {"recall_hybrid": 3.0, "ingest": None},
            "sizes": [{"agents": s["agents"], "messages": s["messages"], **size_ratios(s)} for s in sizes],
            "p95_growth": growth,
        }
    }
    table = ratio_table(result)
    assert table[0] == "| ratio | 10,000 messages (1 agent) | 100,000 messages (10 agents) |"
    assert "| memory recall, hybrid / its bare SQL (p50) |  | 3.00x |" in table
    assert "| history search | 1.00x | 1.50x |" in table
    assert any(line.endswith("| n/a |") for line in table)
