"""Randomized privacy contract of history search: whatever the transcript and the search, nothing leaks.

The recall fuzz's seeded world (``tests.fuzz_world``) is given a transcript through the services:
every conversation gets bursts of inbound lines from its members and agent replies, some inbound
lines have no source evidence, one private room is widened midway (its earlier lines keep the
audience they were written under), and many replies carry provenance that points at other rooms'
private lines, at private, unknown or "nobody" memories, at unauthenticated lines, at another agent's
lines or at nothing at all: laundering attempts, some through replies of replies, and a few at the
500 history-id cap. Over a thousand random ``search_history`` calls follow (random agent, room and
requester, words from the corpus, structural filters, excluded ids, and sometimes a hostile provider
proposing any message id in the database as a perfect match). Every hit and every neighbour is
checked by an oracle written here from ORM rows and ``history.audience.audience_allows``, never from
the search SQL:

- its conversation belongs to the perspective's agent, and connector source evidence exists for it;
- its audience may reach the destination (with the identity links of that agent touching the
  destination's single reader);
- for an agent reply, its whole lineage may too: every message reachable through
  ``history_message_ids`` exists, is the agent's, has evidence, carries at most 500 ids and has an
  audience that reaches the destination; every memory revision any of them used is the agent's and
  reaches it by its audience or by an unrevoked grant approved for this very conversation (never
  wherever the grant's audience class reaches); over 500 direct ids or 5,000 nodes deny it all;
- no result is an excluded id, a hit satisfies the structural filters, a neighbour shares its hit's
  conversation, and the text returned is the stored row's.

The seed makes a failure reproducible: ``SEED`` and the printed case identify it.
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import cycle, islice

import pytest
from django.utils import timezone

from accounts.models import Connector
from config.replica import ReplicaStats
from history.audience import Audience, AudienceKind
from history.models import Conversation, EvidenceMethod, Message, MessageDirection, MessageSourceEvidence
from history.services import conversation_upsert, message_ingest, reply_record
from memory.models import SharingGrant
from memory.retrieval.eligibility import EligibleMessages, perspective_for_conversation
from memory.retrieval.history_search import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    FoundMessage,
    HistoryQuery,
    HistoryResult,
    search_history,
)
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import content_terms
from tests.fuzz_world import (
    NOISE_WORDS,
    AgentWorld,
    Oracle,
    analyze,
    build_world,
    random_requester,
    readers_of,
    sentence,
)

pytestmark = pytest.mark.django_db

SEED = 20250317
ROUNDS = 4
SEARCHES = 1_200
#: On the replica every search first waits for the replica to replay the previous search's audit row
#: (read-your-writes), so the routed run is shorter; the rule it checks is the same SQL. With this
#: seed's world the first 420 searches reach every admission path, a grant through lineage included.
REPLICA_SEARCHES = 420
#: Replies in each chain of replies of replies.
CHAIN = 6
#: The lineage caps of spec 003: over them the whole read is denied.
MAX_HISTORY_IDS, MAX_LINEAGE_NODES = 500, 5_000
#: Ids no row has: provenance pointing at nothing must deny, not be skipped.
MISSING_MESSAGE_ID = MISSING_REVISION_ID = 9_000_000_000


@dataclass
class Transcript:
    """One agent's transcript as the builder wrote it, sorted by what a search may aim at."""

    lines: list[Message] = field(default_factory=list)
    #: Lines of members-only and external rooms: what laundering replies point at.
    private: list[Message] = field(default_factory=list)
    replies: list[Message] = field(default_factory=list)
    unproven: list[Message] = field(default_factory=list)
    #: Lines that must stay hidden somewhere: private lines, unproven lines, replies with provenance.
    targets: list[Message] = field(default_factory=list)
    #: Revisions with a live grant, by the conversation it was approved for: a reply built on one may
    #: be read there, and nowhere else its own audience does not already admit the revision.
    granted: dict[int, list[int]] = field(default_factory=dict)
    #: Replies carrying exactly the 500 history ids the lineage rule still accepts.
    at_cap: list[int] = field(default_factory=list)

    def add(self, message: Message, *, proven: bool) -> None:
        self.lines.append(message)
        if message.audience_kind in (AudienceKind.MEMBERS, AudienceKind.EXTERNAL):
            self.private.append(message)
            self.targets.append(message)
        if not proven:
            self.unproven.append(message)
            self.targets.append(message)
        if message.direction == MessageDirection.OUTBOUND:
            self.replies.append(message)
            if message.history_message_ids or message.memory_revision_ids:
                self.targets.append(message)


