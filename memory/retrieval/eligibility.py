"""Hard eligibility: the only place that decides which memory revisions and which messages a
perspective may see.

Every reader starts from :class:`EligibleRevisions` or :class:`EligibleMessages` and may only narrow
it: the recall arms, the delta, correction lines, history search and its neighbours, the trace view
and admin previews all embed this SQL and add conditions of their own; none writes its own
visibility rule. A memory revision is eligible for a turn only if, in SQL:

1. it belongs to the turn's agent (the first term of every predicate);
2. its entry is live and the revision is the entry's current one (or, for a historical query, the
   one current at ``known_at`` and valid at ``as_of``), its lifecycle admits live recall, and
   ``valid_from <= as_of < valid_to``;
3. its source audience may be disclosed to the destination audience (``engram_audience_allows``),
   or a live sharing grant admits it here (see "Grants" below);
4. its lineage is clean: a revision's source audience already folds in every source it was built
   from, most restrictive wins, when it was written (``memory.services``);
5. explicit restrictions hold: a revision restricted to one conversation appears only there, and a
   ``local`` revision from another project only when the query names its subject.

A message is eligible only if it belongs to the agent (through its conversation, never through a
search sidecar), connector source evidence exists for it (unknown provenance fails closed), its
audience may be disclosed to the destination (``engram_audience_allows``), and, for an agent reply,
its whole lineage may be too (``engram_reply_lineage_allows``). The lineage is the recursive walk over
the reply's provenance with the spec's hard caps; messages are immutable, so the database runs that
walk once, when the reply is inserted, and stores what it found with the reply
(``history.models.lineage_fold_trigger``); each read checks the stored ancestors' audiences, that
their conversations still exist, and the used revisions: by their folded audiences while none of them
was deleted, otherwise one by one with their live grants.

Grants. A grant is consent to one conversation, not to an audience class. Spec 000 makes sharing
revision-scoped and decided only by people (the authenticated source actor's confirmation or an
operator's review, never a model), and spec 003 makes ``engram_audience_allows`` the whole disclosure
rule, "never loosened". So a live grant of this agent admits its revision only when

- the destination *is* the conversation the grant was approved for (``g.conversation_id``, bound from
  the perspective as ``el_d_conversation``; a perspective without a conversation, or a grant without
  one, admits nothing by grant), and
- that conversation's audience is still within the audience consented to
  (``engram_audience_allows(grant audience, destination)``): a room widened since is not what the
  person agreed to;

and never for a revision of unknown or mixed ("nobody") provenance, for which no one person can
consent. A DM memory granted into ``#atlas-core`` is therefore recalled in ``#atlas-core`` only: not in
another person's DM, another channel of the workspace, or another workspace, even when the grant's
audience (say, ``public``) would reach them. Replies follow the revision: the lineage rule
(``engram_reply_lineage_allows`` -> ``engram_revisions_disclosable``) takes the destination
conversation too, so a reply built on a granted revision is readable only where the grant is. The
trace view judges its items by the same fragment (:func:`memory.selectors.items_within_ceilings`).
docs/grants.md states the rule for operators.

Rows withheld because their provenance is unknown are never returned; :meth:`withheld_unknown_sql`
only counts them, for the audit's ``eligibility_withheld_unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from accounts.models import IdentityLink
from config.database.base import prepared_cursor
from history.audience import Audience
from history.models import Conversation, Turn

#: Columns every eligible row exposes to the arms (``el.<name>``).
ELIGIBLE_COLUMNS = (
    "r.id AS revision_id, r.entry_id, r.number, r.body, r.subject_id, r.source_actor_id, r.source_actor_ids, "
    "r.belief_type, r.portability, r.origin_scope, r.confidence, r.authority, r.salience, r.always_on, r.lifecycle, "
    "r.valid_from, r.valid_to, r.recorded_at, r.restricted_to_conversation_id, r.supersedes_id, "
    "e.utility, e.last_used_at, e.flagged_for_review"
)


#: The ``ELIGIBLE_COLUMNS`` of revisions, to be joined by id to ids drawn from an eligible set in the
#: same statement (one snapshot), with no eligibility rule of its own. Having no agent term is what
#: keeps it a primary-key probe per id: with one, a planner whose statistics have not yet seen a
#: new agent's rows would read every revision of that agent instead.
ELIGIBLE_ROWS = f"SELECT {ELIGIBLE_COLUMNS} FROM memory_memoryrevision r JOIN memory_memoryentry e ON e.id = r.entry_id"


@dataclass(frozen=True)
class Perspective:
    """Who is asking, bound from credentials and the turn, never from request arguments."""

    agent_id: int
    destination: Audience
    conversation_id: int | None = None
    requester_id: int | None = None
    project: str = ""
    #: Actors joined to the destination's single reader by verified, unrevoked identity links.
    linked_readers: tuple[int, ...] = ()


#: The agent's unrevoked identity links that name a reader (fixed text: every turn binds a perspective).
LINKED_READERS_SQL = (
    f"SELECT actor_a_id, actor_b_id FROM {IdentityLink._meta.db_table}"
    " WHERE agent_id = %(agent_id)s AND revoked_at IS NULL AND (actor_a_id = %(reader)s OR actor_b_id = %(reader)s)"
)


def linked_readers_for(agent_id: int, destination: Audience) -> tuple[int, ...]:
    """Actors a verified, unrevoked identity link joins to a direct destination's one reader."""
    if not destination.is_direct:
        return ()
    return linked_actors(agent_id, destination.readers[0])


