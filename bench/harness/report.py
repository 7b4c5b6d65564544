"""The Markdown report and the plots of ``bench_all``, written from its JSON result.

Plots are drawn with matplotlib's Agg backend (files only, no display), so the report can be written
on a server or in CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Services plotted against corpus size: (key prefix in a size's figures, label).
SIZE_SERIES = (
    ("recall_lexical", "memory recall, lexical"),
    ("history", "history search"),
    ("plain_fts_all", "plain full-text search, all terms"),
    ("plain_fts_any", "plain full-text search, any term"),
)
#: The ratios of ``result["ratios"]``: (key, label), per size and at the full size.
SIZE_RATIOS = (
    ("recall_lexical", "memory recall, lexical / its bare SQL (p50)"),
    ("history", "history search / its bare SQL (p50)"),
    ("history_vs_plain_fts_all_p95", "history search / plain full-text search, all terms (p95)"),
    ("history_vs_plain_fts_any_p95", "history search / plain full-text search, any term (p95)"),
)
FULL_RATIOS = (
    ("recall_hybrid", "memory recall, hybrid / its bare SQL (p50)"),
    ("ingest", "ingest: bare INSERTs' messages/s / the service's"),
)
GROWTH_LABELS = (
    ("recall_lexical", "memory recall, lexical"),
    ("history", "history search"),
    ("plain_fts_all", "plain full-text search, all terms"),
    ("plain_fts_any", "plain full-text search, any term"),
)
SQL_SERIES = (("sql_rare_ms", "sidecar SQL, rare term"), ("sql_common_ms", "sidecar SQL, common term"))
RECALL_AT = (1, 5, 10, 20)
ARMS = {True: "lexical and semantic arms", False: "lexical arms"}
STATUS = {"built": "built by this run", "reused": "reused from an earlier run"}


def write_report(result: dict[str, Any], folder: Path, *, stem: str = "bench_all") -> dict[str, Path]:
    """Write ``<stem>.md`` and its two plots into ``folder``; the paths written, by kind."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "latency_plot": folder / f"{stem}_latency.png",
        "recall_plot": folder / f"{stem}_recall_at_k.png",
        "report": folder / f"{stem}.md",
    }
    plot_latency(result["sizes"], paths["latency_plot"])
    plot_recall_at_k(result["locomo"], paths["recall_plot"])
    paths["report"].write_text(markdown(result, paths))
    return paths


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency(sizes: list[dict[str, Any]], path: Path) -> None:
    plt = _pyplot()
    messages = [size["messages"] for size in sizes]
    figure, (services, sql) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label in SIZE_SERIES:
        line = services.plot(messages, [s[f"{key}_p50_ms"] for s in sizes], marker="o", label=f"{label} p50")[0]
        p95 = [s[f"{key}_p95_ms"] for s in sizes]
        services.plot(messages, p95, marker="o", ls="--", color=line.get_color(), label=f"{label} p95")
    for key, label in SQL_SERIES:
        sql.plot(messages, [s[key] for s in sizes], marker="o", label=label)
    for axes, title in ((services, "service calls (p50 solid, p95 dashed)"), (sql, "bare SQL (median execution)")):
        axes.set_xscale("log")
        axes.set_xlabel("messages in the corpus")
        axes.set_ylabel("ms")
        axes.set_ylim(bottom=0)
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_recall_at_k(curves: dict[str, dict[str, Any]], path: Path) -> None:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.5, 4.2))
    for name, curve in curves.items():
        values = curve["recall_at_k"]
        axes.plot(range(1, len(values) + 1), values, marker=".", label=f"{name} ({curve['questions']} questions)")
    axes.set_xlabel("k")
    axes.set_ylabel("recall@k (LoCoMo categories 1-4)")
    axes.set_ylim(0, 1)
    axes.set_title("LoCoMo: recall@k by unit and mode")
    axes.grid(True, alpha=0.3)
    if curves:
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}x"


