"""The one retrieval service. Prompt assembly, the recall verb, the trace view's previews, the admin
"retrieve as this turn" preview and management commands all call :func:`recall` (directly or through
:mod:`memory.retrieval.moments`) with different budgets; none has its own eligibility or ranking.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from django.conf import settings
from django.utils import timezone

from accounts.models import Actor
from config.database.base import prepared_cursor
from config.errors import Unprocessable
from config.replica import routed_read
from history.models import Session, Turn
from memory.embeddings.search import semantic_providers, shared_query_vectors
from memory.models import BeliefType, RecallMoment, short_id
from memory.retrieval import trace as tracing
from memory.retrieval.arms import ARM_CAP, CandidateProvider, TypedRevisions, sql_arms
from memory.retrieval.candidates import Candidate, conflict_partners
from memory.retrieval.collapse import (
    REFILL_MATCH_RATIO,
    SOURCE_REFILL_MATCH_RATIO,
    collapse,
    mark_near_duplicates,
)
from memory.retrieval.eligibility import EligibleRevisions, Perspective
from memory.retrieval.providers import ArmHit, ProviderCall, run_providers, unranked_by_arm
from memory.retrieval.query import RecallQuery
from memory.retrieval.ranking import POLICY_VERSION, SOURCE_POLICY_TAG, Scorer, explain, passes_relevance
from memory.retrieval.render import MAX_ALLOWANCE, MIN_ALLOWANCE, Labels, pack, render_block
from memory.retrieval.safety import block_reason, model_label
from memory.retrieval.sources import SourceMessages

#: Beliefs about who the person is and how they like to work: two thirds of a snapshot is theirs.
DURABLE_TYPES = (BeliefType.USER_MODEL_ATTR, BeliefType.PREFERENCE, BeliefType.RELATIONSHIP)
PER_SUBJECT_CAP = {"task": 4, "core": 8}
#: What recall may be given as its provider arms: candidate providers, which gather the pool with the
#: SQL arms, and the source arm, which reorders it.
RecallProvider = CandidateProvider | SourceMessages
NEAR_DUPLICATE_WINDOW = 4


@dataclass(frozen=True)
class Budget:
    max_items: int
    max_tokens: int

    def __post_init__(self) -> None:
        if not MIN_ALLOWANCE <= self.max_tokens <= MAX_ALLOWANCE:
            raise Unprocessable(
                f"the memory allowance must lie in [{MIN_ALLOWANCE}, {MAX_ALLOWANCE}] tokens", code="invalid_budget"
            )
        if self.max_items < 1:
            raise Unprocessable("the item cap must be at least 1", code="invalid_budget")


def task_budget(max_tokens: int | None = None, max_items: int = 12) -> Budget:
    return Budget(max_items=max_items, max_tokens=max_tokens or settings.ENGRAM_MEMORY_TOKEN_ALLOWANCE)


@dataclass(frozen=True)
class RecalledItem:
    """One rendered item as the API and tools see it: stable ids, subject, visibility-safe provenance."""

    id: str
    entry_id: int
    revision_id: int
    statement: str | None  # None when withheld by the safety pass
    subject_id: int | None
    subject: str | None
    source_actor_id: int | None
    source: str | None
    #: Every person whose words it rests on (actor id, label), first-named first.
    sources: list[tuple[int, str]]
    belief_type: str
    authority: str
    confidence_band: str
    origin_scope: str
    carried: bool
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    source_message_id: int | None
    score: float
    components: dict[str, float]
    reason: str
    arms: list[str]
    conflicts: list[str]
    blocked: str


@dataclass(frozen=True)
class RecallResult:
    trace_id: int
    rendered: str
    rendered_sha256: str
    items: list[RecalledItem]
    tokens: int
    considered: int
    blocked: int
    withheld_unknown: int
    dropped_for_budget: int
    degradation: str
    corrections: list[str] = field(default_factory=list)


@routed_read
def recall(
    *,
    perspective: Perspective,
    query: RecallQuery,
    budget: Budget,
    moment: str = RecallMoment.TOOL,
    profile: str = "task",
    session: Session | None = None,
    turn: Turn | None = None,
    providers: Sequence[RecallProvider] | None = None,
    delta_after: int | None = None,
    corrections: Sequence[str] = (),
    reserve_durable: bool = False,
    lexical: bool = True,
) -> RecallResult:
    """Select, render and trace the memories this perspective may see that are relevant to ``query``.

    ``providers`` None means the configured provider arms (:func:`recall_providers`: the semantic arm
    when pgvector and a live generation exist, otherwise the degradation says why; and with it the source
    arm unless ``ENGRAM_RECALL_SOURCE_ARM`` is off); ``()`` means the lexical arm alone. A
    :class:`SourceMessages` among them runs after the others, over the pool they gathered.
    ``lexical=False`` leaves the lexical arm out (to measure the semantic arm alone); eligibility and
    ranking are unchanged.
    """
    started = time.perf_counter()
    unavailable = ""
    if providers is None:
        providers, unavailable = recall_providers()
    now = timezone.now()
    # The query's type hints narrow the eligible set; its asked subjects never enter eligibility
    # (``named_subject_ids`` admits another project's local memories; asking about someone does not).
    eligible: EligibleRevisions = TypedRevisions(
        perspective,
        as_of=query.as_of,
        known_at=query.known_at,
        include_provisional=query.include_provisional,
        named_subject_ids=query.named_subject_ids,
        now=now,
        belief_types=query.belief_types,
    )
    # The source arm reorders the pool the other arms gather, so it runs after them.
    sources = [p for p in providers if isinstance(p, SourceMessages)]
    gatherers = [p for p in providers if not isinstance(p, SourceMessages)]
    # The semantic arm and the source arm embed the same text once (a question that names nobody).
    with shared_query_vectors():
        outcome = run_providers(
            []
            if query.empty
            else [
                ProviderCall(p.name, p.in_database, partial(p.candidates, eligible, query, ARM_CAP)) for p in gatherers
            ],
            cap=ARM_CAP,
        )
        arm_started = time.perf_counter()
        arms = sql_arms(
            eligible,
            query,
            delta_after=delta_after,
            boosts_as_arms=profile == "core",
            lexical=lexical,
            provided=outcome.hits,
            indexed=[] if query.empty else [p for p in gatherers if p.name not in outcome.failed],
        )
        sql_latency = round((time.perf_counter() - arm_started) * 1000, 3)
        # The source arm ranks the pool's memories by the messages they were learned from: one bounded
        # statement over the pool, like the SQL arms (no provider deadline of its own). It runs with the
        # semantic arm, so not where that failed or missed its deadline (its degradation says so).
        if outcome.failed:
            sources = []
        source_started = time.perf_counter()
        sourced_hits = [hit for source in sources for hit in source.rank(eligible, query, arms.pool)]
        source_latency = {source.name: round((time.perf_counter() - source_started) * 1000, 3) for source in sources}
    degradation = ",".join(d for d in (unavailable if not query.empty else "", outcome.degradation) if d)
    hits, withheld_unknown = [*arms.hits, *sourced_hits], arms.withheld_unknown
    arm_latency = {"sql": sql_latency, **outcome.latency_ms, **source_latency}
    pool = _with_arm_ranks(arms.pool, hits)
    # The fusion's scale counts the arms with hits, and a provider that ran without any (nothing
    # matched); not one that failed or missed the deadline (the read degrades to what the others found,
    # ranked as if it had not been asked), nor the source arm when it ranked nothing: most memories it
    # cannot rank at all (a memory with no source message the perspective may see), and its silence
    # says nothing about them. The SQL arms count only where they had hits.
    arms_run = {hit.arm for hit in hits} | {p.name for p in gatherers if p.name not in outcome.failed}
    sourced = SourceMessages.name in arms_run
    # A memory written a moment ago has no vector until the worker embeds it: the semantic arm cannot
    # rank it, so it is matched over the arms that can (``Scorer.match``), never read as a poor match.
    unranked = {} if query.empty else unranked_by_arm(arms_run, hits, arms.unindexed)
    scorer = Scorer(
        query=query, profile=profile, project=perspective.project, arms_run=arms_run, now=now, unranked=unranked
    )
    ranked = _rank(pool.values(), scorer)
    relevant = [c for c in ranked if passes_relevance(c, query=query, profile=profile)]
    relevant_ids = {c.revision_id for c in relevant}
    # A conflict is returned whole (spec 001 §6): the unresolved partners of a relevant item come with
    # it. One no arm proposed is read through the eligible set like every candidate, so a partner this
    # perspective may not see is not added; the markers then name only what the pool holds, so it is
    # named nowhere either. A partner below the floor still stands beside its rival.
    partners = conflict_partners(eligible, relevant, pool)
    for partner in partners.values():
        scorer(partner)
        pool[partner.revision_id] = partner
    for candidate in pool.values():
        candidate.conflicts = [p for p in candidate.conflicts if p in pool]
    for candidate in [*ranked, *partners.values()]:
        if candidate.revision_id not in relevant_ids and any(p in relevant_ids for p in candidate.conflicts):
            candidate.paired = True
            relevant.append(candidate)
    relevant.sort(key=lambda c: c.order_key)
    # Only items near the top can be packed, and a penalty only moves an item down: the comparisons
    # (quadratic in the items compared) are needed within a window a few times the item cap.
    window = NEAR_DUPLICATE_WINDOW * budget.max_items
    relevant = _penalise_near_duplicates(relevant[:window], scorer) + relevant[window:]
    uncapped = query.subject_ids[:1] if profile == "core" else ()
    selected = collapse(
        relevant,
        per_subject=PER_SUBJECT_CAP[profile],
        uncapped_subjects=uncapped,
        asked_subjects=asked_subjects(query),
        focus_subjects=focus_subjects(query) if profile == "task" else (),
        room=budget.max_items,
        refill_ratio=SOURCE_REFILL_MATCH_RATIO if sourced else REFILL_MATCH_RATIO,
    )
    if reserve_durable:
        selected = _reserve_durable(selected, budget)
    labels = _labels(selected)
    packed = pack(selected, labels, max_items=budget.max_items, max_tokens=budget.max_tokens, screen=block_reason)
    for candidate in packed.items:
        candidate.reason = explain(candidate)
    policy = POLICY_VERSION + (SOURCE_POLICY_TAG if sourced else "") + "".join(query.policy_tags)
    historical = query.as_of is not None or query.known_at is not None
    as_of = (query.as_of or now).astimezone(UTC)
    rendered = render_block(
        packed.lines, policy=policy, moment=moment, as_of=as_of if historical else None, corrections=corrections
    )
    trace = tracing.record(
        perspective=perspective,
        moment=moment,
        profile=profile,
        policy=policy,
        query_text=query.text,
        query_hints={"subject_ids": list(query.asked_subject_ids), "type_hints": list(query.belief_types)},
        as_of=as_of,
        historical=historical,
        rendered=rendered,
        items=packed.items,
        labels=labels,
        corrections=corrections,
        tokens=packed.tokens,
        considered=len(pool),
        withheld_unknown=withheld_unknown,
        degradation=degradation,
        arms={"latency_ms": arm_latency, "hits": _arm_counts(hits)},
        candidate_ids=sorted(pool),
        dropped_ids=packed.dropped_for_budget,
        session=session,
        turn=turn,
        cost_ms=(time.perf_counter() - started) * 1000,
    )
    return RecallResult(
        trace_id=trace.pk,
        rendered=rendered,
        rendered_sha256=trace.rendered_sha256,
        items=[_recalled_item(c, labels) for c in packed.items],
        tokens=packed.tokens,
        considered=len(pool),
        blocked=sum(1 for c in packed.items if c.blocked),
        withheld_unknown=withheld_unknown,
        dropped_for_budget=len(packed.dropped_for_budget),
        degradation=degradation,
        corrections=list(corrections),
    )


def recall_providers() -> tuple[list[RecallProvider], str]:
    """Memory recall's provider arms: the semantic arm over memories, when it runs, and, with it, where
    ``ENGRAM_RECALL_SOURCE_ARM`` is on (the default), the source arm over the messages' words and
    meaning; and why the semantic arms do not run.

    Without vectors the source arm would rank the messages by their words alone, which on LoCoMo's
    development split ranked worse than recall's own arms (lexical observations recall@10 0.574 -> 0.548,
    docs/quality.md), so the product without pgvector runs without it."""
    revision_providers, message_providers, unavailable = semantic_providers()
    sources = [SourceMessages(message_providers)] if settings.ENGRAM_RECALL_SOURCE_ARM and message_providers else []
    return [*revision_providers, *sources], unavailable


def asked_subjects(query: RecallQuery) -> tuple[int, ...]:
    """Whom the question is about: the people it names, else (a first-person question) the requester."""
    return query.named_subject_ids or query.subject_ids[:1]


def focus_subjects(query: RecallQuery) -> tuple[int, ...]:
    """Whom a question that names people is about: the people it names, and the requester too when
    it is in the first person ("Is my manager Victor?"). () when it names nobody: then nobody is left out."""
    if not query.named_subject_ids:
        return ()
    requester = query.subject_ids[:1] if query.first_person else ()
    return tuple(dict.fromkeys((*requester, *query.named_subject_ids)))


def _with_arm_ranks(pool: dict[int, Candidate], hits: Sequence[ArmHit]) -> dict[int, Candidate]:
    """Attach each hit's best rank (and its score) in its arm to the candidate it names.

    Every hit, a provider's included, was drawn from the eligible set and hydrated in the arms
    statement, so every hit has its candidate.
    """
    for hit in hits:
        candidate = pool[hit.target_id]
        if hit.rank < candidate.arms.get(hit.arm, ARM_CAP + 1):
            candidate.arms[hit.arm] = hit.rank
            candidate.arm_scores[hit.arm] = hit.score
    return pool


def _rank(candidates: Iterable[Candidate], scorer: Scorer) -> list[Candidate]:
    items = list(candidates)
    for candidate in items:
        scorer(candidate)
    items.sort(key=lambda c: c.order_key)
    return items


def _penalise_near_duplicates(relevant: list[Candidate], scorer: Scorer) -> list[Candidate]:
    """The near-duplicate penalty, applied among the items that passed relevance (others never render).
    Only the penalised items' scores change, so only they are scored again."""
    mark_near_duplicates(relevant)
    penalised = [c for c in relevant if c.near_duplicate]
    if not penalised:
        return relevant
    for candidate in penalised:
        scorer(candidate)
    return sorted(relevant, key=lambda c: c.order_key)