def linked_actors(agent_id: int, reader: int) -> tuple[int, ...]:
    """Actors a verified, unrevoked identity link of the agent's joins to ``reader``."""
    with prepared_cursor() as cursor:
        cursor.execute(LINKED_READERS_SQL, {"agent_id": agent_id, "reader": reader})
        links = cursor.fetchall()
    return tuple(sorted({a if b == reader else b for a, b in links}))


def perspective_for_turn(turn: Turn, *, project: str | None = None) -> Perspective:
    conversation = turn.session.conversation
    return Perspective(
        agent_id=turn.agent_id,
        destination=turn.audience,
        conversation_id=conversation.pk,
        requester_id=turn.requester_id,
        project=conversation.project if project is None else project,
        linked_readers=linked_readers_for(turn.agent_id, turn.audience),
    )


def perspective_for_conversation(conversation: Conversation, *, requester_id: int | None = None) -> Perspective:
    """The perspective of a turn in ``conversation`` as it stands now (snapshots, previews)."""
    return Perspective(
        agent_id=conversation.agent_id,
        destination=conversation.audience,
        conversation_id=conversation.pk,
        requester_id=requester_id,
        project=conversation.project,
        linked_readers=linked_readers_for(conversation.agent_id, conversation.audience),
    )


#: The destination arguments every disclosure function takes, bound by ``destination_params``.
DESTINATION_ARGS = "%(el_d_kind)s, %(el_d_namespace)s, %(el_d_readers)s::bigint[], %(el_d_linked)s::bigint[]"
#: The destination arguments of the functions that also read grants: the audience and the conversation
#: (a grant admits its revision only in the conversation it was approved for).
DISCLOSURE_ARGS = f"{DESTINATION_ARGS}, %(el_d_conversation)s::bigint"


def destination_params(perspective: Perspective) -> dict[str, Any]:
    d = perspective.destination
    return {
        "el_agent": perspective.agent_id,
        "el_d_kind": str(d.kind),
        "el_d_namespace": d.namespace,
        "el_d_readers": list(d.readers),
        "el_d_linked": list(perspective.linked_readers),
        "el_d_conversation": perspective.conversation_id,
        "el_conversation": perspective.conversation_id,
    }


#: Whether an agent has any revision of unknown provenance (fixed text; a partial index answers it).
UNKNOWN_PROVENANCE_SQL = (
    "SELECT EXISTS (SELECT 1 FROM memory_memoryrevision WHERE agent_id = %s AND audience_kind = 'unknown')"
)


