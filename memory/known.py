"""Reads for the person's "what the agent knows about you" page: every live memory that is theirs.

A memory is on a signed-in person's page when all of these hold, decided in one SQL statement before
anything is listed (:func:`known_memories`):

- it is **live**: its entry is not forgotten, the revision is the entry's current one, active or
  provisional, valid now, and no other live entry has superseded it (the eligible set's own terms,
  ``eligibility.live_knowledge``);
- it is **theirs**: its subject is one of their *selves*, or it rests on their words (its
  ``source_actor_ids`` overlap their selves). A person's selves on an agent are the actors their login
  is (``UserActor``) and the actors a verified, unrevoked ``IdentityLink`` of that agent joins to them,
  the same people :func:`memory.selectors.correction_relations` calls the subject or the source;
- their **view ceiling** admits it: it is disclosable to a direct conversation with one of their
  actors on the agent, by the eligibility module's own predicate
  (``EligibleRevisions._audience_or_grant``: the audience rule or a live grant; unknown and mixed
  provenance reach nobody). As on the turn page, a grant admits its revision only in the
  conversation it was approved for, so a granted memory counts only when that conversation is one the
  person could read and the grant's audience reaches them; it leaves the page when the grant is
  revoked.

Being shown a memory elsewhere (a colleague's fact in a channel they read) does not put it here: this
page is what the agent holds about the person, not everything they may see. Everything listed comes
from that one statement and is only narrowed (search, pages); details (the turns that used a memory,
its grants, where it was learned) are loaded for the listed revisions in batches, a fixed number of
statements for the page whatever it lists. The turns are judged like the turn page's items: a turn of
a conversation the person could read, the item not withheld, and within both ceilings (the recall's
own destination and the person's), each in the turn's conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db import connection
from django.utils import timezone

from accounts.models import Actor, IdentityLink
from config.errors import NotFound
from history.audience import Audience
from history.models import Conversation, Message
from memory.models import (
    BeliefType,
    ConsentState,
    CorrectionRelation,
    MemoryRevision,
    SharingConsent,
    SharingGrant,
    short_id,
)
from memory.retrieval.eligibility import live_knowledge
from memory.selectors import (
    CorrectionTarget,
    Viewer,
    _destination_params,
    _disclosure,
    _viewer_destinations,
    correction_relations,
    readable_conversations,
    source_messages,
    viewer_actors,
)

MEMORIES_PER_PAGE = 50
#: The most recent turns listed under each memory; the rest are counted.
TURNS_PER_MEMORY = 3
MAX_QUERY_LENGTH = 200

#: Kinds in the order the page groups them: what the agent holds about the person first.
KIND_ORDER: tuple[str, ...] = (
    BeliefType.USER_MODEL_ATTR,
    BeliefType.PREFERENCE,
    BeliefType.RELATIONSHIP,
    *(kind for kind in BeliefType.values if kind not in ("user_model_attr", "preference", "relationship")),
)
KIND_HEADINGS: dict[str, str] = {
    BeliefType.USER_MODEL_ATTR: "About you",
    BeliefType.PREFERENCE: "Preferences",
    BeliefType.RELATIONSHIP: "Relationships",
    BeliefType.PROJECT_FACT: "Project facts",
    BeliefType.DECISION: "Decisions",
    BeliefType.INSTRUCTION: "Standing instructions",
    BeliefType.SKILL: "Skills and lessons",
    BeliefType.RESOURCE: "Resources",
    BeliefType.STATUS: "Status and deadlines",
    BeliefType.EVENT: "Events",
}


# --------------------------------------------------------------------------------------------------
# the eligible set: live, theirs, within their ceiling
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AgentCeiling:
    agent_id: int
    #: The person on this agent: their actors and those identity-linked to them.
    selves: tuple[int, ...]
    #: A direct conversation with each of their actors, with its identity links.
    destinations: list[tuple[Audience, tuple[int, ...]]]
    #: Conversations they could read holding a live grant of this agent: where a grant may admit.
    granted_here: tuple[int, ...]


@dataclass(frozen=True)
class _Person:
    actor_ids: frozenset[int]
    readable: frozenset[int]
    ceilings: list[_AgentCeiling]


def _person(user: Viewer) -> _Person:
    actors = viewer_actors(user)
    if not actors:
        return _Person(frozenset(), frozenset(), [])
    readable = frozenset(readable_conversations(user).values_list("pk", flat=True))
    agents = sorted({actor.connector.agent_id for actor in actors})
    granted: dict[int, set[int]] = {}
    for agent_id, conversation_id in (
        SharingGrant.objects.filter(agent_id__in=agents, revoked_at__isnull=True, conversation_id__in=readable)
        .values_list("agent_id", "conversation_id")
        .distinct()
    ):
        granted.setdefault(agent_id, set()).add(conversation_id)
    ceilings = []
    for agent_id in agents:
        destinations = _viewer_destinations(user, agent_id)
        selves = {reader for audience, linked in destinations for reader in (*audience.readers, *linked)}
        ceilings.append(
            _AgentCeiling(
                agent_id=agent_id,
                selves=tuple(sorted(selves)),
                destinations=destinations,
                granted_here=tuple(sorted(granted.get(agent_id, ()))),
            )
        )
    return _Person(frozenset(a.pk for a in actors), readable, ceilings)


def _viewer_term(prefix: str, agent_param: str, conversation: str) -> str:
    """The eligibility module's disclosure predicate for the viewer destination ``prefix``, with the
    agent named by ``agent_param`` and the conversation a grant must have been approved for read from
    the SQL expression ``conversation`` (the disclosure fragment is never rewritten beyond its names)."""
    term = _disclosure(prefix).replace("%(el_agent)s", f"%({agent_param})s")
    return term.replace(f"%({prefix}_d_conversation)s", conversation)


def _eligible(person: _Person, *, query: str = "", revision_id: int | None = None) -> tuple[str, dict[str, Any]]:
    """SELECT r.id, r.belief_type of every memory on the person's page, in the page's order."""
    params: dict[str, Any] = {"now": timezone.now(), "kinds": list(KIND_ORDER)}
    per_agent = []
    for k, ceiling in enumerate(person.ceilings):
        a = f"a{k}"
        params[f"{a}_agent"] = ceiling.agent_id
        params[f"{a}_selves"] = list(ceiling.selves)
        # NULL stands for "no conversation": the audience rule alone (a grant admits nothing there).
        params[f"{a}_here"] = [None, *ceiling.granted_here]
        viewer_terms = []
        for n, (audience, linked) in enumerate(ceiling.destinations):
            viewer_terms.append(_viewer_term(f"{a}v{n}", f"{a}_agent", "vc.id"))
            params.update(_destination_params(f"{a}v{n}", audience, linked, None))
        per_agent.append(
            f"(r.agent_id = %({a}_agent)s"
            f" AND (r.subject_id = ANY(%({a}_selves)s::bigint[]) OR r.source_actor_ids && %({a}_selves)s::bigint[])"
            f" AND EXISTS (SELECT 1 FROM unnest(%({a}_here)s::bigint[]) AS vc(id) WHERE {' OR '.join(viewer_terms)}))"
        )
    narrowing = ""
    if query:
        narrowing += " AND r.body ILIKE %(q)s"
        params["q"] = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    if revision_id is not None:
        narrowing += " AND r.id = %(only)s"
        params["only"] = revision_id
    sql = (
        "SELECT r.id, r.belief_type FROM memory_memoryentry e"
        " JOIN memory_memoryrevision r ON r.id = e.current_revision_id AND r.agent_id = e.agent_id"
        f" WHERE {live_knowledge('%(now)s')}"
        f" AND ({' OR '.join(per_agent)}){narrowing}"
        " ORDER BY array_position(%(kinds)s::text[], r.belief_type::text), r.recorded_at DESC, r.id DESC"
    )
    return sql, params


def _eligible_rows(person: _Person, *, query: str = "", revision_id: int | None = None) -> list[tuple[int, str]]:
    if not person.ceilings:
        return []
    sql, params = _eligible(person, query=query, revision_id=revision_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(row[0], row[1]) for row in cursor.fetchall()]


def known_correction_target(user: Viewer, revision_id: int) -> CorrectionTarget:
    """A memory on ``user``'s "what the agent knows about you" page, as a correction target (no
    conversation: "true elsewhere, not here" is said from a turn page). Anything else, retired,
    changed, someone else's or above their ceiling, is NotFound, exactly like a missing one."""
    if not _eligible_rows(_person(user), revision_id=revision_id):
        raise NotFound("memory not found", code="memory_not_found")
    return CorrectionTarget(revision=MemoryRevision.objects.get(pk=revision_id), here=None)


