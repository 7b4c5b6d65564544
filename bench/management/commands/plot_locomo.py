"""Draw LoCoMo recall@k curves, one panel per category and one line per mode, from ``eval_locomo`` output.

``plot_locomo RESULT [RESULT ...] [--out docs/quality_locomo.png]``. Each ``RESULT`` is a file holding
what ``eval_locomo`` printed (its last JSON line is read: ``mode``, ``unit`` and ``recall_curve``, i.e.
recall@1..20 overall and per category). Nothing is measured here, so a plot is redrawn without
re-running an evaluation. Drawn with matplotlib's Agg backend (files only, no display), as the bench
report is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.evaluation import CATEGORY_NAMES

#: The panels, in order: the overall figures (categories 1-4), then each category.
PANELS = ("overall", "1", "2", "3", "4", "5")


def last_json_line(path: Path) -> dict[str, Any]:
    """The last line of ``path`` that is a JSON object with a recall curve (eval_locomo's summary)."""
    for line in reversed(path.read_text().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, dict) and "recall_curve" in parsed:
                return parsed
    raise ValueError("no eval_locomo summary line (with recall_curve) in it")


def panel_title(panel: str, result: dict[str, Any]) -> str:
    if panel == "overall":
        return f"overall 1-4 (n={result.get('questions', '?')})"
    questions = result.get("by_category", {}).get(panel, {}).get("questions", "?")
    return f"{panel} {CATEGORY_NAMES.get(int(panel), '?')} (n={questions})"


def plot(results: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharex=True, sharey=True)
    for panel, ax in zip(PANELS, axes.flat, strict=True):
        drawn = False
        for result in results:
            curve = result["recall_curve"].get(panel, [])
            if curve:
                drawn = True
                label = f"{result['mode']} (R@10 {curve[9]:.3f})" if len(curve) >= 10 else result["mode"]
                ax.plot(range(1, len(curve) + 1), curve, marker=".", label=label)
        ax.set_title(panel_title(panel, results[0]), fontsize=10)
        ax.set_xticks([1, 5, 10, 15, 20])
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=8, loc="lower right")
    for ax in axes[-1]:
        ax.set_xlabel("k")
    for ax in axes[:, 0]:
        ax.set_ylabel("recall@k")
    unit = results[0].get("unit", "turns")
    figure.suptitle(f"LoCoMo dev split, {unit}: recall@k per category and mode")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)


class Command(BaseCommand):
    help = "Draw recall@k curves per mode and category from eval_locomo output files to a PNG."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("results", nargs="+", help="Files holding eval_locomo output (one per mode).")
        parser.add_argument("--out", default="docs/quality_locomo.png", help="Where the PNG is written.")

    def handle(self, *args: Any, **options: Any) -> None:
        results = []
        for name in options["results"]:
            try:
                results.append(last_json_line(Path(name)))
            except (OSError, ValueError) as error:
                raise CommandError(f"cannot read {name}: {error}") from error
        out = Path(options["out"])
        plot(results, out)
        self.stdout.write(f"Wrote {out} ({', '.join(r['mode'] for r in results)}).")