def _reserve_durable(selected: list[Candidate], budget: Budget) -> list[Candidate]:
    """Two thirds of the item cap for durable user-model beliefs, the rest for the opening goal's
    priming set (items relevant to it, or standing instructions). Unused priming slots stay empty."""
    durable_slots = (budget.max_items * 2) // 3
    durable = [c for c in selected if c.belief_type in DURABLE_TYPES][:durable_slots]
    priming = [
        c for c in selected if c.belief_type not in DURABLE_TYPES and (round(c.match, 4) > 0 or "always_on" in c.arms)
    ]
    priming.sort(key=lambda c: (-round(c.match, 4), c.order_key))
    chosen = durable + priming[: budget.max_items - len(durable)]
    # A conflict stays whole: the partner of a chosen item comes with it (``pack`` fits both or neither).
    chosen_ids = {c.revision_id for c in chosen}
    partners = [c for c in selected if c.revision_id not in chosen_ids and any(p in chosen_ids for p in c.conflicts)]
    return sorted(chosen + partners, key=lambda c: c.order_key)


LABELS_SQL = f"SELECT id, display_name, external_id FROM {Actor._meta.db_table} WHERE id = ANY(%s::bigint[])"


def _labels(items: Sequence[Candidate]) -> Labels:
    actor_ids = {i for c in items for i in (c.subject_id, *c.source_actor_ids) if i is not None}
    with prepared_cursor() as cursor:
        # Fixed text: the ORM would spend more than the round trip compiling it for every recall.
        cursor.execute(LABELS_SQL, [sorted(actor_ids)])
        rows = cursor.fetchall()
    return Labels({pk: model_label(display_name, external_id) for pk, display_name, external_id in rows})


