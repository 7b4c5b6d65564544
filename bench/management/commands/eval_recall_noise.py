"""Measure memory recall's noise ratio next to its recall, on a LoCoMo-format file.

``eval_recall_noise --file PATH [--mode lexical|semantic|hybrid] [--items 20] [--per-question OUT.jsonl]``.

Spec 001's tracked metric: *noise ratio = retrieved-and-irrelevant over retrieved*, "the counterweight to
recall; both are reported, never recall alone". Here "retrieved" is what the recall service returned for
the question (the items that would reach the prompt, at most ``--items``), and an item is relevant when
its observation's source turn is one of the question's evidence turns. The ratio is pooled over every
returned item of categories 1-4 (each item counts once); ``noise@5`` and ``noise@10`` pool the first 5
and 10 items only, so a change in how full the budget is can be told apart from a change in what ranks
first.

Each conversation is imported as ``import_locomo`` does (one inbound message per turn, read by both
speakers), each observation is remembered about its speaker from its source turn, and every question is
asked by speaker A through ``form_query`` and the one ``recall`` service, exactly as
``eval_locomo --unit observations`` asks it. Recall figures (recall@5/@10, MRR, nDCG@10) are reported
overall, per category and per conversation, from the same run.

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
from django.db import connection, transaction

from accounts.models import Actor, RuntimeAgent, Tenant
from bench.evaluation import CATEGORY_NAMES, OVERALL_CATEGORIES, Evaluation, deduplicated
from bench.locomo import LocomoConversation, load_locomo
from bench.management.commands.import_locomo import import_conversation
from history.models import Conversation, Message
from memory.embeddings.index import drain_outbox, semantic_enabled, vectors_stored
from memory.embeddings.search import semantic_providers
from memory.models import BeliefType
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import form_query
from memory.retrieval.render import MAX_ALLOWANCE
from memory.retrieval.service import Budget, recall
from memory.services import Belief, Provenance, memory_remember

MODES = ("lexical", "semantic", "hybrid")
DEFAULT_ITEMS = 20
ANALYZED_TABLES = (
    "history_conversation",
    "history_message",
    "history_messagesearchdocument",
    "memory_memoryentry",
    "memory_memoryrevision",
    "memory_memoryevidence",
    "memory_revisionsearchdocument",
)
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
        figures = {
            "noise_ratio": round(self.irrelevant / self.returned, 4) if self.returned else 0.0,
            "returned_per_question": round(self.returned / self.questions, 2) if self.questions else 0.0,
        }
        for k, (returned, irrelevant) in self.at.items():
            figures[f"noise@{k}"] = round(irrelevant / returned, 4) if returned else 0.0
        return figures


class Command(BaseCommand):
    help = "Noise ratio (retrieved-and-irrelevant over retrieved) and recall of memory recall on a LoCoMo file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", required=True, help="Path to a JSON file in LoCoMo's schema.")
        parser.add_argument("--mode", default="hybrid", choices=MODES, help="Arms: lexical, semantic or both.")
        parser.add_argument("--items", type=int, default=DEFAULT_ITEMS, help="Items per recall (the budget's cap).")
        parser.add_argument("--per-question", default="", help="Write one JSON line per question to this path.")

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
        overall, noise = Evaluation(), Noise()
        per_conversation: dict[str, dict[str, Any]] = {}
        out: IO[str] | None = open(options["per_question"], "w") if options["per_question"] else None  # noqa: SIM115
        try:
            with transaction.atomic():
                for position, conversation in enumerate(parsed.conversations):
                    evaluation, conversation_noise = Evaluation(), Noise()
                    for category, question, ranked in ask_conversation(
                        conversation, workspace=f"eval-noise-{run}-{position}", mode=mode, items=items
                    ):
                        for target in (overall, evaluation):
                            target.add(category=category, ranked=ranked, evidence=question)
                        if category in OVERALL_CATEGORIES and question:
                            noise.add(ranked, question)
                            conversation_noise.add(ranked, question)
                        if out is not None:
                            line = {"conversation": conversation.sample_id, "category": category}
                            out.write(json.dumps(line | {"evidence": list(question), "ranked": ranked}) + "\n")
                    summary = evaluation.overall().metrics() | conversation_noise.report()
                    per_conversation[conversation.sample_id] = summary
                transaction.set_rollback(True)  # everything above was only needed to ask the questions
        finally:
            if out is not None:
                out.close()
        report: dict[str, Any] = {
            "mode": mode,
            "items": items,
            "questions": overall.overall().questions,
            **overall.overall().metrics(),
            **noise.report(),
            "by_category": {
                f"{category} {CATEGORY_NAMES.get(category, '?')}": summary.metrics()
                for category, summary in overall.by_category().items()
            },
            "by_conversation": per_conversation,
            "seconds": round(time.monotonic() - started, 1),
        }
        self.stdout.write(json.dumps(report))


def ask_conversation(
    conversation: LocomoConversation, *, workspace: str, mode: str, items: int
) -> list[tuple[int, tuple[str, ...], list[str]]]:
    """Import one conversation and its observations into a workspace of its own, ask every question
    with evidence, and return (category, evidence, ranked source turns) for each."""
    tenant = Tenant.objects.create(slug=workspace, name=f"LoCoMo noise {conversation.sample_id}")
    agent = RuntimeAgent.objects.create(tenant=tenant, name="locomo-noise")
    import_conversation(agent=agent, tenant=tenant, conversation=conversation)
    thread = Conversation.objects.filter(agent=agent, external_thread_id=conversation.sample_id).first()
    if thread is None:
        return [(q.category, q.evidence, []) for q in conversation.questions]
    messages = dict(Message.objects.filter(conversation=thread).values_list("external_id", "pk"))
    actors = list(Actor.objects.filter(connector__agent=agent))
    by_name = {actor.external_id: actor for actor in actors}
    units: dict[int, str] = {}
    for observation in conversation.observations:
        speaker, source = by_name.get(observation.speaker), messages.get(observation.dia_id)
        if speaker is None or source is None:
            continue
        written = memory_remember(
            agent=agent,
            belief=Belief(body=observation.fact, belief_type=BeliefType.USER_MODEL_ATTR, subject_id=speaker.pk),
            provenance=Provenance(source_message_id=source),
        )
        units[written.revision.pk] = observation.dia_id
    if mode != "lexical":
        while drain_outbox():
            pass
    with connection.cursor() as cursor:
        tables = ANALYZED_TABLES + (("memory_revisionembedding",) if vectors_stored() else ())
        cursor.execute(f"ANALYZE {', '.join(tables)}")
    requester = by_name.get(conversation.speaker_a)
    perspective = perspective_for_conversation(thread, requester_id=requester.pk if requester else None)
    providers = semantic_providers()[0] if mode != "lexical" else []
    asked: list[tuple[int, tuple[str, ...], list[str]]] = []
    for question in conversation.questions:
        ranked: list[str] = []
        if question.evidence:
            recalled = recall(
                perspective=perspective,
                query=form_query(message=question.question, requester_id=perspective.requester_id, known_actors=actors),
                budget=Budget(max_items=items, max_tokens=MAX_ALLOWANCE),
                providers=providers,
                lexical=mode != "semantic",
            )
            # Two observations of one turn are one unit, as the recall metrics count them.
            ranked = deduplicated(units[item.revision_id] for item in recalled.items if item.revision_id in units)
        asked.append((question.category, question.evidence, ranked))
    return asked