def live_knowledge(at: str, *, include_provisional: bool = True) -> str:
    """The terms that make an entry ``e`` and its current revision ``r`` live knowledge at ``at`` (an SQL
    placeholder): the entry not forgotten, the revision active (or provisional, when included) and valid
    then, and no other live entry superseding it. The eligible set's own terms; a reader that lists
    live memories some other way (the person's "what the agent knows about you") narrows with these."""
    allowed = "('active', 'provisional')" if include_provisional else "('active')"
    return (
        "e.status = 'live'"
        f" AND r.lifecycle IN {allowed}"
        f" AND r.valid_from <= {at} AND (r.valid_to IS NULL OR r.valid_to > {at})"
        # A revision another live entry explicitly superseded is no longer current knowledge.
        " AND NOT EXISTS (SELECT 1 FROM memory_memoryrevision s"
        " JOIN memory_memoryentry se ON se.current_revision_id = s.id AND se.status = 'live'"
        " WHERE s.supersedes_id = r.id AND s.entry_id <> r.entry_id)"
    )


@dataclass(frozen=True)
class EligibleRevisions:
    """The eligible base set for one perspective, as an SQL subquery with named parameters.

    ``as_of`` / ``known_at`` make the query historical: the revision current at ``known_at`` (default
    now) and valid at ``as_of`` (default now), superseded and expired lifecycles included.
    """

    perspective: Perspective
    as_of: datetime | None = None
    known_at: datetime | None = None
    include_provisional: bool = True
    named_subject_ids: tuple[int, ...] = ()
    now: datetime = field(default_factory=timezone.now)

    @property
    def historical(self) -> bool:
        return self.as_of is not None or self.known_at is not None

    def params(self) -> dict[str, Any]:
        return {
            **destination_params(self.perspective),
            "el_as_of": self.as_of or self.now,
            "el_known_at": self.known_at or self.now,
            "el_project": self.perspective.project,
            "el_named_subjects": list(self.named_subject_ids),
        }

    def sql(self) -> str:
        """``SELECT <ELIGIBLE_COLUMNS> FROM ... WHERE <every eligibility rule>``; alias it ``el``."""
        return self._select(self._audience_or_grant())

    def withheld_unknown_sql(self) -> str:
        """Rows passing every rule but the audience one because their provenance is unknown. Count only."""
        return self._select("r.audience_kind = 'unknown'")

    def may_withhold_unknown(self) -> bool:
        """False when the agent has no revision of unknown provenance, so :meth:`withheld_unknown_sql`
        can only count zero and need not be planned (one eligibility subquery fewer: about 2 ms of
        planning a recall). A revision of unknown provenance written after this call and before the
        count's statement goes uncounted, as if the recall had come first."""
        with prepared_cursor() as cursor:
            cursor.execute(UNKNOWN_PROVENANCE_SQL, [self.perspective.agent_id])
            row = cursor.fetchone()
        return bool(row and row[0])

    def _select(self, disclosure: str) -> str:
        return f"SELECT {ELIGIBLE_COLUMNS} FROM {self._current_revisions()} WHERE {self._common()} AND {disclosure}"

    def _current_revisions(self) -> str:
        if not self.historical:
            return (
                "memory_memoryentry e JOIN memory_memoryrevision r "
                "ON r.id = e.current_revision_id AND r.agent_id = %(el_agent)s"
            )
        # The revision current at known_at that held at as_of: later revisions recorded after
        # known_at are unknown to the query; earlier ones whose validity ended are not "then".
        return (
            "memory_memoryentry e CROSS JOIN LATERAL ("
            " SELECT * FROM memory_memoryrevision h"
            " WHERE h.entry_id = e.id AND h.agent_id = %(el_agent)s AND h.recorded_at <= %(el_known_at)s"
            " AND h.valid_from <= %(el_as_of)s AND (h.valid_to IS NULL OR h.valid_to > %(el_as_of)s)"
            " ORDER BY h.number DESC LIMIT 1) r"
        )

    def _common(self) -> str:
        if self.historical:
            # What held then: superseded and expired revisions are history, not noise.
            entry_state = (
                "e.created_at <= %(el_known_at)s AND (e.forgotten_at IS NULL OR e.forgotten_at > %(el_known_at)s)"
            )
            lifecycle = "TRUE" if self.include_provisional else "r.lifecycle <> 'provisional'"
            state = f"{entry_state} AND {lifecycle}"
        else:
            state = live_knowledge("%(el_as_of)s", include_provisional=self.include_provisional)
        return (
            f"e.agent_id = %(el_agent)s AND {state}"
            " AND (r.restricted_to_conversation_id IS NULL OR r.restricted_to_conversation_id = %(el_conversation)s)"
            " AND (r.portability <> 'local' OR r.origin_scope = '' OR r.origin_scope = %(el_project)s"
            " OR r.subject_id = ANY(%(el_named_subjects)s::bigint[]))"
        )

    @staticmethod
    def _audience_or_grant() -> str:
        destination = DESTINATION_ARGS
        return (
            "(engram_audience_allows(r.audience_kind, r.audience_namespace, r.audience_readers, "
            f"{destination}) OR EXISTS (SELECT 1 FROM memory_sharinggrant g WHERE g.revision_id = r.id "
            # A grant never rescues unknown or mixed provenance: nobody could consent for it.
            "AND g.agent_id = %(el_agent)s AND g.revoked_at IS NULL AND r.audience_kind NOT IN ('unknown', 'nobody')"
            # Only in the conversation it was approved for, never wherever its audience class reaches.
            " AND g.conversation_id = %(el_d_conversation)s::bigint"
            " AND engram_audience_allows("
            f"g.audience_kind, g.audience_namespace, g.audience_readers, {destination})))"
        )