@dataclass
class Strangers:
    """Other agents' rows, which no reply of this agent may be built on."""

    messages: list[Message]
    revisions: list[int]


def provenance(
    rng: random.Random, world: AgentWorld, conversation: Conversation, mine: Transcript, theirs: Strangers
) -> tuple[list[int], list[int]]:
    """A reply's ``history_message_ids`` and ``memory_revision_ids``: the exchange it answers, and
    often something it should not be able to carry into this room."""
    recent = [m.pk for m in mine.lines[-40:] if m.conversation_id == conversation.pk][-3:]
    history = rng.sample(recent, rng.randint(0, len(recent)))
    revisions: list[int] = []
    elsewhere = [m for m in mine.private[-200:] if m.conversation_id != conversation.pk]
    roll = rng.random()
    if roll < 0.3:
        pass  # built only on this room's exchange
    elif roll < 0.5 and elsewhere:
        history += [m.pk for m in rng.sample(elsewhere, min(len(elsewhere), rng.randint(1, 2)))]
    elif roll < 0.6:
        revisions += [r.pk for r in rng.sample(world.revisions, rng.randint(1, 2))]
    elif roll < 0.68 and mine.granted:
        # Mostly a revision granted into this room; sometimes one granted into another room, which the
        # reply must not carry here.
        granted_here = mine.granted.get(conversation.pk, [])
        anywhere = [r for ids in mine.granted.values() for r in ids]
        revisions.append(rng.choice(granted_here if granted_here and rng.random() < 0.75 else anywhere))
    elif roll < 0.83 and mine.replies:
        # A reply of a reply, of this room (chains grow round by round) or of anywhere: walk it all.
        here = [m for m in mine.replies[-30:] if m.conversation_id == conversation.pk]
        history.append(rng.choice(here if here and rng.random() < 0.6 else mine.replies[-8:]).pk)
    elif roll < 0.89 and mine.unproven:
        history.append(rng.choice(mine.unproven).pk)
    elif roll < 0.93 and theirs.messages:
        history.append(rng.choice(theirs.messages).pk)
    elif roll < 0.96:
        revisions.append(rng.choice(theirs.revisions))
    elif roll < 0.98:
        history.append(MISSING_MESSAGE_ID)
    else:
        revisions.append(MISSING_REVISION_ID)
    return history, revisions


def add_burst(
    rng: random.Random,
    world: AgentWorld,
    conversation: Conversation,
    at: datetime,
    mine: Transcript,
    theirs: Strangers,
) -> None:
    """A few minutes of one exchange: members speak, the agent sometimes answers."""
    names = [a.display_name for a in world.actors]
    for i in range(rng.randint(2, 5)):
        when = at + timedelta(minutes=6 * i + rng.randint(0, 4))
        if i and rng.random() < 0.4:
            agent_reply(rng, world, mine, conversation, when, *provenance(rng, world, conversation, mine, theirs))
            continue
        proven = rng.random() > 0.1
        message = message_ingest(
            conversation=conversation,
            actor=rng.choice(readers_of(conversation, world)),
            body=sentence(rng, names),
            created_at=when,
            evidence_method=rng.choice([EvidenceMethod.CONNECTOR_SIGNED, EvidenceMethod.CONNECTOR_API])
            if proven
            else None,
        ).message
        mine.add(message, proven=proven)