# --------------------------------------------------------------------------------------------------
# the page
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsedTurn:
    turn_id: int
    created_at: datetime
    conversation: str
    #: The delivered reply cited it (else it was only in front of the agent).
    cited: bool
    #: The turn wrote it (its ledger names this revision).
    wrote: bool = False


@dataclass(frozen=True)
class ShownGrant:
    grant_id: int
    #: The conversation it may be recalled in, or None when the person cannot read that conversation.
    conversation: str | None
    created_at: datetime
    #: The person's own consent is among those it rests on, so they may withdraw it.
    revocable: bool


@dataclass(frozen=True)
class KnownMemory:
    revision_id: int
    short_id: str
    statement: str
    kind: str
    #: "you", another person's label, or None (about no one in particular).
    subject: str | None
    about_you: bool
    #: It rests on the person's own words; ``said_by`` names everyone else whose words it rests on (both
    #: empty when nobody who signed in to a connector did: an operator's statement).
    said_by_you: bool
    said_by: list[str]
    recorded_at: datetime
    source_message_id: int | None
    source_message_readable: bool
    relation: str
    turns: list[UsedTurn] = field(default_factory=list)
    more_turns: int = 0
    grants: list[ShownGrant] = field(default_factory=list)

    @property
    def may_correct(self) -> bool:
        return self.relation != CorrectionRelation.BYSTANDER