#: Columns every eligible message exposes (``em.<name>``).
MESSAGE_COLUMNS = "m.id AS message_id, m.conversation_id, m.actor_id, m.direction, m.body, m.created_at"


@dataclass(frozen=True)
class EligibleMessages:
    """The eligible transcript for one perspective, as an SQL subquery with named parameters.

    Each rule is also exposed on its own (``rules()``), in the order the search audit attributes an
    excluded match to the first rule that removed it.
    """

    perspective: Perspective

    def params(self) -> dict[str, Any]:
        return destination_params(self.perspective)

    @staticmethod
    def owned() -> str:
        """The FROM clause: the messages, aliased ``m``. Every reader narrows it by :meth:`ownership`
        (part of :meth:`predicate`) before any other rule."""
        return "history_message m"

    @staticmethod
    def ownership() -> str:
        """The message is the agent's and so is its conversation (the perspective); a message whose
        conversation is missing fails closed. The conversation is read by a scalar subquery, one probe
        per message: every reader judges messages one by one (a scan's matches, a hit's neighbours, a
        list of ids), and as a join the planner rebuilt a hash of the agent's conversations for each."""
        return (
            "m.agent_id = %(el_agent)s AND "
            "(SELECT c.agent_id FROM history_conversation c WHERE c.id = m.conversation_id) = %(el_agent)s"
        )

    @staticmethod
    def rules() -> list[tuple[str, str]]:
        return [
            # OFFSET 0: one index probe per judged message. Without it the planner may hash the whole
            # evidence table (every message ever ingested) to judge a few hundred matches.
            (
                "no_evidence",
                "EXISTS (SELECT 1 FROM history_messagesourceevidence ev WHERE ev.message_id = m.id OFFSET 0)",
            ),
            (
                "audience",
                "engram_audience_allows(m.audience_kind, m.audience_namespace, m.audience_readers, "
                f"{DESTINATION_ARGS})",
            ),
            (
                "lineage",
                "(m.direction = 'inbound' OR engram_reply_lineage_allows(%(el_agent)s, m.lineage_audiences, "
                "m.lineage_conversation_ids, m.lineage_revision_ids || m.memory_revision_ids, "
                f"m.lineage_revision_audiences, {DISCLOSURE_ARGS}))",
            ),
        ]

    def predicate(self) -> str:
        return " AND ".join([self.ownership(), *(condition for _, condition in self.rules())])

    def sql(self) -> str:
        """``SELECT <MESSAGE_COLUMNS> FROM ... WHERE <every rule>``; alias it ``em``."""
        return f"SELECT {MESSAGE_COLUMNS} FROM {self.owned()} WHERE {self.predicate()}"