def add_transcripts(rng: random.Random, worlds: list[AgentWorld], start: datetime) -> dict[int, Transcript]:
    """Bursts in every conversation, a day apart per round, rooms interleaved across agents."""
    evidenced = set(MessageSourceEvidence.objects.values_list("message_id", flat=True))
    transcripts: dict[int, Transcript] = {}
    for world in worlds:
        transcripts[world.agent.pk] = transcript = Transcript()
        for message in Message.objects.filter(agent=world.agent).order_by("id"):
            transcript.add(message, proven=message.pk in evidenced)
        for conversation_id, revision_id in SharingGrant.objects.filter(
            agent=world.agent, revoked_at__isnull=True
        ).values_list("conversation_id", "revision_id"):
            transcript.granted.setdefault(conversation_id, []).append(revision_id)
    for round_ in range(ROUNDS):
        if round_ == ROUNDS // 2:
            for world in worlds:
                # A private room opened to the workspace: its earlier lines keep their members audience.
                index = next(i for i, c in enumerate(world.conversations) if c.external_thread_id == "G-private-0")
                opened = world.conversations[index]
                world.conversations[index] = conversation_upsert(
                    agent=world.agent,
                    connector=world.slack,
                    external_thread_id=opened.external_thread_id,
                    audience=Audience.workspace(world.slack.namespace),
                )
        rooms = [(world, conversation) for world in worlds for conversation in world.conversations]
        rng.shuffle(rooms)
        for world, conversation in rooms:
            theirs = Strangers(
                messages=[m for other, t in transcripts.items() if other != world.agent.pk for m in t.lines[-50:]],
                revisions=[r.pk for w in worlds if w is not world for r in w.revisions],
            )
            at = start + timedelta(days=round_, hours=rng.uniform(0, 20))
            add_burst(rng, world, conversation, at, transcripts[world.agent.pk], theirs)
    for world in worlds:
        add_edge_cases(rng, world, transcripts[world.agent.pk], start)
    return transcripts


def agent_reply(
    rng: random.Random,
    world: AgentWorld,
    mine: Transcript,
    room: Conversation,
    at: datetime,
    history: list[int],
    revisions: Sequence[int] = (),
) -> Message:
    """The agent's reply in ``room``, recorded through the service with the provenance given."""
    message = reply_record(
        turn_conversation=room,
        body=sentence(rng, [a.display_name for a in world.actors]),
        history_message_ids=history,
        memory_revision_ids=list(revisions),
        cited_revision_ids=list(revisions[:1]),
        created_at=at,
    )
    mine.add(message, proven=True)
    return message


def add_edge_cases(rng: random.Random, world: AgentWorld, mine: Transcript, start: datetime) -> None:
    """Replies at the lineage caps, built only on public lines (exactly 500 ids pass; 501 deny, and so
    does a reply whose ancestor carries 501), and two chains of replies of replies: one on public
    lines, admitted everywhere at any depth, and one whose root carries a direct message into a
    workspace room, admitted only in that person's own direct conversations.

    The capped replies are dated before the transcript, so neighbour windows stay on the rooms'
    everyday lines; searches aim at them directly, and hostile providers propose them."""
    rooms = {c.external_thread_id: c for c in world.conversations}
    # People's own authenticated lines: replies would bring their own lineage along.
    unproven = {m.pk for m in mine.unproven}
    said = [m for m in mine.lines if m.direction == MessageDirection.INBOUND and m.pk not in unproven]
    public = [m.pk for m in said if m.audience_kind == AudienceKind.PUBLIC]
    direct = [m.pk for m in said if m.audience_kind == AudienceKind.MEMBERS and len(m.audience_readers) == 1]
    assert public and direct, "no authenticated public or direct line to build on"
    announce, early, at = rooms["C-announce"], start - timedelta(days=1), start + timedelta(days=ROUNDS)
    at_cap = agent_reply(rng, world, mine, announce, early, list(islice(cycle(public), MAX_HISTORY_IDS)))
    capped = agent_reply(rng, world, mine, announce, early, list(islice(cycle(public), MAX_HISTORY_IDS + 1)))
    agent_reply(rng, world, mine, announce, early, [capped.pk])
    mine.at_cap.append(at_cap.pk)
    for room, root in ((announce, rng.choice(public)), (rooms["C-borealis"], rng.choice(direct))):
        parent = root
        for depth in range(CHAIN):
            at += timedelta(minutes=3)
            parent = agent_reply(rng, world, mine, room, at, [parent, rng.choice(public)] if depth else [parent]).pk


@dataclass
class Everything:
    """A candidate provider proposing any message in the database, eligible or not, as a perfect match:
    whatever a provider proposes must pass eligibility again."""

    ids: list[int]
    name: str = "semantic"
    in_database: bool = True

    def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
        return [ArmHit(self.name, message_id, rank, 1.0) for rank, message_id in enumerate(self.ids[:limit], 1)]


