"""Reads for the end user's surface, "what did you know when you said that".

A logged-in user *could read* a conversation when one of their linked actors (``UserActor``) is a
reader of its ``members`` or ``external`` audience, is an actor on the connector of its
``workspace`` audience, or the audience is ``public`` (within a tenant the user has an actor in:
one tenant's public threads are not another tenant's users' turns). Turns, traces and messages of
any other conversation answer :class:`NotFound`, exactly like missing ones.

Inside a readable turn, a traced item is shown only if it passes the stricter of two ceilings:

- the recall's own ceiling, the trace's destination audience (true when traced; re-checked so that a
  grant revoked or an identity link undone since then hides the item rather than leaks it), and
- the viewer's ceiling: a direct conversation with the viewer, ``members(namespace, [actor])``, for
  each of the viewer's actors on the agent's connectors; the item must reach at least one of them.

Both are decided in SQL with the disclosure fragment of :mod:`memory.retrieval.eligibility`
(``engram_audience_allows`` or a live sharing grant; unknown and mixed provenance reach nobody),
never re-implemented here. A grant admits an item only for the conversation it was approved for, so
both ceilings are judged for the trace's own conversation: a granted item shows on that conversation's
turns, to a viewer the grant's audience reaches, and nowhere else (an operator preview, which has no
conversation, admits nothing by grant). Items withheld by the safety scan are never shown. Whatever is not shown
is counted, never described: the page says how many further items were considered and how many
the safety scan withheld, never their ids or text, and nothing of scores, ranks or candidates.

The past messages the turn's history searches put in front of the agent are read from their audit
rows (``ConversationSearchEvent.returned_message_ids``), never searched again, and shown under the
same two ceilings, judged by :class:`memory.retrieval.eligibility.EligibleMessages` (evidence, audience,
lineage) for the turn's destination and for the viewer's, and only from conversations the viewer could
read; lines the safety scan withheld from the agent are counted, never shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.db.models import Q, QuerySet

from accounts.models import Actor, IdentityLink, OperatorScope, RuntimeAgent, UserActor
from config.errors import NotFound
from history.audience import Audience, AudienceKind
from history.models import Conversation, Message, Turn
from memory.models import (
    Authority,
    CorrectionRelation,
    EntryStatus,
    EvidenceKind,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    Operation,
    RecallMoment,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    SharingGrant,
    parse_short_id,
    short_id,
)
from memory.retrieval.eligibility import EligibleMessages, EligibleRevisions, Perspective, linked_readers_for
from memory.turns import CITATION, turn_ledger

Viewer = AbstractBaseUser | AnonymousUser

#: How far back through ``supersedes`` a revision's source message is looked for (amendments and
#: corrections inherit the message the belief was first stated in).
SOURCE_WALK_LIMIT = 32

MOMENT_ORDER = {
    RecallMoment.SNAPSHOT: 0,
    RecallMoment.CHILD: 0,
    RecallMoment.IN_TURN: 1,
    RecallMoment.TOOL: 2,
    RecallMoment.PREVIEW: 3,
}
MOMENT_NOTES = {
    RecallMoment.SNAPSHOT: "Recalled once when the session opened and kept in front of the agent for every turn.",
    RecallMoment.CHILD: "Recalled when this child run started.",
    RecallMoment.IN_TURN: "Recalled for your message, just before the agent answered.",
    RecallMoment.TOOL: "Looked up by the agent itself while answering.",
    RecallMoment.PREVIEW: "An operator preview.",
}
AUTHORITY_TEXT = {
    Authority.USER_STATED: "user-stated",
    Authority.AFFIRMED: "affirmed",
    Authority.INFERRED: "inferred",
}


# --------------------------------------------------------------------------------------------------
# who may read what
# --------------------------------------------------------------------------------------------------


def viewer_actors(user: Viewer) -> list[Actor]:
    """The actors an end user is, with their connectors (for namespaces)."""
    if not user.is_authenticated:
        return []
    return list(Actor.objects.filter(user_links__user_id=user.pk).select_related("connector").order_by("pk"))


def readable_conversations(user: Viewer) -> QuerySet[Conversation]:
    actors = viewer_actors(user)
    if not actors:
        return Conversation.objects.none()
    actor_ids = [a.pk for a in actors]
    return Conversation.objects.filter(
        Q(audience_kind__in=[AudienceKind.MEMBERS, AudienceKind.EXTERNAL], audience_readers__overlap=actor_ids)
        | Q(audience_kind=AudienceKind.WORKSPACE, connector_id__in={a.connector_id for a in actors})
        | Q(audience_kind=AudienceKind.PUBLIC, agent__tenant_id__in={a.tenant_id for a in actors})
    )


def turns_for_viewer(user: Viewer) -> QuerySet[Turn]:
    """The user's turns, newest first: every turn of a conversation they could read."""
    return (
        Turn.objects.filter(session__conversation__in=readable_conversations(user))
        .select_related("session__conversation", "inbound_message__actor", "requester")
        .order_by("-created_at", "-id")
    )


def turn_for_viewer(user: Viewer, turn_id: int) -> Turn:
    turn = turns_for_viewer(user).select_related("reply").filter(pk=turn_id).first()
    if turn is None:
        raise NotFound("turn not found", code="turn_not_found")
    return turn