def _arm_counts(hits: Sequence[ArmHit]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for hit in hits:
        counts[hit.arm] = counts.get(hit.arm, 0) + 1
    return counts


def _recalled_item(candidate: Candidate, labels: Labels) -> RecalledItem:
    blocked = bool(candidate.blocked)
    return RecalledItem(
        id=short_id(candidate.revision_id),
        entry_id=candidate.entry_id,
        revision_id=candidate.revision_id,
        statement=None if blocked else candidate.body,
        subject_id=candidate.subject_id,
        subject=labels.of(candidate.subject_id),
        source_actor_id=candidate.source_actor_id,
        source=labels.of(candidate.source_actor_id),
        sources=[(actor_id, labels.of(actor_id) or "") for actor_id in candidate.source_actor_ids],
        belief_type=candidate.belief_type,
        authority=candidate.authority,
        confidence_band=candidate.band,
        origin_scope=candidate.origin_scope,
        carried=candidate.carried,
        valid_from=candidate.valid_from,
        valid_to=candidate.valid_to,
        recorded_at=candidate.recorded_at,
        source_message_id=candidate.source_message_id,
        score=candidate.score,
        components=candidate.components,
        reason=candidate.reason,
        arms=sorted(candidate.arms),
        conflicts=[short_id(p) for p in candidate.conflicts],
        blocked=candidate.blocked,
    )