# --------------------------------------------------------------------------------------------------
# The oracle: plain Python over ORM rows.
# --------------------------------------------------------------------------------------------------


@dataclass
class TranscriptOracle:
    """The shared oracle's memory rows, plus the transcript: every message, its conversation, and
    which messages have source evidence."""

    memory: Oracle
    messages: dict[int, Message]
    conversations: dict[int, Conversation]
    evidenced: set[int]
    connector_agents: dict[int, int]

    @classmethod
    def load(cls) -> TranscriptOracle:
        return cls(
            memory=Oracle.load(),
            messages=Message.objects.in_bulk(),
            conversations=Conversation.objects.select_related("connector").in_bulk(),
            evidenced=set(MessageSourceEvidence.objects.values_list("message_id", flat=True)),
            connector_agents=dict(Connector.objects.values_list("id", "agent_id")),
        )

    def violations(self, message_id: int, conversation_id: int) -> tuple[list[str], str]:
        """The rules a returned message breaks in this conversation (empty: it may be shown), and the
        path that admits it: its audience, an identity link, and for a reply with provenance, its lineage."""
        message = self.messages.get(message_id)
        if message is None:
            return ["no such message"], ""
        here = self.conversations[conversation_id]
        agent_id, destination = here.agent_id, here.audience
        linked = self.memory.linked_readers(agent_id, destination)
        broken: list[str] = []
        if self.conversations[message.conversation_id].agent_id != agent_id:
            broken.append("another agent's conversation")
        if message_id not in self.evidenced:
            broken.append("no source evidence")
        path = self.memory.text_path(message.audience, destination, linked)
        if not path:
            broken.append(f"audience {message.audience} may not reach {destination}")
        if message.direction == MessageDirection.OUTBOUND:
            lineage, lineage_path = self.lineage(message, agent_id, destination, linked, conversation_id)
            broken += lineage
            path = f"{path}+{lineage_path}" if lineage_path else path
        return broken, path

    def lineage(
        self, reply: Message, agent_id: int, destination: Audience, linked: set[int], conversation_id: int
    ) -> tuple[list[str], str]:
        """What the reply's provenance breaks, walked here from rows, and how the lineage was admitted
        (a revision by grant only in the conversation the grant was approved for)."""
        ids, revision_ids = reply.history_message_ids, reply.memory_revision_ids
        if not ids and not revision_ids:
            return [], ""
        if len(ids) > MAX_HISTORY_IDS:
            return [f"lineage: {len(ids)} history ids (cap {MAX_HISTORY_IDS})"], ""
        walked: dict[int, int] = {}  # ancestor id -> depth
        queue = deque((message_id, 1) for message_id in ids)
        while queue:
            message_id, depth = queue.popleft()
            if message_id in walked:
                continue
            walked[message_id] = depth
            if len(walked) > MAX_LINEAGE_NODES:
                return [f"lineage: more than {MAX_LINEAGE_NODES} nodes"], ""
            parent = self.messages.get(message_id)
            if parent is not None:
                queue.extend((grand, depth + 1) for grand in parent.history_message_ids)
        broken: list[str] = []
        used: set[int] = set()
        for message_id in walked:
            node = self.messages.get(message_id)
            if node is None:
                broken.append(f"lineage: message {message_id} does not exist")
                continue
            used.update(node.memory_revision_ids)
            if node.agent_id != agent_id or self.conversations[node.conversation_id].agent_id != agent_id:
                broken.append(f"lineage: message {message_id} is another agent's")
            if len(node.history_message_ids) > MAX_HISTORY_IDS:
                broken.append(f"lineage: message {message_id} carries {len(node.history_message_ids)} ids")
            if message_id not in self.evidenced:
                broken.append(f"lineage: message {message_id} has no source evidence")
            if not self.memory.text_path(node.audience, destination, linked):
                broken.append(f"lineage: message {message_id} ({node.audience}) may not reach {destination}")
        if len(walked) + len(used) + len(revision_ids) > MAX_LINEAGE_NODES:
            broken.append(f"lineage: more than {MAX_LINEAGE_NODES} nodes and revisions")
        paths = set()
        for revision_id in sorted(used | set(revision_ids)):
            revision = self.memory.revisions.get(revision_id)
            if revision is None or revision.agent_id != agent_id:
                broken.append(f"lineage: revision {revision_id} is not this agent's")
                continue
            revision_path = self.memory.revision_path(revision, agent_id, destination, linked, conversation_id)
            if not revision_path:
                broken.append(f"lineage: revision {revision_id} ({revision.audience}) may not reach {destination}")
            paths.add(revision_path)
        depth = max(walked.values(), default=0)
        return broken, "lineage" + ("_grant" if "grant" in paths else "") + f"@{depth}"

    def identities(self, agent_id: int, requester_id: int | None) -> set[int]:
        """The requester and everyone an unrevoked identity link of this agent joins them to."""
        if requester_id is None:
            return set()
        joined = {requester_id}
        for link in self.memory.links[agent_id]:
            if link.revoked_at is None and requester_id in (link.actor_a_id, link.actor_b_id):
                joined |= {link.actor_a_id, link.actor_b_id}
        return joined

    def actor_filter(self, agent_id: int, text: str, requester_id: int | None) -> set[int]:
        """The actors an actor filter names, among this agent's own: nobody else can be named."""
        if text == "requester":
            return self.identities(agent_id, requester_id)
        own = [a for a in self.memory.actors.values() if self.connector_agents[a.connector_id] == agent_id]
        return {
            a.pk
            for a in own
            if a.external_id == text or a.display_name.lower() == text.lower() or (text.isdigit() and a.pk == int(text))
        }

    def filter_breaks(self, found: FoundMessage, query: HistoryQuery, actor_ids: set[int] | None) -> list[str]:
        """Structural filters only narrow: the filters a hit falls outside of."""
        message = self.messages[found.message_id]
        conversation = self.conversations[message.conversation_id]
        broken = []
        if actor_ids is not None and message.actor_id not in actor_ids:
            broken.append(f"actor {message.actor_id} outside filter {query.actor!r}")
        if query.conversation_id is not None and message.conversation_id != query.conversation_id:
            broken.append(f"conversation {message.conversation_id} outside filter {query.conversation_id}")
        if query.connector and query.connector != conversation.connector.namespace:
            broken.append(f"connector {conversation.connector.namespace} outside filter {query.connector}")
        if query.since and message.created_at < query.since:
            broken.append("written before since")
        if query.until and message.created_at >= query.until:
            broken.append("written at or after until")
        return broken

    def stored_differs(self, found: FoundMessage) -> bool:
        message = self.messages[found.message_id]
        return (found.conversation_id, found.actor_id, found.direction, found.created_at, found.body) != (
            message.conversation_id,
            message.actor_id,
            message.direction,
            message.created_at,
            message.body,
        )