@dataclass(frozen=True)
class KindGroup:
    kind: str
    heading: str
    #: Memories of this kind on every page (this page lists ``memories``).
    total: int
    memories: list[KnownMemory]


@dataclass(frozen=True)
class KnownPage:
    query: str
    #: Every memory on the person's page matching the query, across all pages.
    total: int
    page: Page[tuple[int, str]]
    groups: list[KindGroup]


def known_memories(user: Viewer, *, query: str = "", page: int | str | None = 1) -> KnownPage:
    """One page of what the agent knows about ``user``, grouped by kind, narrowed by ``query`` (words of
    the statement). A fixed number of statements, however many memories it lists."""
    query = query.strip()[:MAX_QUERY_LENGTH]
    person = _person(user)
    rows = _eligible_rows(person, query=query)
    shown = Paginator(rows, MEMORIES_PER_PAGE).get_page(page)
    ids = [revision_id for revision_id, _ in shown.object_list]
    revisions = {r.pk: r for r in MemoryRevision.objects.filter(pk__in=ids).select_related("subject")} if ids else {}
    ordered = [revisions[i] for i in ids if i in revisions]
    memories = _describe(user, person, ordered)
    per_kind: dict[str, int] = {}
    for _, kind in rows:
        per_kind[kind] = per_kind.get(kind, 0) + 1
    groups: list[KindGroup] = []
    for memory in memories:
        if not groups or groups[-1].kind != memory.kind:
            groups.append(
                KindGroup(memory.kind, KIND_HEADINGS.get(memory.kind, memory.kind), per_kind[memory.kind], [])
            )
        groups[-1].memories.append(memory)
    return KnownPage(query=query, total=len(rows), page=shown, groups=groups)


