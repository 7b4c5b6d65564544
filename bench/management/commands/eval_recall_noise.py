"""Measure memory recall's noise ratio next to its recall, on a LoCoMo-format file.

``eval_recall_noise --file PATH [--mode lexical|semantic|hybrid] [--items 20] [--per-question OUT.jsonl]
[--embedding-cache FILE | --embedding-vectors FILE] [--embedding-texts FILE]``.

Spec 001's tracked metric: *noise ratio = retrieved-and-irrelevant over retrieved*, "the counterweight to
recall; both are reported, never recall alone". Here "retrieved" is what the recall service returned for
the question (the items that would reach the prompt, at most ``--items``), and an item is relevant when
its observation's source turn is one of the question's evidence turns. The ratio is pooled over every
returned item of categories 1-4 (each item counts once); ``noise@5`` and ``noise@10`` pool the first 5
and 10 items only, so a change in how full the budget is can be told apart from a change in what ranks
first.

Each conversation is imported as ``import_locomo`` does (one inbound message per turn, read by both
speakers), each observation is remembered about its speaker from its source turn, and every question is
asked by speaker A through ``form_query`` and the one ``recall`` service, by ``eval_locomo``'s own
``evaluate_conversation`` (``unit="observations"``). Recall figures (recall@5/@10, MRR, nDCG@10) are
reported overall, per category and per conversation, from the same run.

``--embedding-cache`` reuses the vectors of earlier runs, as ``eval_locomo``'s does, and
``--embedding-texts`` / ``--embedding-vectors`` run it again with another embedding model's vectors
(:mod:`bench.embedding_cache`).

Beside them, how much of the evidence ranking could reach at all (``reach``, categories 1-4, each a mean
over questions of the share of its evidence turns): ``observed``, the turns any stored observation comes
from (no retrieval returns a turn nothing was learned from), and ``considered``, the turns of the
candidates the recall considered (its trace's candidate ids: the pool ranking and collapse chose from).
Recall@10 can rise by ranking alone only as far as ``considered``.

Everything runs in one transaction that is rolled back: the database is left as it was.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from bench.embedding_cache import add_embedding_arguments, embedding_options
from bench.evaluation import CATEGORY_NAMES, OVERALL_CATEGORIES, Evaluation, deduplicated
from bench.locomo import load_locomo
from bench.management.commands.eval_locomo import evaluate_conversation
from memory.embeddings.index import semantic_enabled

MODES = ("lexical", "semantic", "hybrid")
DEFAULT_ITEMS = 20
NOISE_DEPTHS = (5, 10)


@dataclass
class Noise:
    """Returned and irrelevant items, pooled; ``at`` holds the same counts for the first k items."""

    returned: int = 0
    irrelevant: int = 0
    questions: int = 0
    at: dict[int, list[int]] = field(default_factory=lambda: {k: [0, 0] for k in NOISE_DEPTHS})

    def add(self, ranked: Sequence[str], evidence: Sequence[str]) -> None:
        relevant = set(evidence)
        self.questions += 1
        self.returned += len(ranked)
        self.irrelevant += sum(1 for unit in ranked if unit not in relevant)
        for k, counts in self.at.items():
            counts[0] += len(ranked[:k])
            counts[1] += sum(1 for unit in ranked[:k] if unit not in relevant)

    def report(self) -> dict[str, float]:
        figures: dict[str, float] = {
            "noise_ratio": round(self.irrelevant / self.returned, 4) if self.returned else 0.0,
            "returned_per_question": round(self.returned / self.questions, 2) if self.questions else 0.0,
        }
        for k, (returned, irrelevant) in self.at.items():
            figures[f"noise@{k}"] = round(irrelevant / returned, 4) if returned else 0.0
        return figures


@dataclass
class Reach:
    """Per category (1-4), the summed share of each question's evidence that observations came from and
    that the recall considered, and the questions counted."""

    sums: dict[int, list[float]] = field(default_factory=dict)

    def add(self, category: int, evidence: Sequence[str], observed: set[str], considered: set[str]) -> None:
        if category not in OVERALL_CATEGORIES or not evidence:
            return
        wanted = set(evidence)
        sums = self.sums.setdefault(category, [0.0, 0.0, 0.0])
        sums[0] += len(wanted & observed) / len(wanted)
        sums[1] += len(wanted & considered) / len(wanted)
        sums[2] += 1

    def report(self) -> dict[str, Any]:
        def shares(observed: float, considered: float, questions: float) -> dict[str, float]:
            if not questions:
                return {"observed": 0.0, "considered": 0.0}
            return {"observed": round(observed / questions, 4), "considered": round(considered / questions, 4)}

        total = [sum(values[i] for values in self.sums.values()) for i in range(3)]
        return shares(*total) | {
            "by_category": {
                f"{category} {CATEGORY_NAMES.get(category, '?')}": shares(*values)
                for category, values in sorted(self.sums.items())
            }
        }


class Command(BaseCommand):
    help = "Noise ratio (retrieved-and-irrelevant over retrieved) and recall of memory recall on a LoCoMo file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", required=True, help="Path to a JSON file in LoCoMo's schema.")
        parser.add_argument("--mode", default="hybrid", choices=MODES, help="Arms: lexical, semantic or both.")
        parser.add_argument("--items", type=int, default=DEFAULT_ITEMS, help="Items per recall (the budget's cap).")
        parser.add_argument("--per-question", default="", help="Write one JSON line per question to this path.")
        add_embedding_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        mode, items = options["mode"], options["items"]
        if not 1 <= items <= 100:
            raise CommandError("--items must lie in [1, 100]")
        if mode != "lexical" and not semantic_enabled():
            raise CommandError(f"--mode {mode} needs the semantic arm (pgvector, ENGRAM_SEMANTIC not 'off')")
        try:
            parsed = load_locomo(options["file"])
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot read {options['file']}: {error}") from error
        if not parsed.conversations:
            raise CommandError(f"{options['file']} holds no conversations")
        started = time.monotonic()
        run = uuid.uuid4().hex[:12]
        overall, noise, reach = Evaluation(), Noise(), Reach()
        per_conversation: dict[str, dict[str, Any]] = {}
        out: IO[str] | None = open(options["per_question"], "w") if options["per_question"] else None  # noqa: SIM115
        try:
            with embedding_options(options) as vectors_from, transaction.atomic():
                for position, conversation in enumerate(parsed.conversations):
                    evaluation, conversation_noise = Evaluation(), Noise()

                    def count(
                        category: int,
                        evidence: tuple[str, ...],
                        ranked: list[str],
                        conversation_noise: Noise = conversation_noise,
                        sample_id: str = conversation.sample_id,
                    ) -> None:
                        overall.add(category=category, ranked=ranked, evidence=evidence)
                        if category in OVERALL_CATEGORIES and evidence:
                            # Two observations of one turn are one unit, as the recall metrics count them.
                            units = deduplicated(ranked)
                            noise.add(units, evidence)
                            conversation_noise.add(units, evidence)
                        if out is not None:
                            line = {"conversation": sample_id, "category": category}
                            out.write(json.dumps(line | {"evidence": list(evidence), "ranked": ranked}) + "\n")

                    evaluate_conversation(
                        conversation,
                        evaluation,
                        workspace=f"eval-noise-{run}-{position}",
                        limit=items,
                        mode=mode,
                        unit="observations",
                        items=items,
                        on_ranked=count,
                        on_considered=reach.add,
                    )
                    summary = evaluation.overall().metrics() | conversation_noise.report()
                    per_conversation[conversation.sample_id] = summary
                transaction.set_rollback(True)  # everything above was only needed to ask the questions
        finally:
            if out is not None:
                out.close()
        report: dict[str, Any] = {
            "mode": mode,
            **vectors_from,
            "items": items,
            "questions": overall.overall().questions,
            **overall.overall().metrics(),
            **noise.report(),
            "by_category": {
                f"{category} {CATEGORY_NAMES.get(category, '?')}": summary.metrics()
                for category, summary in overall.by_category().items()
            },
            "by_conversation": per_conversation,
            "reach": reach.report(),
            "seconds": round(time.monotonic() - started, 1),
        }
        self.stdout.write(json.dumps(report))