# --------------------------------------------------------------------------------------------------
# Random searches.
# --------------------------------------------------------------------------------------------------


def random_text(rng: random.Random, world: AgentWorld, mine: Transcript, everyone: list[Message]) -> str:
    roll = rng.random()
    if roll < 0.06:
        return rng.choice(["", "what's new?", "anything I should know"])
    if roll < 0.84:
        # Words of one of this agent's lines (often one that must stay hidden somewhere), or of another
        # agent's: the lexical arm finds them all, eligibility must sort them.
        pool = mine.lines if roll < 0.4 else mine.targets if roll < 0.76 else everyone
        words = content_terms(rng.choice(pool).body)
        return " ".join(rng.sample(words, min(len(words), rng.randint(1, 4))))
    if roll < 0.9:
        return " ".join(rng.sample(NOISE_WORDS, 2))
    words = content_terms(rng.choice(mine.lines).body)
    return f"what did {rng.choice(world.actors).display_name} say about {rng.choice(words)}?"


def random_query(
    rng: random.Random, world: AgentWorld, worlds: list[AgentWorld], text: str, start: datetime
) -> HistoryQuery:
    """Structural filters, each sometimes: some name this agent's people and rooms, some another
    agent's (which must narrow to nothing), some nobody's."""
    others = [w for w in worlds if w is not world]
    actor = conversation_id = connector = since = until = None
    if rng.random() < 0.2:
        someone = rng.choice(world.actors)
        stranger = rng.choice(rng.choice(others).actors)
        actor = rng.choice(
            [
                "requester",
                someone.display_name,
                someone.external_id,
                str(someone.pk),
                str(stranger.pk),
                stranger.external_id,
                "Nobody",
            ]
        )
    if rng.random() < 0.15:
        conversation_id = rng.choice([*world.conversations, rng.choice(rng.choice(others).conversations)]).pk
    if rng.random() < 0.1:
        connector = rng.choice(["slack:acme", "email:acme.example", "slack:elsewhere"])
    if rng.random() < 0.15:
        since = start + timedelta(hours=rng.uniform(-24, 24 * ROUNDS))
        if rng.random() < 0.6:
            until = since + timedelta(hours=rng.uniform(1, 96))
    return HistoryQuery(
        text=text,
        actor=actor,
        conversation_id=conversation_id,
        connector=connector,
        since=since,
        until=until,
        # Mostly the tool's default; sometimes anything up to the cap, where hits bring the most neighbours.
        limit=DEFAULT_LIMIT if rng.random() < 0.6 else rng.randint(1, MAX_LIMIT),
    )