def _describe(user: Viewer, person: _Person, revisions: Sequence[MemoryRevision]) -> list[KnownMemory]:
    if not revisions:
        return []
    selves = {actor for ceiling in person.ceilings for actor in ceiling.selves}
    ids = [r.pk for r in revisions]
    labels = {
        actor.pk: actor.label
        for actor in Actor.objects.filter(pk__in={a for r in revisions for a in r.source_actor_ids} - selves)
    }
    sources = source_messages(revisions)
    homes = dict(Message.objects.filter(pk__in=set(sources.values())).values_list("pk", "conversation_id"))
    relations = correction_relations(user, revisions)
    turns, more = _used_turns(person, revisions)
    grants = list(
        SharingGrant.objects.filter(revision_id__in=ids, revoked_at__isnull=True).order_by("created_at", "pk")
    )
    consented = set(
        SharingConsent.objects.filter(
            request_id__in={g.request_id for g in grants if g.request_id is not None},
            state=ConsentState.GIVEN,
            actor_id__in=person.actor_ids,
        ).values_list("request_id", flat=True)
    )
    names = {
        c.pk: str(c)
        for c in Conversation.objects.filter(
            pk__in=({t[2] for ts in turns.values() for t in ts} | {g.conversation_id for g in grants}) & person.readable
        ).select_related("connector")
    }
    shown_grants: dict[int, list[ShownGrant]] = {}
    for grant in grants:
        shown_grants.setdefault(grant.revision_id, []).append(
            ShownGrant(
                grant_id=grant.pk,
                conversation=names.get(grant.conversation_id or 0),
                created_at=grant.created_at,
                revocable=grant.request_id in consented or grant.granted_by_actor_id in person.actor_ids,
            )
        )
    memories = []
    for revision in revisions:
        said = [labels[a] for a in dict.fromkeys(revision.source_actor_ids) if a in labels]
        about_you = revision.subject_id is not None and revision.subject_id in selves
        message = sources.get(revision.pk)
        memories.append(
            KnownMemory(
                revision_id=revision.pk,
                short_id=short_id(revision.pk),
                statement=revision.body,
                kind=revision.belief_type,
                subject="you" if about_you else (revision.subject.label if revision.subject is not None else None),
                about_you=about_you,
                said_by_you=bool(selves.intersection(revision.source_actor_ids)),
                said_by=said,
                recorded_at=revision.recorded_at,
                source_message_id=message,
                source_message_readable=message is not None and homes.get(message) in person.readable,
                relation=relations[revision.pk],
                turns=[
                    UsedTurn(turn_id, created_at, names.get(conversation_id, ""), cited, wrote)
                    for turn_id, created_at, conversation_id, cited, wrote in turns.get(revision.pk, [])
                ],
                more_turns=more.get(revision.pk, 0),
                grants=shown_grants.get(revision.pk, []),
            )
        )
    return memories


def _recall_term(agent_param: str, source: str = "tr") -> str:
    """The disclosure predicate for the recall's own destination, read from the row ``source`` (a
    trace ``tr``, or the turn ``t`` for what the turn wrote: its audience, and the identity links of its
    one reader when it was a direct conversation, as ``linked_readers_for`` finds them) in the turn's
    conversation ``s.conversation_id``."""
    links = IdentityLink._meta.db_table
    linked = (
        f"(CASE WHEN {source}.audience_kind = 'members' AND cardinality({source}.audience_readers) = 1 THEN ARRAY("
        f"SELECT CASE WHEN l.actor_a_id = {source}.audience_readers[1] THEN l.actor_b_id ELSE l.actor_a_id END"
        f" FROM {links} l WHERE l.agent_id = {source}.agent_id AND l.revoked_at IS NULL"
        f" AND {source}.audience_readers[1] IN (l.actor_a_id, l.actor_b_id)) ELSE '{{}}'::bigint[] END)"
    )
    term = _viewer_term(f"rc{source}", agent_param, "s.conversation_id")
    for name, column in (
        ("kind", f"{source}.audience_kind"),
        ("namespace", f"{source}.audience_namespace"),
        ("readers", f"{source}.audience_readers"),
        ("linked", linked),
    ):
        term = term.replace(f"%(rc{source}_d_{name})s", column)
    assert f"%(rc{source}_" not in term, term
    return term


