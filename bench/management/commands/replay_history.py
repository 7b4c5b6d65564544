"""Score a recorded history search ranking again, with the shipped weights or others.

``replay_history FILE [--weight NAME=VALUE ...] [--refit] [--hold-out-each]``, where FILE was written by
``eval_locomo --unit turns --record-ranking FILE`` (:mod:`bench.ranking_replay`).

- With no option: every recorded pool ranked with the shipped weights. Each question's ranking is
  checked against the recorded one and the count is reported; when all agree, the figures are the
  recorded run's.
- ``--weight NAME=VALUE`` (repeatable): those weights changed, the rest as shipped.
- ``--refit``: the weights with the highest recall@10 over all the recorded conversations (coordinate
  ascent over multiples of each shipped weight), then their figures.
- ``--hold-out-each``: for each conversation, the weights refitted on the others, scored on it: what a
  fit would carry over to a conversation it has not seen, against the shipped weights there.

``--weight`` cannot be combined with the other two, which start from the shipped weights.

Output: the per-category and per-conversation tables of ``eval_locomo``, then one JSON line with the
weights used, the overall and per-conversation figures, the count of questions ranked as recorded
(shipped weights only) and, with ``--hold-out-each``, each conversation's recall@10 with the shipped
and the refitted weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.management.commands.eval_locomo import conversation_table, table
from bench.ranking_replay import (
    QuestionFeatures,
    load_recording,
    question_features,
    recall_at_depth,
    refit,
    replay,
    unchanged_rankings,
)
from memory.retrieval.history_search.ranking import FEATURES, WEIGHTS


def parse_weights(pairs: list[str]) -> dict[str, float]:
    weights = dict(WEIGHTS)
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or name not in FEATURES:
            raise CommandError(f"--weight takes NAME=VALUE with NAME one of {', '.join(FEATURES)}; got {pair!r}")
        try:
            weights[name] = float(value)
        except ValueError as error:
            raise CommandError(f"--weight {pair!r}: {value!r} is not a number") from error
    return weights


def changed(weights: dict[str, float]) -> dict[str, float]:
    return {name: value for name, value in weights.items() if value != WEIGHTS[name]}


class Command(BaseCommand):
    help = "Rank a recorded history search run (eval_locomo --record-ranking) again, with other weights."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="A recording written by eval_locomo --record-ranking.")
        parser.add_argument(
            "--weight", action="append", default=[], help="NAME=VALUE: one ranking weight changed (repeatable)."
        )
        parser.add_argument(
            "--refit", action="store_true", help="Search the weights for the highest recall@10, then score them."
        )
        parser.add_argument(
            "--hold-out-each",
            action="store_true",
            help="Refit on all conversations but one and score that one, for each conversation.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["weight"] and (options["refit"] or options["hold_out_each"]):
            raise CommandError(
                "--weight cannot be combined with --refit or --hold-out-each, which start from the shipped weights"
            )
        weights = parse_weights(options["weight"])
        try:
            questions = load_recording(Path(options["file"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CommandError(f"cannot read the recording {options['file']}: {error}") from error
        if not questions:
            raise CommandError(f"{options['file']} records no question")
        conversations = list(dict.fromkeys(q.conversation for q in questions))
        held_out: dict[str, Any] | None = None
        if options["refit"] or options["hold_out_each"]:
            features = question_features(questions)
            if options["hold_out_each"]:
                held_out = self.hold_out_each(features, conversations)
            if options["refit"]:
                weights, _ = refit(features, conversations)
        evaluation, by_conversation = replay(questions, weights)
        self.stdout.write(f"weights changed from the shipped ones: {changed(weights) or 'none'}")
        as_recorded = None
        if not changed(weights):
            as_recorded = unchanged_rankings(questions)
            self.stdout.write(f"questions ranked exactly as recorded: {as_recorded} of {len(questions)}")
        self.stdout.write(table(evaluation))
        self.stdout.write(conversation_table(by_conversation))
        overall = evaluation.overall()
        report: dict[str, Any] = {
            "weights": changed(weights),
            "questions": overall.questions,
            **overall.metrics(),
            "by_conversation": {
                name: {"questions": part.overall().questions} | part.overall().metrics()
                for name, part in by_conversation.items()
            },
        }
        if as_recorded is not None:
            report["ranked_as_recorded"] = as_recorded
        if held_out is not None:
            report["held_out"] = held_out
        self.stdout.write(json.dumps(report))

    def hold_out_each(self, features: list[QuestionFeatures], conversations: list[str]) -> dict[str, Any]:
        held_out: dict[str, Any] = {}
        for name in conversations:
            fitted, _ = refit(features, [c for c in conversations if c != name])
            alone = [q for q in features if q.conversation == name]
            shipped, refitted = recall_at_depth(alone, WEIGHTS), recall_at_depth(alone, fitted)
            self.stdout.write(
                f"{name}: held out, recall@10 {shipped:.3f} with the shipped weights, {refitted:.3f} with the "
                f"weights refitted on the others {changed(fitted) or '(unchanged)'}"
            )
            held_out[name] = {"shipped": round(shipped, 4), "refitted": round(refitted, 4), "weights": changed(fitted)}
        return held_out