@dataclass
class Tally:
    cases: int = 0
    hits: int = 0
    neighbours: int = 0
    leaks: list[str] = field(default_factory=list)
    destinations: Counter[str] = field(default_factory=Counter)
    origins: Counter[str] = field(default_factory=Counter)
    paths: Counter[str] = field(default_factory=Counter)
    excluded: Counter[str] = field(default_factory=Counter)
    deepest: int = 0
    admitted: set[int] = field(default_factory=set)


def check(
    oracle: TranscriptOracle,
    tally: Tally,
    case: str,
    result: HistoryResult,
    *,
    conversation: Conversation,
    query: HistoryQuery,
    requester_id: int | None,
    excluded: set[int],
) -> None:
    """Every hit and every neighbour against the oracle; the named rules each one breaks are leaks."""
    actor_ids = (
        oracle.actor_filter(conversation.agent_id, query.actor, requester_id) if query.actor is not None else None
    )
    returned: set[int] = set()
    for hit in result.hits:
        for role, found in [("hit", hit.message), *(("neighbour", n) for n in [*hit.before, *hit.after])]:
            if role == "hit":
                tally.hits += 1
            else:
                tally.neighbours += 1
            returned.add(found.message_id)
            broken, path = oracle.violations(found.message_id, conversation.pk)
            if found.message_id in excluded:
                broken.append("an excluded id")
            if found.message_id in oracle.messages and oracle.stored_differs(found):
                broken.append("text or metadata differ from the stored row")
            if role == "hit" and found.message_id in oracle.messages:
                broken += oracle.filter_breaks(found, query, actor_ids)
            if role == "neighbour" and found.conversation_id != hit.message.conversation_id:
                broken.append("a neighbour from another conversation")
            if broken:
                message = oracle.messages.get(found.message_id)
                where = (
                    f"{message.direction} in {oracle.conversations[message.conversation_id].external_thread_id}"
                    f" ({message.audience})"
                    if message
                    else "?"
                )
                tally.leaks.append(f"{case}: {role} message {found.message_id} ({where}) breaks {broken}")
                continue
            tally.admitted.add(found.message_id)
            tally.origins[oracle.messages[found.message_id].audience_kind] += 1
            tally.paths[path.split("@")[0]] += 1
            if "@" in path:
                tally.deepest = max(tally.deepest, int(path.split("@")[1]))
    if returned != set(result.message_ids):
        tally.leaks.append(f"{case}: message_ids {sorted(result.message_ids)} are not the results {sorted(returned)}")
    if actor_ids is not None and not actor_ids and result.hits:
        tally.leaks.append(f"{case}: an actor filter that names nobody here returned results")
    tally.excluded.update(result.exclusion_counts)


@pytest.mark.timeout(900)  # twelve hundred searches: about a minute on a loaded two-core machine
def test_history_search_never_returns_what_the_oracle_forbids() -> None:
    """Thousands of random history searches return only hits and neighbours the independent oracle
    admits: the agent's own conversation, source evidence, an audience (with identity links) that
    reaches the destination, and for a reply a lineage whose every message and memory reaches it too."""
    check_random_searches(SEARCHES)