def _used_turns(
    person: _Person, revisions: Sequence[MemoryRevision]
) -> tuple[dict[int, list[tuple[int, datetime, int, bool, bool]]], dict[int, int]]:
    """Per revision, the most recent turns whose recalls had it in front of the agent or which wrote it,
    and which the person may see it on (one statement per agent), and how many more there are."""
    turns: dict[int, list[tuple[int, datetime, int, bool, bool]]] = {}
    more: dict[int, int] = {}
    for ceiling in person.ceilings:
        ids = [r.pk for r in revisions if r.agent_id == ceiling.agent_id]
        if not ids:
            continue
        params: dict[str, Any] = {
            "agent": ceiling.agent_id,
            "ids": ids,
            "readable": sorted(person.readable),
            "per": TURNS_PER_MEMORY,
        }
        viewer_terms = []
        for n, (audience, linked) in enumerate(ceiling.destinations):
            viewer_terms.append(_viewer_term(f"v{n}", "agent", "s.conversation_id"))
            params.update(_destination_params(f"v{n}", audience, linked, None))
        sql = (
            "SELECT revision_id, turn_id, created_at, conversation_id, cited, wrote, total FROM ("
            " SELECT u.revision_id, t.id AS turn_id, t.created_at, s.conversation_id,"
            " bool_or(rep.id IS NOT NULL AND u.revision_id = ANY(rep.cited_revision_ids)) AS cited,"
            " bool_or(u.trace_id IS NULL) AS wrote,"
            " row_number() OVER (PARTITION BY u.revision_id ORDER BY t.created_at DESC, t.id DESC) AS n,"
            " count(*) OVER (PARTITION BY u.revision_id) AS total"
            " FROM ("
            # A turn's own recalls, and its session's snapshot (in front of the agent for every turn).
            "  SELECT i.revision_id, i.trace_id, tr.turn_id FROM memory_recalltraceitem i"
            "  JOIN memory_recalltrace tr ON tr.id = i.trace_id"
            "  WHERE i.revision_id = ANY(%(ids)s) AND i.blocked_reason = '' AND tr.turn_id IS NOT NULL"
            "  UNION ALL"
            "  SELECT i.revision_id, i.trace_id, t0.id FROM memory_recalltraceitem i"
            "  JOIN memory_recalltrace tr ON tr.id = i.trace_id JOIN history_turn t0 ON t0.session_id = tr.session_id"
            "  WHERE i.revision_id = ANY(%(ids)s) AND i.blocked_reason = '' AND tr.moment IN ('snapshot', 'child')"
            "  UNION ALL"
            # The turn that wrote it (its ledger), judged by the turn's own destination.
            "  SELECT o.revision_id, NULL, o.turn_id FROM memory_memoryoperation o"
            "  WHERE o.revision_id = ANY(%(ids)s) AND o.turn_id IS NOT NULL"
            " ) u"
            " LEFT JOIN memory_recalltrace tr ON tr.id = u.trace_id"
            " JOIN history_turn t ON t.id = u.turn_id"
            " JOIN history_session s ON s.id = t.session_id"
            " JOIN memory_memoryrevision r ON r.id = u.revision_id"
            " LEFT JOIN history_message rep ON rep.id = t.reply_id"
            " WHERE r.agent_id = %(agent)s AND t.agent_id = %(agent)s"
            " AND s.conversation_id = ANY(%(readable)s::bigint[])"
            f" AND CASE WHEN u.trace_id IS NULL THEN {_recall_term('agent', 't')}"
            f" ELSE tr.agent_id = %(agent)s AND {_recall_term('agent')} END"
            f" AND ({' OR '.join(viewer_terms)})"
            " GROUP BY u.revision_id, t.id, t.created_at, s.conversation_id"
            ") used WHERE n <= %(per)s ORDER BY revision_id, created_at DESC, turn_id DESC"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            for revision_id, turn_id, created_at, conversation_id, cited, wrote, total in cursor.fetchall():
                turns.setdefault(revision_id, []).append((turn_id, created_at, conversation_id, cited, wrote))
                more[revision_id] = total - len(turns[revision_id])
    return turns, more
