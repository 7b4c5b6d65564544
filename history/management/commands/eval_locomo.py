"""Measure history search on a LoCoMo-format file: turn retrieval, scored as the LoCoMo paper does.

``eval_locomo --file PATH [--mode lexical] [--unit turns] [--limit 20]``. For each conversation in
the file, a throwaway workspace (its own tenant, agent and ``locomo:<sample_id>`` connector) receives
the conversation's turns through the same import the ``import_locomo`` command uses: one inbound
message per turn, ``external_id`` = ``dia_id``, in a conversation whose audience is ``members`` with
both speakers, so both may read it. Every question is then asked through ``search_history`` from
that conversation, requested by speaker A (``--mode lexical``: no semantic provider), and the hits
(not their neighbours), in hit order, are mapped back to turn ids and scored against the question's
normalised evidence with :mod:`history.evaluation`.

The whole evaluation runs in one transaction that is rolled back at the end: the database is left
exactly as it was, append-only rows (messages, evidence, search audit events) included.

Output: the normalisation summary, a per-category table and, as the last line, one JSON object with
the overall figures (categories 1-4), ``by_category`` (1-5) and the number of skipped questions
(evidence empty after normalisation).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from tqdm import tqdm

from accounts.models import Actor, RuntimeAgent, Tenant
from history.evaluation import CATEGORY_NAMES, OVERALL_CATEGORIES, Evaluation, Summary
from history.locomo import LocomoConversation, load_locomo
from history.management.commands.import_locomo import import_conversation
from history.models import Conversation, Message
from history.search import MAX_LIMIT, HistoryQuery, search_history
from memory.retrieval.eligibility import perspective_for_conversation

MODES = ("lexical",)
ANALYZED_TABLES = (
    "history_conversation",
    "history_message",
    "history_messagesearchdocument",
    "history_messagesourceevidence",
)
UNITS = ("turns",)


class Command(BaseCommand):
    help = "Score history search on a LoCoMo-format file (recall@5/@10, MRR, nDCG@10). Leaves the database unchanged."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", required=True, help="Path to a JSON file in LoCoMo's schema.")
        parser.add_argument("--mode", default="lexical", help="Retrieval mode; only 'lexical' exists today.")
        parser.add_argument("--unit", default="turns", help="What is ranked; only 'turns' exists today.")
        parser.add_argument("--limit", type=int, default=MAX_LIMIT, help=f"Hits per question (1-{MAX_LIMIT}).")

    def handle(self, *args: Any, **options: Any) -> None:
        mode, unit, limit = options["mode"], options["unit"], options["limit"]
        if mode not in MODES:
            raise CommandError(f"--mode {mode} is not available: history search is lexical only for now")
        if unit not in UNITS:
            raise CommandError(f"--unit {unit} is not available: only turns are ranked for now")
        if not 1 <= limit <= MAX_LIMIT:
            raise CommandError(f"--limit must lie in [1, {MAX_LIMIT}]")
        try:
            parsed = load_locomo(options["file"])
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot read {options['file']}: {error}") from error
        if not parsed.conversations:
            raise CommandError(f"{options['file']} holds no conversations")

        started = time.monotonic()
        evaluation = Evaluation()
        total = sum(len(c.questions) for c in parsed.conversations)
        run = uuid.uuid4().hex[:12]
        with (
            tqdm(total=total, unit="question", desc="eval_locomo", disable=options["verbosity"] < 1) as progress,
            transaction.atomic(),
        ):
            for position, conversation in enumerate(parsed.conversations):
                evaluate_conversation(
                    conversation, evaluation, workspace=f"eval-locomo-{run}-{position}", limit=limit, progress=progress
                )
            # Everything above was only needed to ask the questions.
            transaction.set_rollback(True)
        elapsed = time.monotonic() - started

        self.stdout.write(f"Normalised {parsed.report.summary()}.")
        self.stdout.write(
            f"{len(parsed.conversations)} conversation(s), {total} questions, {evaluation.skipped_total} skipped "
            f"(no evidence after normalisation), {elapsed:.1f}s; the database is unchanged (rolled back)."
        )
        self.stdout.write(table(evaluation))
        overall = evaluation.overall()
        report: dict[str, Any] = {
            "mode": mode,
            "unit": unit,
            "questions": overall.questions,
            **overall.metrics(),
            "by_category": {
                str(category): {"questions": summary.questions, "skipped": evaluation.skipped.get(category, 0)}
                | summary.metrics()
                for category, summary in evaluation.by_category().items()
            },
            "skipped": evaluation.skipped_total,
        }
        self.stdout.write(json.dumps(report))


def evaluate_conversation(
    conversation: LocomoConversation,
    evaluation: Evaluation,
    *,
    workspace: str,
    limit: int,
    progress: tqdm[Any] | None = None,
) -> None:
    """Import one conversation into a workspace of its own and score each of its questions."""
    tenant = Tenant.objects.create(slug=workspace, name=f"LoCoMo evaluation {conversation.sample_id}")
    agent = RuntimeAgent.objects.create(tenant=tenant, name="locomo-eval")
    import_conversation(agent=agent, tenant=tenant, conversation=conversation)
    # The planner's statistics do not see rows this transaction just wrote: tables it believes empty
    # get nested-loop plans that rescan the sidecar per message (hundreds of ms per search).
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {', '.join(ANALYZED_TABLES)}")
    thread = Conversation.objects.filter(agent=agent, external_thread_id=conversation.sample_id).first()
    if thread is None:
        # No turns: nothing can be found, and every question's evidence normalised to nothing.
        for question in conversation.questions:
            evaluation.add(category=question.category, ranked=[], evidence=question.evidence)
            if progress is not None:
                progress.update(1)
        return
    dia_ids = dict(Message.objects.filter(conversation=thread).values_list("pk", "external_id"))
    requester = Actor.objects.filter(connector__agent=agent, external_id=conversation.speaker_a).first()
    perspective = perspective_for_conversation(thread, requester_id=requester.pk if requester else None)
    for question in conversation.questions:
        if question.evidence:
            result = search_history(
                perspective=perspective, query=HistoryQuery(text=question.question, limit=limit), providers=()
            )
            ranked = [str(dia_ids[hit.message.message_id]) for hit in result.hits]
        else:
            ranked = []  # skipped either way; no need to search
        evaluation.add(category=question.category, ranked=ranked, evidence=question.evidence)
        if progress is not None:
            progress.update(1)


def table(evaluation: Evaluation) -> str:
    """The per-category figures, then the overall row, as fixed-width text."""
    header = f"{'category':<16}{'questions':>10}{'skipped':>9}{'R@5':>8}{'R@10':>8}{'MRR':>8}{'nDCG@10':>9}"

    def row(label: str, summary: Summary, skipped: int) -> str:
        return (
            f"{label:<16}{summary.questions:>10}{skipped:>9}{summary.recall_at_5:>8.3f}{summary.recall_at_10:>8.3f}"
            f"{summary.mrr:>8.3f}{summary.ndcg_at_10:>9.3f}"
        )

    lines = [header]
    for category, summary in evaluation.by_category().items():
        name = f"{category} {CATEGORY_NAMES.get(category, '?')}"
        lines.append(row(name, summary, evaluation.skipped.get(category, 0)))
    overall_skipped = sum(n for c, n in evaluation.skipped.items() if c in OVERALL_CATEGORIES)
    lines.append(row("overall 1-4", evaluation.overall(), overall_skipped))
    return "\n".join(lines)