def message_for_viewer(user: Viewer, message_id: int) -> Message:
    message = (
        Message.objects.filter(pk=message_id, conversation__in=readable_conversations(user))
        .select_related("conversation", "actor")
        .first()
    )
    if message is None:
        raise NotFound("message not found", code="message_not_found")
    return message


def source_labels(revisions: Sequence[MemoryRevision]) -> dict[int, str]:
    """Who said each revision, as shown to people: its source actors' current labels joined ("Bob (id
    U2) and Alice (id U1)"), leaving out a subject who is its only source (it is their own word)."""
    actor_ids = {a for r in revisions for a in r.source_actor_ids}
    labels = {actor.pk: actor.label for actor in Actor.objects.filter(pk__in=actor_ids)} if actor_ids else {}
    said_by = {}
    for revision in revisions:
        names = [labels[a] for a in revision.source_actor_ids if a in labels]
        if names and list(revision.source_actor_ids) != [revision.subject_id]:
            said_by[revision.pk] = " and ".join(names)
    return said_by


def correction_relations(user: Viewer, revisions: Sequence[MemoryRevision]) -> dict[int, CorrectionRelation]:
    """Who ``user`` is to each revision when they correct it (``docs/corrections.md``), first match wins:

    - **subject**: one of the user's actors (``UserActor``) is the revision's subject, or is joined to
      it by a verified, unrevoked ``IdentityLink`` of the revision's agent (the same person);
    - **source**: likewise for any of the revision's source actors, which the write path records from
      the revision's evidence (the authors of its source messages, or the person whose correction
      wrote it): everyone whose words it rests on;
    - **operator**: an active staff user scoped to the tenant of the revision's agent, or a superuser;
    - **bystander**: anyone else. A bystander's correction is filed for review, never applied.

    The page's wording and :func:`memory.rejections.rejection_record` both read this one rule.
    """
    if not revisions:
        return {}
    if not user.is_authenticated:
        return {r.pk: CorrectionRelation.BYSTANDER for r in revisions}
    agent_ids = {r.agent_id for r in revisions}
    mine = set(UserActor.objects.filter(user_id=user.pk).values_list("actor_id", flat=True))
    selves = {agent_id: set(mine) for agent_id in agent_ids}
    for agent_id, actor_a, actor_b in IdentityLink.objects.filter(
        Q(actor_a_id__in=mine) | Q(actor_b_id__in=mine), agent_id__in=agent_ids, revoked_at__isnull=True
    ).values_list("agent_id", "actor_a_id", "actor_b_id"):
        selves[agent_id].update((actor_a, actor_b))
    tenants = dict(RuntimeAgent.objects.filter(pk__in=agent_ids).values_list("pk", "tenant_id"))
    operated = _operated_tenants(user, set(tenants.values()))
    relations: dict[int, CorrectionRelation] = {}
    for revision in revisions:
        me = selves[revision.agent_id]
        if revision.subject_id is not None and revision.subject_id in me:
            relations[revision.pk] = CorrectionRelation.SUBJECT
        elif me.intersection(revision.source_actor_ids):
            relations[revision.pk] = CorrectionRelation.SOURCE
        elif tenants[revision.agent_id] in operated:
            relations[revision.pk] = CorrectionRelation.OPERATOR
        else:
            relations[revision.pk] = CorrectionRelation.BYSTANDER
    return relations


def _operated_tenants(user: Viewer, tenant_ids: set[int]) -> set[int]:
    """Which of these tenants ``user`` operates: the admin's scoping rule (``OperatorScope``, staff only)."""
    if not (user.is_authenticated and user.is_active and getattr(user, "is_staff", False)):
        return set()
    if getattr(user, "is_superuser", False):
        return tenant_ids
    return set(
        OperatorScope.objects.filter(user_id=user.pk, tenant_id__in=tenant_ids).values_list("tenant_id", flat=True)
    )


@dataclass(frozen=True)
class CorrectionTarget:
    """One belief a person may correct or report, as a selector found it for them.

    ``here`` is the conversation "true elsewhere, not here" speaks of (None where the person met the
    belief outside any conversation, as on their "what the agent knows about you" page); ``carried``
    whether it was carried into that conversation from another project.
    """

    revision: MemoryRevision
    here: Conversation | None
    carried: bool = False
    trace_item: RecallTraceItem | None = None


def correction_item(user: Viewer, trace_item_id: int) -> CorrectionTarget:
    """A traced item ``user`` may correct or report: one they can see on a turn page, or, for an
    operator, any item of their tenant's agents (the admin shows them every trace). Else NotFound."""
    item = RecallTraceItem.objects.filter(pk=trace_item_id).select_related("trace", "revision", "entry__agent").first()
    if item is None or item.entry.agent.tenant_id not in _operated_tenants(user, {item.entry.agent.tenant_id}):
        item = visible_trace_item(user, trace_item_id)
    return CorrectionTarget(
        revision=item.revision, here=trace_conversation(item.trace), carried=item.carried, trace_item=item
    )


def _viewer_destinations(user: Viewer, agent_id: int) -> list[tuple[Audience, tuple[int, ...]]]:
    """The viewer's ceiling on one agent: a DM with each of their actors there, and its identity links."""
    destinations = []
    for actor in viewer_actors(user):
        if actor.connector.agent_id != agent_id:
            continue
        audience = Audience.members(actor.connector.namespace, [actor.pk])
        destinations.append((audience, linked_readers_for(agent_id, audience)))
    return destinations