def check_random_searches(searches_wanted: int) -> None:
    rng = random.Random(SEED)
    started = time.perf_counter()
    worlds = build_world(rng)
    start = timezone.now() - timedelta(days=ROUNDS + 2)
    transcripts = add_transcripts(rng, worlds, start)
    analyze(
        (
            "history_conversation",
            "history_message",
            "history_messagesourceevidence",
            "history_messagesearchdocument",
            "memory_memoryrevision",
            "memory_sharinggrant",
            "accounts_identitylink",
        )
    )
    built = time.perf_counter() - started
    oracle = TranscriptOracle.load()
    everyone = [m for t in transcripts.values() for m in t.lines]
    all_ids = sorted(oracle.messages)

    tally = Tally()
    proposals = 0
    for case in range(searches_wanted):
        world = rng.choice(worlds)
        mine = transcripts[world.agent.pk]
        conversation = rng.choice(world.conversations)
        requester = random_requester(rng, world, conversation)
        requester_id = requester.pk if requester else None
        query = random_query(rng, world, worlds, random_text(rng, world, mine, everyone), start)
        excluded = {m.pk for m in rng.sample(mine.lines, rng.randint(1, 20))} if rng.random() < 0.1 else set()
        providers: list[Everything] = []
        if rng.random() < 0.25:
            # Hostile proposals, weighted to what must stay hidden, from every agent's transcript.
            proposed = [m.pk for m in rng.sample(mine.targets, 60)] + rng.sample(all_ids, 60)
            providers.append(Everything(ids=proposed))
            proposals += len(proposed)
        result = search_history(
            perspective=perspective_for_conversation(conversation, requester_id=requester_id),
            query=query,
            exclude_message_ids=excluded,
            providers=providers,
            lexical=not providers or rng.random() < 0.8,
        )
        tally.cases += 1
        tally.destinations[conversation.audience_kind] += 1
        check(
            oracle,
            tally,
            f"case {case}: agent {world.agent.name} conversation {conversation.external_thread_id} "
            f"({conversation.audience}) requester {requester_id} query {query}",
            result,
            conversation=conversation,
            query=query,
            requester_id=requester_id,
            excluded=excluded,
        )
    elapsed = time.perf_counter() - started
    print(
        f"\nhistory privacy fuzz: {tally.cases} searches, {tally.hits} hits and {tally.neighbours} neighbours "
        f"checked, {len(tally.leaks)} leaks (seed {SEED}; {len(oracle.messages)} messages; world built in "
        f"{built:.1f}s, total {elapsed:.1f}s; origins {dict(tally.origins)}; admitted by {dict(tally.paths)}; "
        f"deepest lineage admitted {tally.deepest}; withheld {dict(tally.excluded)}; {proposals} hostile proposals)"
    )
    assert not tally.leaks, f"{len(tally.leaks)} leaks, first ones:\n" + "\n".join(tally.leaks[:20])

    # The run must have been able to fail: it returned hits and neighbours of every kind, along every
    # path, replies through their lineage, and the search itself withheld matches by every rule.
    assert tally.hits >= searches_wanted and tally.neighbours >= searches_wanted
    assert set(tally.destinations) == {"public", "workspace", "members", "external"}
    assert {"public", "workspace", "members", "external"} <= set(tally.origins)
    assert tally.paths["identity_link"] and tally.paths["audience+lineage"], tally.paths
    assert tally.paths["audience+lineage_grant"] and tally.deepest >= CHAIN, (tally.paths, tally.deepest)
    assert tally.admitted & {m for t in transcripts.values() for m in t.at_cap}, "no reply at the 500-id cap shown"
    assert tally.excluded["no_evidence"] and tally.excluded["audience"] and tally.excluded["lineage"], tally.excluded


@pytest.mark.timeout(900)
@pytest.mark.django_db(transaction=True)
def test_history_search_on_a_streaming_replica_never_returns_what_the_oracle_forbids(
    routed_replica: ReplicaStats,
) -> None:
    """The same contract with every history search served by a streaming read replica
    (``config.replica``): its eligibility and lineage SQL admit exactly what the oracle allows."""
    check_random_searches(REPLICA_SEARCHES)
    assert routed_replica.served == REPLICA_SEARCHES, routed_replica
    assert not (routed_replica.lagging or routed_replica.unavailable or routed_replica.failed), routed_replica