def ratio_table(result: dict[str, Any]) -> list[str]:
    """The run's ratios as Markdown tables: service / bare SQL and history / plain search by size, the
    full size's other overheads, and p95 growth from the first size."""
    ratios = result["ratios"]
    sizes = ratios["sizes"]
    header = " | ".join(
        f"{size['messages']:,} messages ({size['agents']} agent{'' if size['agents'] == 1 else 's'})" for size in sizes
    )
    lines = [f"| ratio | {header} |", "| --- | " + " | ".join("---:" for _ in sizes) + " |"]
    for key, label in SIZE_RATIOS:
        lines.append(f"| {label} | " + " | ".join(_times(size[key]) for size in sizes) + " |")
    for key, label in FULL_RATIOS:
        # Measured at the full size only: the last column.
        cells = [""] * (len(sizes) - 1) + [_times(ratios["full"][key])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    growth = ratios["p95_growth"]
    first = growth["messages"][0]
    lines += [
        "",
        f"| p95 growth from {first:,} messages | " + " | ".join(f"{m:,}" for m in growth["messages"]) + " |",
        "| --- | " + " | ".join("---:" for _ in growth["messages"]) + " |",
    ]
    for key, label in GROWTH_LABELS:
        lines.append(f"| {label} | " + " | ".join(_times(value) for value in growth[key]) + " |")
    return lines


def _times(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}x"


def markdown(result: dict[str, Any], paths: dict[str, Path]) -> str:
    corpus, run, overhead = result["corpus"], result["run"], result["overhead"]
    lines = [
        "# Engram benchmark",
        "",
        f"`{run['command']}`, {run['started_at']}, {run['seconds']:,.0f} s on {run['cpus']} CPUs (load average "
        f"{run['load_before']:.1f} before, {run['load_after']:.1f} after; CPU probe {run['cpu_probe_s']['before']} s "
        f"before, {run['cpu_probe_s']['after']} s after: `bench/harness/machine.py`), {run['postgres']}. Figures are "
        f"medians of {result['repeats']} repeated measurements ({result['queries']} questions, {result['turns']} HTTP "
        "turns each); latencies are wall times as the caller sees them.",
        "",
        "## Corpus",
        "",
        "| messages | memory revisions | agents | tenants | database | tables per million messages |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {corpus['messages']:,} | {corpus['revisions']:,} | {corpus['agents']} | {corpus['tenants']} | "
        f"{result['db_mb']:,.0f} MB | {result['db_mb_per_million_messages']:,.0f} MB "
        f"(history tables {result['history_mb_per_million_messages']:,.0f} MB) |",
        "",
        f"LoCoMo turns and observations with generated statements, {STATUS[corpus['status']]}. The size per "
        "million messages counts every table and index of the schema (the memory tables grow with it: one "
        f"revision per five messages). Hybrid recall runs over the {result['embedded_agents']} agent(s) whose "
        f"{result['embedded_revisions']:,} revisions are embedded.",
        "",
        "## Ratios",
        "",
        "Ratios between figures of this one run, the results that compare across machines.",
        "",
        *ratio_table(result),
        "",
        "## Results",
        "",
        "| measurement | p50 ms | p95 ms | bare SQL p50 ms | service / bare SQL |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for key, label in (
        ("recall_lexical", "memory recall, lexical"),
        ("recall_hybrid", "memory recall, hybrid"),
        ("history", "history search"),
    ):
        lines.append(
            f"| {label} | {_ms(result[f'{key}_p50_ms'])} | {_ms(result[f'{key}_p95_ms'])} | "
            f"{_ms(result[f'{key}_bare_p50_ms'])} | {_ratio(overhead[key])} |"
        )
    lines += [
        f"| full HTTP turn ({result['turns']} turns a repeat, {ARMS[result['turn_semantic']]}) | "
        f"{_ms(result['turn_p50_ms'])} | "
        f"{_ms(result['turn_p95_ms'])} | | |",
        "",
        "HTTP turn steps, p50 / p95 ms: "
        + ", ".join(f"{step} {v['p50_ms']:,.1f} / {v['p95_ms']:,.1f}" for step, v in result["turn_steps"].items()),
        "",
        "| measurement | median |",
        "| --- | ---: |",
        f"| sidecar SQL, rare term `{result['sql_rare_term']}` | {_ms(result['sql_rare_ms'])} ms |",
        f"| sidecar SQL, common term `{result['sql_common_term']}` | {_ms(result['sql_common_ms'])} ms |",
        f"| indexes the bare sidecar query reads | {', '.join(result['sql_indexes']) or 'none'} |",
        f"| ingest through the service | {result['ingest_messages_per_s']:,.0f} messages/s |",
        f"| ingest as bare SQL | {result['ingest_bare_messages_per_s']:,.0f} messages/s "
        f"(service / bare SQL {_ratio(overhead['ingest'])}) |",
        f"| embedding, one worker | {result['embed_texts_per_s']:,.1f} texts/s |",
        "",
        "## Latency against corpus size",
        "",
        f"![latency against corpus size]({paths['latency_plot'].name})",
        "",
        "| agents | messages | revisions | recall p50 / p95 ms | history p50 / p95 ms | plain FTS all terms p50 / p95"
        " ms | plain FTS any term p50 / p95 ms | SQL rare / common ms | database MB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size in result["sizes"]:
        lines.append(
            f"| {size['agents']} | {size['messages']:,} | {size['revisions']:,} | "
            f"{_ms(size['recall_lexical_p50_ms'])} / {_ms(size['recall_lexical_p95_ms'])} | "
            f"{_ms(size['history_p50_ms'])} / {_ms(size['history_p95_ms'])} | "
            f"{_ms(size['plain_fts_all_p50_ms'])} / {_ms(size['plain_fts_all_p95_ms'])} | "
            f"{_ms(size['plain_fts_any_p50_ms'])} / {_ms(size['plain_fts_any_p95_ms'])} | "
            f"{_ms(size['sql_rare_ms'])} / {_ms(size['sql_common_ms'])} | {size['db_mb']:,.0f} |"
        )
    lines += [
        "",
        "## LoCoMo recall@k",
        "",
        f"![recall@k]({paths['recall_plot'].name})",
        "",
        "| unit / mode | questions | " + " | ".join(f"R@{k}" for k in RECALL_AT) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in RECALL_AT) + " |",
    ]
    for name, curve in result["locomo"].items():
        values = curve["recall_at_k"]
        cells = " | ".join(f"{values[k - 1]:.3f}" if k <= len(values) else "n/a" for k in RECALL_AT)
        lines.append(f"| {name} | {curve['questions']} | {cells} |")
    if not result["locomo"]:
        lines.append("| (no LoCoMo file) | | |")
    return "\n".join(lines) + "\n"