def _disclosure(prefix: str) -> str:
    """The eligibility module's "audience or live grant" predicate over ``r``, for destination ``prefix``."""
    return EligibleRevisions._audience_or_grant().replace("%(el_d_", f"%({prefix}_d_")


def _destination_params(
    prefix: str, audience: Audience, linked: Iterable[int], conversation_id: int | None
) -> dict[str, Any]:
    return {
        f"{prefix}_d_kind": str(audience.kind),
        f"{prefix}_d_namespace": audience.namespace,
        f"{prefix}_d_readers": list(audience.readers),
        f"{prefix}_d_linked": list(linked),
        f"{prefix}_d_conversation": conversation_id,
    }


def items_within_ceilings(user: Viewer, trace: RecallTrace) -> set[int]:
    """Ids of ``trace``'s items this viewer may see: not blocked, and disclosable both to the recall's
    destination and to the viewer's own ceiling, each in the trace's conversation (where a grant must
    have been approved to count)."""
    destinations = _viewer_destinations(user, trace.agent_id)
    if not destinations:
        return set()
    recall_audience = trace.audience
    conversation = trace_conversation(trace)
    conversation_id = conversation.pk if conversation is not None else None
    params: dict[str, Any] = {
        "el_agent": trace.agent_id,
        "trace": trace.pk,
        **_destination_params(
            "rc", recall_audience, linked_readers_for(trace.agent_id, recall_audience), conversation_id
        ),
    }
    viewer_terms = []
    for n, (audience, linked) in enumerate(destinations):
        viewer_terms.append(_disclosure(f"v{n}"))
        params.update(_destination_params(f"v{n}", audience, linked, conversation_id))
    sql = (
        "SELECT i.id FROM memory_recalltraceitem i JOIN memory_memoryrevision r ON r.id = i.revision_id"
        " WHERE i.trace_id = %(trace)s AND r.agent_id = %(el_agent)s AND i.blocked_reason = ''"
        f" AND {_disclosure('rc')} AND ({' OR '.join(viewer_terms)})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def trace_conversation(trace: RecallTrace) -> Conversation | None:
    """The conversation a trace was recalled for (None for operator previews, which have no session)."""
    session_id = trace.session_id
    if session_id is None and trace.turn_id is not None:
        session_id = Turn.objects.filter(pk=trace.turn_id).values_list("session_id", flat=True).first()
    if session_id is None:
        return None
    return Conversation.objects.filter(sessions__pk=session_id).first()


def visible_trace_item(user: Viewer, trace_item_id: int) -> RecallTraceItem:
    """One traced item this viewer may see (readable conversation, within both ceilings), or NotFound."""
    item = RecallTraceItem.objects.filter(pk=trace_item_id).select_related("trace", "revision", "entry").first()
    if item is None:
        raise NotFound("item not found", code="item_not_found")
    conversation = trace_conversation(item.trace)
    if conversation is None or not readable_conversations(user).filter(pk=conversation.pk).exists():
        raise NotFound("item not found", code="item_not_found")
    if item.pk not in items_within_ceilings(user, item.trace):
        raise NotFound("item not found", code="item_not_found")
    return item


# --------------------------------------------------------------------------------------------------
# the turn page
# --------------------------------------------------------------------------------------------------

#: How the page names each moment a memory was in front of the agent, and a turn's own writes.
WRITTEN = "written"
MARK_TEXT = {
    RecallMoment.SNAPSHOT: "snapshot",
    RecallMoment.CHILD: "child run",
    RecallMoment.IN_TURN: "in-turn recall",
    RecallMoment.TOOL: "recall tool",
    RecallMoment.PREVIEW: "preview",
    WRITTEN: "written",
}
OPERATION_TEXT = {
    Operation.REMEMBER: "Remembered",
    Operation.AMEND: "Amended",
    Operation.FORGET: "Forgot",
    Operation.REQUEST_SHARING: "Asked to share",
}


@dataclass(frozen=True)
class Mark:
    """One place a memory appeared on this turn: a recall moment, or the turn's own write."""

    moment: str
    text: str


@dataclass(frozen=True)
class MemoryCard:
    """One belief as the user sees it, once per page however often it appeared. No score, rank,
    reason or candidate data."""

    revision_id: int
    short_id: str
    statement: str
    subject: str | None
    source: str | None
    recorded_at: datetime
    valid_from: datetime
    origin_scope: str
    carried: bool
    authority: str
    #: The confidence band the agent was shown ("" for a belief only written, never recalled here).
    band: str
    used: bool
    source_message_id: int | None
    source_message_readable: bool
    #: "current", "changed" (a later revision replaced it) or "retired" (forgotten).
    state: str
    successor: str | None
    marks: tuple[Mark, ...]
    #: The first traced item that showed it (the card's anchor and the correction's target), or
    #: None for a belief this turn wrote and no recall showed.
    item_id: int | None = None
    #: Who the viewer is to this belief: a bystander's correction goes to review (``docs/corrections.md``).
    relation: str = CorrectionRelation.BYSTANDER
    rejections: list[Rejection] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"item-{self.item_id}" if self.item_id is not None else f"memory-{self.revision_id}"

    @property
    def moments(self) -> str:
        return " ".join(mark.moment for mark in self.marks)

    @property
    def written(self) -> bool:
        return any(mark.moment == WRITTEN for mark in self.marks)

    @property
    def actionable(self) -> bool:
        return self.state == "current"

    @property
    def may_correct(self) -> bool:
        return self.relation != CorrectionRelation.BYSTANDER

    @property
    def expanded(self) -> bool:
        """Cited and written beliefs open; merely available ones start collapsed, unless the viewer
        has acted on it."""
        return self.used or self.written or bool(self.rejections)


@dataclass(frozen=True)
class WrittenOperation:
    """One committed operation of the turn's ledger, with the card of the belief it wrote or touched
    (None when that belief is above one of the two ceilings: then only the operation is named)."""

    kind: str
    text: str
    round: int | None
    card: MemoryCard | None
    #: For an amendment, the revision it replaced.
    replaced: str | None
    #: The card of a belief an earlier operation of the turn already shows ("" when there is none).
    see_anchor: str = ""
    see_short_id: str = ""


@dataclass(frozen=True)
class MomentSummary:
    """What one recall moment put in front of the agent, in counts: shown here, and not."""

    trace_id: int
    moment: str
    moment_label: str
    moment_note: str
    created_at: datetime
    shown: int
    #: Considered for this recall and not shown here (lost the ranking, over budget, withheld, or above
    #: the stricter ceiling): a count only.
    not_shown: int
    blocked: int


@dataclass(frozen=True)
class ShownMessage:
    """One past message in front of the agent, as the user sees it."""

    message_id: int
    conversation: str
    author: str
    created_at: datetime
    body: str
    #: A history search's own match (the others are the messages around a match, returned with it).
    matched: bool = False


@dataclass(frozen=True)
class HistoryFinds:
    """What the turn's history searches returned, exactly as recorded (``returned_message_ids``)."""

    searches: int
    #: Distinct messages returned with their text (withheld ones excluded), and those withheld.
    in_front: int
    blocked: int
    messages: list[ShownMessage]
    #: A search recorded before its neighbours were kept: only its matches are known.
    matches_only: bool

    @property
    def not_shown(self) -> int:
        return max(0, self.in_front - len(self.messages))


@dataclass(frozen=True)
class LoadedMessages:
    """The messages the runtime loaded into the prompt itself (``Turn.loaded_message_ids``)."""

    loaded: int
    messages: list[ShownMessage]

    @property
    def not_shown(self) -> int:
        return max(0, self.loaded - len(self.messages))


@dataclass(frozen=True)
class ReplyPart:
    """A piece of the reply's text; a citation of a belief shown on the page links to its card."""

    text: str
    anchor: str = ""


#: Why a cited belief has no card on the page, as the page says it.
NOT_IN_FRONT = "was not in front of the agent on this turn"
ERASED = "has since been erased"
NOT_YOUR_CONVERSATION = "was learned in a conversation you are not in"
NOT_FOR_YOU = "is not shared with you"


@dataclass(frozen=True)
class Citation:
    short_id: str
    #: The card's anchor on this page, or "" when the belief is not shown to this viewer.
    anchor: str
    statement: str
    #: The card's state ("current", "changed", "retired"); with no card, why not (``NOT_IN_FRONT``…).
    state: str = "current"
    why_not: str = ""


@dataclass(frozen=True)
class TurnExplanation:
    turn: Turn
    conversation: Conversation
    inbound: Message
    reply: Message | None
    #: The turn's ledger, in commit order; each operation's belief as a card when the viewer may see it.
    written: list[WrittenOperation]
    #: Every other belief in front of the agent, one card each, in the order first shown.
    recalled: list[MemoryCard]
    moments: list[MomentSummary]
    history: HistoryFinds
    loaded: LoadedMessages
    citations: list[Citation]
    reply_parts: list[ReplyPart]
    #: Distinct beliefs rendered to the agent (withheld ones excluded), and how many this viewer sees.
    memories_in_front: int
    memories_shown: int
    #: Distinct past messages in front of the agent: what search returned and the window the runtime
    #: loaded itself (``Turn.loaded_message_ids``), whose size is ``window``.
    messages_in_front: int
    window: int


def turn_traces(turn: Turn) -> list[RecallTrace]:
    """What was in front of the model for this turn: the session's snapshot, then the turn's recalls."""
    traces = RecallTrace.objects.filter(
        Q(turn=turn) | Q(session_id=turn.session_id, moment__in=[RecallMoment.SNAPSHOT, RecallMoment.CHILD])
    )
    return sorted(traces, key=lambda t: (MOMENT_ORDER.get(RecallMoment(t.moment), 9), t.pk))


def written_within_ceilings(user: Viewer, turn: Turn, revision_ids: Iterable[int]) -> set[int]:
    """Ids among ``revision_ids`` (beliefs this turn wrote) this viewer may see on its page: the same
    two ceilings as a traced belief, decided in SQL with the eligibility module's disclosure
    fragment: disclosable to the turn's own destination and to a direct conversation with one of the
    viewer's actors on the agent, each in the turn's conversation."""
    turn_destination = (turn.audience, linked_readers_for(turn.agent_id, turn.audience))
    return _disclosed_revisions(
        user, turn.agent_id, revision_ids, conversation_id=turn.session.conversation_id, also=turn_destination
    )


def _disclosed_revisions(
    user: Viewer,
    agent_id: int,
    revision_ids: Iterable[int],
    *,
    conversation_id: int | None,
    also: tuple[Audience, Iterable[int]] | None = None,
) -> set[int]:
    """Ids among ``revision_ids`` (of one agent) disclosable, in ``conversation_id``, to the viewer's own
    ceiling (a direct conversation with one of their actors there) and, when given, to ``also`` (a
    turn's own destination and its identity links): the eligibility module's disclosure fragment,
    audience or live grant, decided in SQL. Unknown provenance reaches nobody."""
    ids = sorted(set(revision_ids))
    destinations = _viewer_destinations(user, agent_id)
    if not ids or not destinations:
        return set()
    params: dict[str, Any] = {"el_agent": agent_id, "ids": ids}
    viewer_terms = []
    for n, (audience, linked) in enumerate(destinations):
        viewer_terms.append(_disclosure(f"v{n}"))
        params.update(_destination_params(f"v{n}", audience, linked, conversation_id))
    viewer_ceiling = " OR ".join(viewer_terms)
    turn_ceiling = "TRUE"
    if also is not None:
        params.update(_destination_params("rc", also[0], also[1], conversation_id))
        turn_ceiling = _disclosure("rc")
    sql = (
        "SELECT r.id FROM memory_memoryrevision r WHERE r.id = ANY(%(ids)s) AND r.agent_id = %(el_agent)s"
        f" AND {turn_ceiling} AND ({viewer_ceiling})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def written_correction_target(user: Viewer, turn: Turn, revision_id: int) -> CorrectionTarget:
    """A belief ``turn`` wrote (its ledger names the revision) that ``user`` may correct or report from
    the turn's page: within both ceilings, or of a tenant they operate. Else NotFound. ``turn`` must
    come from :func:`turn_for_viewer`."""
    ledgered = MemoryOperation.objects.filter(turn=turn, revision_id=revision_id).exists()
    revision = MemoryRevision.objects.filter(pk=revision_id, agent_id=turn.agent_id).first()
    if not ledgered or revision is None:
        raise NotFound("memory not found", code="memory_not_found")
    operated = turn.agent.tenant_id in _operated_tenants(user, {turn.agent.tenant_id})
    if not operated and revision_id not in written_within_ceilings(user, turn, [revision_id]):
        raise NotFound("memory not found", code="memory_not_found")
    return CorrectionTarget(revision=revision, here=turn.session.conversation)


def turn_explanation(user: Viewer, turn: Turn) -> TurnExplanation:
    """Everything the turn page shows; ``turn`` must come from :func:`turn_for_viewer`.

    The page lists exactly what was traced (within both ceilings) and what the ledger committed,
    each belief once: its card carries a mark for every place it appeared.
    """
    conversation = turn.session.conversation
    reply = turn.reply
    cited = set(reply.cited_revision_ids) if reply is not None else set()
    traces = turn_traces(turn)
    visible = {trace.pk: items_within_ceilings(user, trace) for trace in traces}
    item_ids = sorted(set().union(*visible.values())) if visible else []
    items = list(
        RecallTraceItem.objects.filter(pk__in=item_ids)
        .select_related("revision__subject", "revision__entry")
        .order_by("trace_id", "position")
    )
    operations = turn_ledger(turn)
    written_ids = {op.revision_id for op in operations if op.revision_id is not None}
    written_visible = written_within_ceilings(user, turn, written_ids)
    written_revisions = {
        r.pk: r for r in MemoryRevision.objects.filter(pk__in=written_visible).select_related("subject", "entry")
    }

    # Each belief once: the marks of every moment that showed it, then "written" if the turn wrote it.
    moment_of = {trace.pk: RecallMoment(trace.moment) for trace in traces}
    trace_rank = {trace.pk: n for n, trace in enumerate(traces)}
    items.sort(key=lambda i: (trace_rank[i.trace_id], i.position))
    first_item: dict[int, RecallTraceItem] = {}
    marks: dict[int, list[Mark]] = {}
    for item in items:
        first_item.setdefault(item.revision_id, item)
        moment = moment_of[item.trace_id]
        mark = Mark(str(moment), MARK_TEXT[moment])
        if mark not in marks.setdefault(item.revision_id, []):
            marks[item.revision_id].append(mark)
    for revision_id in written_revisions:
        marks.setdefault(revision_id, []).append(Mark(WRITTEN, MARK_TEXT[WRITTEN]))
    revisions = {item.revision_id: item.revision for item in items} | written_revisions

    shown = list(revisions.values())
    sources = source_messages(shown)
    said_by = source_labels(shown)
    relations = correction_relations(user, shown)
    readable = set(
        Message.objects.filter(pk__in=set(sources.values()), conversation__in=readable_conversations(user)).values_list(
            "pk", flat=True
        )
    )
    rejections: dict[int, list[Rejection]] = {}
    if user.is_authenticated and revisions:
        for rejection in (
            Rejection.objects.filter(revision_id__in=list(revisions), user_id=user.pk)
            .select_related("resulting_revision")
            .order_by("id")
        ):
            rejections.setdefault(rejection.revision_id, []).append(rejection)

    cards: dict[int, MemoryCard] = {}
    for revision_id, revision in revisions.items():
        entry = revision.entry
        if entry.status == EntryStatus.FORGOTTEN:
            state, successor = "retired", None
        elif entry.current_revision_id != revision.pk:
            state, successor = "changed", short_id(entry.current_revision_id or 0)
        else:
            state, successor = "current", None
        first = first_item.get(revision_id)
        source_message = sources.get(revision_id)
        cards[revision_id] = MemoryCard(
            revision_id=revision_id,
            short_id=short_id(revision_id),
            statement=revision.body,
            # Labels from the actor rows as they are now: a rename shows, stored text never changes.
            subject=revision.subject.label if revision.subject is not None else None,
            source=said_by.get(revision_id),
            recorded_at=revision.recorded_at,
            valid_from=revision.valid_from,
            origin_scope=revision.origin_scope,
            carried=first.carried if first is not None else False,
            authority=AUTHORITY_TEXT.get(Authority(revision.authority), revision.authority),
            band=first.band if first is not None else "",
            used=revision_id in cited,
            source_message_id=source_message,
            source_message_readable=source_message in readable,
            state=state,
            successor=successor,
            marks=tuple(marks[revision_id]),
            item_id=first.pk if first is not None else None,
            relation=relations[revision_id],
            rejections=rejections.get(revision_id, []),
        )

    written: list[WrittenOperation] = []
    on_written: set[int] = set()
    for op in operations:
        card = cards.get(op.revision_id) if op.revision_id is not None else None
        earlier = card if card is not None and card.revision_id in on_written else None
        written.append(
            WrittenOperation(
                kind=op.kind,
                text=OPERATION_TEXT.get(Operation(op.kind), op.kind),
                round=op.round,
                # One card per belief: a second operation on it names it and links to the first.
                card=card if earlier is None else None,
                replaced=short_id(op.previous_revision_id) if op.previous_revision_id else None,
                see_anchor=earlier.anchor if earlier is not None else "",
                see_short_id=earlier.short_id if earlier is not None else "",
            )
        )
        if card is not None:
            on_written.add(card.revision_id)
    recalled = [cards[r] for r in first_item if r not in on_written]

    moments = []
    for trace in traces:
        shown_here = {i.revision_id for i in items if i.trace_id == trace.pk}
        moment = RecallMoment(trace.moment)
        moments.append(
            MomentSummary(
                trace_id=trace.pk,
                moment=trace.moment,
                moment_label=moment.label,
                moment_note=MOMENT_NOTES.get(moment, ""),
                created_at=trace.created_at,
                shown=len(shown_here),
                not_shown=max(0, trace.considered_count - len(shown_here)),
                blocked=trace.blocked_count,
            )
        )
    recorded = recorded_searches(turn)
    in_front = set(
        RecallTraceItem.objects.filter(trace__in=traces, blocked_reason="").values_list("revision_id", flat=True)
    )
    anchors = {revision_id: card.anchor for revision_id, card in cards.items()}
    return TurnExplanation(
        turn=turn,
        conversation=conversation,
        inbound=turn.inbound_message,
        reply=reply,
        written=written,
        recalled=recalled,
        moments=moments,
        history=history_finds(user, turn, recorded),
        loaded=loaded_messages(user, turn),
        citations=_citations(user, reply, cards, in_front | written_ids),
        reply_parts=reply_parts(reply.body, anchors) if reply is not None else [],
        memories_in_front=len(in_front),
        memories_shown=len(set(first_item)),
        messages_in_front=len(set(recorded.with_text) | set(turn.loaded_message_ids)),
        window=len(turn.loaded_message_ids),
    )


def _citations(user: Viewer, reply: Message | None, cards: dict[int, MemoryCard], in_front: set[int]) -> list[Citation]:
    """Each belief the reply cited: a link to its card, or precisely why the page has none."""
    cited = _cited_in_order(reply)
    missing = [r for r in cited if r not in cards]
    stored = {r.pk: r for r in MemoryRevision.objects.filter(pk__in=missing)}
    homes = source_messages(list(stored.values()))
    readable = set(
        Message.objects.filter(pk__in=set(homes.values()), conversation__in=readable_conversations(user)).values_list(
            "pk", flat=True
        )
    )
    citations = []
    for revision_id in cited:
        card = cards.get(revision_id)
        if card is not None:
            citations.append(Citation(card.short_id, card.anchor, card.statement, state=card.state))
            continue
        if revision_id not in stored:
            why = ERASED
        elif revision_id not in in_front:
            why = NOT_IN_FRONT
        elif homes.get(revision_id) not in readable:
            why = NOT_YOUR_CONVERSATION
        else:
            why = NOT_FOR_YOU
        citations.append(Citation(short_id(revision_id), "", "", state="", why_not=why))
    return citations


def _cited_in_order(reply: Message | None) -> list[int]:
    """The revisions the delivered reply cited (as the reply recorded them), in the order it cites them."""
    if reply is None:
        return []
    cited = set(reply.cited_revision_ids)
    in_text = [parse_short_id(ref) for ref in CITATION.findall(reply.body)]
    ordered = [r for r in dict.fromkeys(in_text) if r is not None and r in cited]
    return ordered + sorted(cited - set(ordered))


def reply_parts(body: str, cards: dict[int, str]) -> list[ReplyPart]:
    """The reply cut at its ``[m:…]`` citations; each citation of a belief with a card here links to it."""
    parts: list[ReplyPart] = []
    position = 0
    for match in CITATION.finditer(body):
        revision_id = parse_short_id(match.group(1))
        anchor = cards.get(revision_id, "") if revision_id is not None else ""
        if not anchor:
            continue
        parts.append(ReplyPart(body[position : match.start()]))
        parts.append(ReplyPart(match.group(0), anchor))
        position = match.end()
    parts.append(ReplyPart(body[position:]))
    return [part for part in parts if part.text]


# --------------------------------------------------------------------------------------------------
# the past messages history search put in front of the agent
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedSearches:
    """What a turn's history searches returned, from their audit rows alone (never a new search)."""

    searches: int
    #: Distinct message ids in the order first returned (hits and the messages around them).
    returned: list[int]
    #: The searches' own matches among them.
    matched: set[int]
    #: Returned as ``[BLOCKED]``: their text never reached the agent.
    blocked: set[int]
    #: Some search was recorded before the messages around its matches were kept: only its matches are known.
    matches_only: bool

    @property
    def with_text(self) -> list[int]:
        return [m for m in self.returned if m not in self.blocked]


def recorded_searches(turn: Turn) -> RecordedSearches:
    returned: dict[int, None] = {}
    matched: set[int] = set()
    blocked: set[int] = set()
    matches_only = False
    events = list(
        turn.search_events.order_by("created_at", "id").values_list(
            "returned_message_ids", "selected", "blocked_message_ids"
        )
    )
    for returned_ids, selected, blocked_ids in events:
        hits = [int(hit["message_id"]) for hit in selected]
        matched.update(hits)
        blocked.update(blocked_ids)
        if hits and not returned_ids:
            matches_only = True
        returned.update(dict.fromkeys(returned_ids or hits))
    return RecordedSearches(
        searches=len(events),
        returned=list(returned),
        matched=matched,
        blocked=blocked & set(returned),
        matches_only=matches_only,
    )


def _eligible_message_ids(perspective: Perspective, message_ids: Sequence[int]) -> set[int]:
    """Which of ``message_ids`` the eligibility module admits for ``perspective`` now."""
    if not message_ids:
        return set()
    eligible = EligibleMessages(perspective)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT m.id FROM {eligible.owned()} WHERE m.id = ANY(%(ids)s::bigint[]) AND {eligible.predicate()}",
            {**eligible.params(), "ids": sorted(set(message_ids))},
        )
        return {row[0] for row in cursor.fetchall()}


def messages_within_ceilings(user: Viewer, turn: Turn, message_ids: Iterable[int]) -> set[int]:
    """Ids among ``message_ids`` this viewer may see on ``turn``'s page: the stricter of two ceilings,
    as for traced beliefs. Each message must be eligible now, by :class:`EligibleMessages` (evidence,
    audience, lineage), both for the turn's own destination (the ceiling the search ran under,
    re-checked so that a link undone or a conversation deleted since hides it) and for a direct
    conversation with one of the viewer's actors on the agent, in the turn's conversation; and its
    own conversation must be one the viewer could read, so the page never shows a message its
    message page would refuse."""
    ids = sorted(set(message_ids))
    destinations = _viewer_destinations(user, turn.agent_id)
    if not ids or not destinations:
        return set()
    conversation_id = turn.session.conversation_id
    recall_ceiling = Perspective(
        agent_id=turn.agent_id,
        destination=turn.audience,
        conversation_id=conversation_id,
        linked_readers=linked_readers_for(turn.agent_id, turn.audience),
    )
    within = _eligible_message_ids(recall_ceiling, ids)
    viewer: set[int] = set()
    for audience, linked in destinations:
        viewer |= _eligible_message_ids(
            Perspective(
                agent_id=turn.agent_id, destination=audience, conversation_id=conversation_id, linked_readers=linked
            ),
            sorted(within - viewer),
        )
    return set(
        Message.objects.filter(pk__in=viewer, conversation__in=readable_conversations(user)).values_list(
            "pk", flat=True
        )
    )


def history_finds(user: Viewer, turn: Turn, recorded: RecordedSearches) -> HistoryFinds:
    """The past messages the turn's history searches put in front of the agent, as recorded, within
    both ceilings; withheld ones and those above a ceiling are counted, never shown."""
    with_text = recorded.with_text
    visible = messages_within_ceilings(user, turn, with_text)
    rows = {m.pk: m for m in Message.objects.filter(pk__in=visible).select_related("conversation__connector", "actor")}
    messages = [_shown_message(rows[m], matched=m in recorded.matched) for m in with_text if m in rows]
    return HistoryFinds(
        searches=recorded.searches,
        in_front=len(with_text),
        blocked=len(recorded.blocked),
        messages=messages,
        matches_only=recorded.matches_only,
    )


def loaded_messages(user: Viewer, turn: Turn) -> LoadedMessages:
    """The messages the runtime loaded into the prompt itself, as the turn recorded them, within both
    ceilings (like a search's finds); those above a ceiling are counted, never shown."""
    loaded = list(dict.fromkeys(turn.loaded_message_ids))
    visible = messages_within_ceilings(user, turn, loaded)
    rows = {m.pk: m for m in Message.objects.filter(pk__in=visible).select_related("conversation__connector", "actor")}
    return LoadedMessages(
        loaded=len(loaded),
        messages=[_shown_message(rows[m]) for m in loaded if m in rows],
    )


def _shown_message(message: Message, *, matched: bool = False) -> ShownMessage:
    return ShownMessage(
        message_id=message.pk,
        conversation=str(message.conversation),
        author=message.actor.label if message.actor is not None else "The agent",
        created_at=message.created_at,
        body=message.body,
        matched=matched,
    )


def source_messages(revisions: Sequence[MemoryRevision]) -> dict[int, int]:
    """Revision id -> the message the belief was stated in (following amendments back to it)."""
    result: dict[int, int] = {}
    pending = {r.pk: r.pk for r in revisions}  # revision being resolved -> revision to look at
    for _ in range(SOURCE_WALK_LIMIT):
        if not pending:
            break
        found = dict(
            MemoryEvidence.objects.filter(revision_id__in=set(pending.values()), kind=EvidenceKind.SOURCE_MESSAGE)
            .order_by("revision_id", "message_id")
            .values_list("revision_id", "message_id")
            .distinct("revision_id")
        )
        parents = dict(MemoryRevision.objects.filter(pk__in=set(pending.values())).values_list("pk", "supersedes_id"))
        next_pending = {}
        for origin, looking_at in pending.items():
            if looking_at in found:
                result[origin] = found[looking_at]
            elif parents.get(looking_at) is not None:
                next_pending[origin] = parents[looking_at]
        pending = next_pending
    return result


def revisions_within_viewer_ceiling(user: Viewer, agent_id: int, revision_ids: Iterable[int]) -> set[int]:
    """Ids among ``revision_ids`` (of one agent) disclosable to this viewer's own ceiling: a direct
    conversation with one of their actors there, as on the turn page, decided in SQL with the
    eligibility module's disclosure fragment (audience or live grant; unknown reaches nobody)."""
    # No conversation: a grant admits its revision only in the conversation it was approved for, and
    # this ceiling is the viewer's own DM audience, not a conversation, so grants add nothing.
    return _disclosed_revisions(user, agent_id, revision_ids, conversation_id=None)


# --------------------------------------------------------------------------------------------------
# the management API: an agent's own memories, outside any turn
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryFilters:
    """Filters of the memory list; each only narrows. Revision fields are the current revision's."""

    subject_actor_id: int | None = None
    source_actor_id: int | None = None
    status: str | None = None
    portability: str | None = None
    project: str | None = None
    flagged: bool | None = None


def memories_of_agent(agent_id: int, filters: MemoryFilters) -> QuerySet[MemoryEntry]:
    """One agent's memory entries (never another agent's: the perspective is the first term), with
    their current revisions and its actors loaded. Reads only: no trace, audit row or usage change."""
    entries = MemoryEntry.objects.filter(agent_id=agent_id, current_revision__isnull=False).select_related(
        "current_revision__subject", "current_revision__source_actor"
    )
    if filters.subject_actor_id is not None:
        entries = entries.filter(current_revision__subject_id=filters.subject_actor_id)
    if filters.source_actor_id is not None:
        entries = entries.filter(current_revision__source_actor_ids__contains=[filters.source_actor_id])
    if filters.status is not None:
        entries = entries.filter(status=filters.status)
    if filters.portability is not None:
        entries = entries.filter(current_revision__portability=filters.portability)
    if filters.project is not None:
        entries = entries.filter(current_revision__origin_scope=filters.project)
    if filters.flagged is not None:
        entries = entries.filter(flagged_for_review=filters.flagged)
    return entries


@dataclass(frozen=True)
class RevisionHistory:
    revision: MemoryRevision
    evidence: list[MemoryEvidence]
    grants: list[SharingGrant]
    rejections: list[Rejection]


@dataclass(frozen=True)
class MemoryHistory:
    entry: MemoryEntry
    revisions: list[RevisionHistory]


def memory_history(agent_id: int, entry_id: int) -> MemoryHistory:
    """One of the agent's entries with every revision, its evidence, grants and rejections, loaded in
    batches. Another agent's entry answers :class:`NotFound`, exactly like a missing one."""
    entry = MemoryEntry.objects.filter(pk=entry_id, agent_id=agent_id).first()
    if entry is None:
        raise NotFound("memory not found", code="not_found")
    revisions = list(
        MemoryRevision.objects.filter(entry=entry, agent_id=agent_id)
        .select_related("subject", "source_actor")
        .order_by("number")
    )
    ids = [r.pk for r in revisions]
    evidence: dict[int, list[MemoryEvidence]] = {}
    for row in MemoryEvidence.objects.filter(revision_id__in=ids).order_by("id"):
        evidence.setdefault(row.revision_id, []).append(row)
    grants: dict[int, list[SharingGrant]] = {}
    for grant in SharingGrant.objects.filter(revision_id__in=ids, agent_id=agent_id).order_by("id"):
        grants.setdefault(grant.revision_id, []).append(grant)
    rejections: dict[int, list[Rejection]] = {}
    for rejection in Rejection.objects.filter(revision_id__in=ids, agent_id=agent_id).order_by("id"):
        rejections.setdefault(rejection.revision_id, []).append(rejection)
    return MemoryHistory(
        entry=entry,
        revisions=[
            RevisionHistory(
                revision=r,
                evidence=evidence.get(r.pk, []),
                grants=grants.get(r.pk, []),
                rejections=rejections.get(r.pk, []),
            )
            for r in revisions
        ],
    )
