"""Measure retrieval on a LoCoMo-format file, scored as the LoCoMo paper does.

``eval_locomo --file PATH [--mode lexical|semantic|hybrid] [--unit turns|observations] [--limit 20]
[--embedding-cache FILE | --embedding-vectors FILE] [--embedding-texts FILE] [--record-ranking FILE]``.
For each conversation in the file, a throwaway workspace (its own tenant, agent and
``locomo:<sample_id>`` connector) receives the conversation's turns through the same import the
``import_locomo`` command uses: one inbound message per turn, ``external_id`` = ``dia_id``, in a
conversation whose audience is ``members`` with both speakers, so both may read it. Every question is
then asked from that conversation, requested by speaker A.

- ``--unit turns``: the question goes through ``search_history``; the hits (not their neighbours), in
  hit order, are the ranked turns.
- ``--unit observations``: each observation is first stored as a memory through ``memory_remember``
  (subject: its speaker; source message: its source turn, so its audience is that turn's), and the
  question goes through the memory ``recall`` service (``form_query``, at most 20 items, the largest
  token allowance); each item counts as its observation's source turn, in item order.

Modes: ``lexical`` runs the lexical arm only, ``semantic`` the semantic arm only, ``hybrid`` both (what
the product does). For observations, memory recall's source arm (the pool ranked by the words and
meaning of the messages its memories were learned from) runs as the product runs it: in ``hybrid``
mode, where ``ENGRAM_RECALL_SOURCE_ARM`` is on (the default); ``lexical`` mode (the product without
pgvector) and ``semantic`` mode leave it out. For the
last two modes the imported text is embedded first, by draining the index outbox inside the
evaluation's transaction; that time is reported apart. ``--embedding-cache`` reuses
the vectors of earlier runs for texts already embedded (:mod:`bench.embedding_cache`): the outbox, the
stored vectors and the search run exactly as without it. ``--record-ranking`` (turns) writes what
history search's ranking was given for each question, for ``replay_history`` to score again with other
weights (:mod:`bench.ranking_replay`). The ranked turns are scored
against the question's normalised evidence with :mod:`bench.evaluation`.

The whole evaluation runs in one transaction that is rolled back at the end: the database is left
exactly as it was, append-only rows (messages, memories, evidence, audit events, vectors) included.

Output: the normalisation summary, a per-category table, a per-conversation table (categories 1-4:
the spread shows whether a change helps everywhere or in one conversation only) and, as the last line,
one JSON object with the overall figures (categories 1-4), ``by_category`` (1-5), ``by_conversation``
(1-4), ``recall_curve`` (recall@1..20 overall and per category, which ``plot_locomo`` draws), the
number of skipped questions (evidence empty after normalisation), and timings (``embedding_seconds``;
per-question latency percentiles).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from tqdm import tqdm

from accounts.models import Actor, RuntimeAgent, Tenant
from bench.embedding_cache import add_embedding_arguments, embedding_options
from bench.evaluation import CATEGORY_NAMES, OVERALL_CATEGORIES, Evaluation, Summary
from bench.harness.corpus import EMBEDDING_TABLES, IMPORTED_TABLES, settle
from bench.locomo import LocomoConversation, load_locomo
from bench.management.commands.import_locomo import import_conversation
from bench.ranking_replay import RankingRecorder, recording_rankings
from history.models import Conversation, Message
from memory.embeddings.index import drain_outbox, semantic_enabled, vectors_stored
from memory.embeddings.search import semantic_providers
from memory.models import BeliefType, RecallTrace
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import MAX_LIMIT, HistoryQuery, search_history
from memory.retrieval.query import form_query
from memory.retrieval.render import MAX_ALLOWANCE
from memory.retrieval.service import Budget, RecallProvider, recall
from memory.retrieval.sources import SourceMessages
from memory.services import Belief, Provenance, memory_remember

MODES = ("lexical", "semantic", "hybrid")
UNITS = ("turns", "observations")
#: Memory recall returns at most this many items per question (``--limit`` applies to turns).
OBSERVATION_ITEMS = 20


@dataclass
class Timings:
    embedding_seconds: float = 0.0
    question_ms: list[float] = field(default_factory=list)

    def percentile(self, fraction: float) -> float:
        if not self.question_ms:
            return 0.0
        ordered = sorted(self.question_ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Command(BaseCommand):
    help = "Score retrieval on a LoCoMo-format file (recall@5/@10, MRR, nDCG@10). Leaves the database unchanged."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", required=True, help="Path to a JSON file in LoCoMo's schema.")
        parser.add_argument(
            "--mode", default="lexical", choices=MODES, help="Arms: lexical only, semantic only, or both (hybrid)."
        )
        parser.add_argument(
            "--unit",
            default="turns",
            choices=UNITS,
            help="turns: history search over the transcript; observations: memory recall over stored observations.",
        )
        parser.add_argument("--limit", type=int, default=MAX_LIMIT, help=f"Hits per question (1-{MAX_LIMIT}).")
        add_embedding_arguments(parser)
        parser.add_argument(
            "--record-ranking",
            default=None,
            help="Write what history search's ranking was given for each question, one JSON line each, "
            "for replay_history (turns only).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        mode, unit, limit = options["mode"], options["unit"], options["limit"]
        if mode not in MODES:
            raise CommandError(f"--mode must be one of {', '.join(MODES)}")
        if unit not in UNITS:
            raise CommandError(f"--unit must be one of {', '.join(UNITS)}")
        if not 1 <= limit <= MAX_LIMIT:
            raise CommandError(f"--limit must lie in [1, {MAX_LIMIT}]")
        if options["record_ranking"] and unit != "turns":
            raise CommandError("--record-ranking records history search's ranking: it needs --unit turns")
        if options["record_ranking"] and not Path(options["record_ranking"]).resolve().parent.is_dir():
            raise CommandError(f"--record-ranking: the folder of {options['record_ranking']} does not exist")
        if mode != "lexical" and not semantic_enabled():
            raise CommandError(f"--mode {mode} needs the semantic arm (pgvector, ENGRAM_SEMANTIC not 'off')")
        try:
            parsed = load_locomo(options["file"])
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot read {options['file']}: {error}") from error
        if not parsed.conversations:
            raise CommandError(f"{options['file']} holds no conversations")

        started = time.monotonic()
        evaluation = Evaluation()
        by_conversation: dict[str, Evaluation] = {}
        timings = Timings()
        total = sum(len(c.questions) for c in parsed.conversations)
        run = uuid.uuid4().hex[:12]
        recording = recording_rankings(Path(options["record_ranking"])) if options["record_ranking"] else nullcontext()
        # disable=None: the bar shows on a terminal and stays out of redirected output.
        with (
            embedding_options(options) as vectors_from,
            recording as recorder,
            tqdm(
                total=total, unit="question", desc="eval_locomo", disable=True if options["verbosity"] < 1 else None
            ) as progress,
            transaction.atomic(),
        ):
            for position, conversation in enumerate(parsed.conversations):
                part = by_conversation.setdefault(conversation.sample_id, Evaluation())
                evaluate_conversation(
                    conversation,
                    part,
                    workspace=f"eval-locomo-{run}-{position}",
                    limit=limit,
                    mode=mode,
                    unit=unit,
                    timings=timings,
                    progress=progress,
                    recorder=recorder,
                )
            for part in by_conversation.values():
                evaluation.absorb(part)
            # Everything above was only needed to ask the questions.
            transaction.set_rollback(True)
        elapsed = time.monotonic() - started

        self.stdout.write(f"Normalised {parsed.report.summary()}.")
        self.stdout.write(
            f"{len(parsed.conversations)} conversation(s), {total} questions, {evaluation.skipped_total} skipped "
            f"(no evidence after normalisation), {elapsed:.1f}s (embedding {timings.embedding_seconds:.1f}s); "
            "the database is unchanged (rolled back)."
        )
        self.stdout.write(table(evaluation))
        self.stdout.write(conversation_table(by_conversation))
        overall = evaluation.overall()
        report: dict[str, Any] = {
            "mode": mode,
            **vectors_from,
            "unit": unit,
            "questions": overall.questions,
            **overall.metrics(),
            "by_category": {
                str(category): {"questions": summary.questions, "skipped": evaluation.skipped.get(category, 0)}
                | summary.metrics()
                for category, summary in evaluation.by_category().items()
            },
            "by_conversation": {
                name: {"questions": part.overall().questions} | part.overall().metrics()
                for name, part in by_conversation.items()
            },
            "recall_curve": {"overall": [round(r, 4) for r in evaluation.recall_curve()]}
            | {
                str(category): [round(r, 4) for r in evaluation.recall_curve((category,))]
                for category in evaluation.by_category()
            },
            "skipped": evaluation.skipped_total,
            "embedding_seconds": round(timings.embedding_seconds, 2),
            "question_ms_p50": round(statistics.median(timings.question_ms), 2) if timings.question_ms else 0.0,
            "question_ms_p95": round(timings.percentile(0.95), 2),
        }
        self.stdout.write(json.dumps(report))


def evaluate_conversation(
    conversation: LocomoConversation,
    evaluation: Evaluation,
    *,
    workspace: str,
    limit: int,
    mode: str = "lexical",
    unit: str = "turns",
    timings: Timings | None = None,
    progress: tqdm[Any] | None = None,
    items: int = OBSERVATION_ITEMS,
    on_ranked: Callable[[int, tuple[str, ...], list[str]], None] | None = None,
    on_considered: Callable[[int, tuple[str, ...], set[str], set[str]], None] | None = None,
    recorder: RankingRecorder | None = None,
) -> None:
    """Import one conversation into a workspace of its own and score each of its questions.

    ``items`` is memory recall's item budget (observations); ``on_ranked`` sees each question's
    category, evidence and ranked units as they are scored (``eval_recall_noise`` counts noise there);
    ``on_considered`` sees, for each question recall was asked, its category, its evidence, the units
    any stored observation comes from and the units of every candidate the recall considered (read from
    its trace: the pool ranking chose from);
    ``recorder`` records each question with what its history search ranked (turns).
    """
    timings = timings if timings is not None else Timings()
    tenant = Tenant.objects.create(slug=workspace, name=f"LoCoMo evaluation {conversation.sample_id}")
    agent = RuntimeAgent.objects.create(tenant=tenant, name="locomo-eval")
    import_conversation(agent=agent, tenant=tenant, conversation=conversation)
    thread = Conversation.objects.filter(agent=agent, external_thread_id=conversation.sample_id).first()
    if thread is None:
        # No turns: nothing can be found, and every question's evidence normalised to nothing.
        for question in conversation.questions:
            evaluation.add(category=question.category, ranked=[], evidence=question.evidence)
            if recorder is not None:
                recorder.question(
                    conversation=conversation.sample_id,
                    category=question.category,
                    evidence=question.evidence,
                    units={},
                    ranked=[],
                )
            if on_ranked is not None:
                on_ranked(question.category, question.evidence, [])
            if progress is not None:
                progress.update(1)
        return
    messages = {
        str(dia_id): message_id
        for dia_id, message_id in Message.objects.filter(conversation=thread).values_list("external_id", "pk")
    }
    actors = list(Actor.objects.filter(connector__agent=agent))
    by_name = {actor.external_id: actor for actor in actors}
    units = {message_id: dia_id for dia_id, message_id in messages.items()}
    if unit == "observations":
        units = remember_observations(agent, conversation, messages, by_name)
    observed = set(units.values())
    if mode != "lexical":
        started = time.monotonic()
        while drain_outbox():
            pass
        timings.embedding_seconds += time.monotonic() - started
    # The planner's statistics do not see rows this transaction just wrote (tables it believes empty
    # get nested-loop plans that rescan the sidecar per message, hundreds of ms per search), nor are
    # those rows out of the search indexes' pending lists: settle as a running system would be.
    settle(IMPORTED_TABLES + (EMBEDDING_TABLES if vectors_stored() else ()))
    requester = by_name.get(conversation.speaker_a)
    perspective = perspective_for_conversation(thread, requester_id=requester.pk if requester else None)
    revision_providers, message_providers, _ = semantic_providers() if mode != "lexical" else ([], [], "")
    # Memory recall's provider arms as the product runs them (``recall_providers``): the semantic arm,
    # and with it the source arm where ENGRAM_RECALL_SOURCE_ARM is on; semantic mode measures the
    # semantic arm alone.
    sources = settings.ENGRAM_RECALL_SOURCE_ARM and mode == "hybrid" and bool(message_providers)
    recall_arms: list[RecallProvider] = [
        *revision_providers,
        *([SourceMessages(message_providers)] if sources else []),
    ]
    for question in conversation.questions:
        ranked: list[str] = []  # a question without evidence is skipped either way: no need to ask it
        if question.evidence:
            started = time.perf_counter()
            if unit == "turns":
                result = search_history(
                    perspective=perspective,
                    query=HistoryQuery(text=question.question, limit=limit),
                    providers=message_providers,
                    lexical=mode != "semantic",
                )
                ranked = [units[hit.message.message_id] for hit in result.hits]
            else:
                recalled = recall(
                    perspective=perspective,
                    query=form_query(
                        message=question.question,
                        requester_id=perspective.requester_id,
                        known_actors=actors,
                    ),
                    budget=Budget(max_items=items, max_tokens=MAX_ALLOWANCE),
                    providers=recall_arms,
                    lexical=mode != "semantic",
                )
                ranked = [units[item.revision_id] for item in recalled.items if item.revision_id in units]
            timings.question_ms.append((time.perf_counter() - started) * 1000)
            if on_considered is not None and unit == "observations":
                candidate_ids = RecallTrace.objects.get(pk=recalled.trace_id).candidate_ids or []
                considered = {units[pk] for pk in candidate_ids if pk in units}
                on_considered(question.category, question.evidence, observed, considered)
        evaluation.add(category=question.category, ranked=ranked, evidence=question.evidence)
        if recorder is not None:
            recorder.question(
                conversation=conversation.sample_id,
                category=question.category,
                evidence=question.evidence,
                units=units,
                ranked=ranked,
            )
        if on_ranked is not None:
            on_ranked(question.category, question.evidence, ranked)
        if progress is not None:
            progress.update(1)


def remember_observations(
    agent: RuntimeAgent, conversation: LocomoConversation, messages: dict[str, int], actors: dict[str, Actor]
) -> dict[int, str]:
    """Store each observation as a memory about its speaker, sourced from its first source turn.

    Returns the source turn id of each stored revision. An observation whose speaker is no actor of
    the conversation has no subject to be about and is not stored (LoCoMo's speakers always are).
    """
    units: dict[int, str] = {}
    for observation in conversation.observations:
        speaker = actors.get(observation.speaker)
        source = messages.get(observation.dia_id)
        if speaker is None or source is None:
            continue
        written = memory_remember(
            agent=agent,
            belief=Belief(body=observation.fact, belief_type=BeliefType.USER_MODEL_ATTR, subject_id=speaker.pk),
            provenance=Provenance(source_message_id=source),
        )
        units[written.revision.pk] = observation.dia_id
    return units


HEADER = f"{'questions':>10}{'skipped':>9}{'R@5':>8}{'R@10':>8}{'MRR':>8}{'nDCG@10':>9}"


def row(label: str, summary: Summary, skipped: int) -> str:
    return (
        f"{label:<16}{summary.questions:>10}{skipped:>9}{summary.recall_at_5:>8.3f}{summary.recall_at_10:>8.3f}"
        f"{summary.mrr:>8.3f}{summary.ndcg_at_10:>9.3f}"
    )


def conversation_table(by_conversation: dict[str, Evaluation]) -> str:
    """Categories 1-4 of each conversation, then the spread (lowest and highest) of each figure."""
    lines = [f"{'conversation':<16}{HEADER}"]
    summaries = {name: part.overall() for name, part in by_conversation.items()}
    for name, summary in summaries.items():
        skipped = sum(n for c, n in by_conversation[name].skipped.items() if c in OVERALL_CATEGORIES)
        lines.append(row(name, summary, skipped))
    if summaries:
        fields = {"R@5": "recall_at_5", "R@10": "recall_at_10", "MRR": "mrr", "nDCG@10": "ndcg_at_10"}
        spread = (
            f"{label} {min(getattr(s, f) for s in summaries.values()):.3f}-"
            f"{max(getattr(s, f) for s in summaries.values()):.3f}"
            for label, f in fields.items()
        )
        lines.append("spread (lowest-highest): " + ", ".join(spread))
    return "\n".join(lines)


def table(evaluation: Evaluation) -> str:
    """The per-category figures, then the overall row, as fixed-width text."""
    lines = [f"{'category':<16}{HEADER}"]
    for category, summary in evaluation.by_category().items():
        name = f"{category} {CATEGORY_NAMES.get(category, '?')}"
        lines.append(row(name, summary, evaluation.skipped.get(category, 0)))
    overall_skipped = sum(n for c, n in evaluation.skipped.items() if c in OVERALL_CATEGORIES)
    lines.append(row("overall 1-4", evaluation.overall(), overall_skipped))
    return "\n".join(lines)
