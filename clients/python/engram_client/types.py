"""Typed results: one frozen dataclass per output serializer of the API (``memory/apis/``,
``history/apis.py``). Each keeps the JSON it was built from in ``raw``, so a field the server adds
later is still reachable before this package names it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, get_args

#: A verb call as the rounds endpoint takes it: ``{"verb": "recall", "query": "..."}``. Calls are
#: sent as given, so an argument the server adds passes through before this package names it.
VerbCall = dict[str, Any]
ToolFormat = Literal["openai", "anthropic"]
#: The belief types that are about a person: a ``remember`` of one of these without a subject is
#: refused (``400 subject_required``). Other types (project facts, decisions, …) may have none.
PERSON_BELIEF_TYPES = frozenset({"preference", "user_model_attr", "relationship"})
#: ``subject="speaker"``: the author of the inbound message the turn answers.
SPEAKER = "speaker"
#: The most message ids one ``remember`` may name as its sources.
MAX_SOURCE_MESSAGES = 20
#: A memory's belief type, as ``remember`` takes it and ``recall``'s ``type_hints`` name it.
BeliefType = Literal[
    "preference",
    "user_model_attr",
    "relationship",
    "project_fact",
    "decision",
    "instruction",
    "skill",
    "resource",
    "status",
    "event",
]
#: Every belief type, in the API's order.
BELIEF_TYPES: tuple[BeliefType, ...] = get_args(BeliefType)
#: The most people one ``recall`` may name in ``subjects``.
MAX_RECALL_SUBJECTS = 10


class Remember(TypedDict, total=False):
    """The arguments of a ``remember`` call, for type checkers (a plain dict works the same).

    ``subject``: ``"speaker"`` or a participant's ``external_id`` (or ``subject_actor_id``, a
    participant's actor id; never both). ``source_message_ids``: the messages in front of this turn
    the belief was learned from (the inbound message, the loaded history, this turn's
    ``search_history`` hits; at most 20); by default the inbound message."""

    verb: Literal["remember"]
    body: str
    belief_type: str
    subject: str
    subject_actor_id: int
    source_message_ids: list[int]
    portability: str
    authority: str
    confidence: float
    salience: float
    always_on: bool
    valid_from: str
    valid_to: str


class Amend(TypedDict, total=False):
    """The arguments of an ``amend`` call; ``subject`` / ``subject_actor_id`` as for :class:`Remember`,
    given only to re-attribute the memory."""

    verb: Literal["amend"]
    id: str
    body: str
    subject: str
    subject_actor_id: int
    belief_type: str
    portability: str
    confidence: float
    salience: float
    always_on: bool
    valid_from: str
    valid_to: str


class RecallCall(TypedDict, total=False):
    """The arguments of a ``recall`` call, for type checkers (a plain dict works the same).

    ``subjects``: whom the memories wanted are about, each named as :class:`Remember` names its
    subject: ``"speaker"``, a participant's ``external_id`` (text) or a participant's actor id (an
    int); at most 10. Memories about them rank higher; no other memory ranks lower or is left out.
    Anyone not in the turn is refused (``subject_not_participant``). ``type_hints``: only memories
    of these belief types are returned (empty: every type)."""

    verb: Literal["recall"]
    query: str
    subjects: list[str | int]
    type_hints: list[BeliefType]
    as_of: str
    known_at: str
    max_tokens: int
    max_items: int


class Connector(TypedDict):
    type: str
    name: str


class Audience(TypedDict, total=False):
    kind: str  # public | workspace | members | external
    readers: list[str]


class Thread(TypedDict, total=False):
    external_id: str
    title: str
    project: str
    audience: Audience


class ActorRef(TypedDict):
    external_id: str
    display_name: str


class Evidence(TypedDict, total=False):
    method: str  # connector_signed | connector_api
    detail: dict[str, Any]


class MessageIn(TypedDict, total=False):
    """One message as a connector saw it (``POST /api/v1/messages``)."""

    connector: Connector
    thread: Thread
    actor: ActorRef
    external_id: str | None
    body: str
    created_at: str
    evidence: Evidence


@dataclass(frozen=True)
class Ingested:
    external_id: str | None
    message_id: int
    conversation_id: int
    actor_id: int
    created: bool
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ingested:
        return cls(
            external_id=data.get("external_id"),
            message_id=int(data["message_id"]),
            conversation_id=int(data["conversation_id"]),
            actor_id=int(data["actor_id"]),
            created=bool(data["created"]),
            raw=data,
        )


@dataclass(frozen=True)
class Participant:
    """One of the conversation's people the model may name as a memory's subject: ``remember`` and
    ``amend`` take ``subject="speaker"`` (the author of the message being answered, the one whose
    ``speaking`` is true) or ``subject=<external_id>``. ``connector`` is its namespace, e.g.
    ``slack:acme``."""

    actor_id: int
    external_id: str
    display_name: str
    connector: str
    speaking: bool

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Participant:
        return cls(
            actor_id=int(data["actor_id"]),
            external_id=str(data["external_id"]),
            display_name=str(data.get("display_name") or data["external_id"]),
            connector=str(data.get("connector", "")),
            speaking=bool(data.get("speaking")),
        )


def _participants(data: dict[str, Any]) -> list[Participant]:
    return [Participant.from_json(p) for p in data.get("participants") or []]


def _speaker(participants: list[Participant]) -> Participant | None:
    return next((p for p in participants if p.speaking), None)


@dataclass(frozen=True)
class ActorLabel:
    """A person as a memory names them: their actor id and the label rendered from their current
    actor record (``Victor (id U123)``)."""

    actor_id: int
    label: str

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ActorLabel | None:
        if not data or data.get("actor_id") is None:
            return None
        return cls(actor_id=int(data["actor_id"]), label=str(data.get("label", "")))


@dataclass(frozen=True)
class RecallItem:
    """One recalled memory. ``subject``: whom it is about (None for a project fact). ``source``: the
    first person whose words it rests on; ``sources``: every such person, ``source`` first."""

    id: str
    entry_id: int
    revision_id: int
    statement: str
    subject: ActorLabel | None
    source: ActorLabel | None
    sources: list[ActorLabel]
    belief_type: str
    authority: str
    confidence_band: str
    learned_in: str
    carried: bool
    recorded_at: str
    conflicts: list[str]
    blocked: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecallItem:
        source = ActorLabel.from_json(data.get("source"))
        if "sources" in data:
            sources = [s for s in (ActorLabel.from_json(d) for d in data["sources"] or []) if s is not None]
        else:  # a server from before ``sources``: the one source it names
            sources = [source] if source is not None else []
        return cls(
            id=str(data.get("id") or ""),
            entry_id=int(data.get("entry_id") or 0),
            revision_id=int(data.get("revision_id") or 0),
            statement=str(data.get("statement") or ""),
            subject=ActorLabel.from_json(data.get("subject")),
            source=source,
            sources=sources,
            belief_type=str(data.get("belief_type") or ""),
            authority=str(data.get("authority") or ""),
            confidence_band=str(data.get("confidence_band") or ""),
            learned_in=str(data.get("learned_in") or ""),
            carried=bool(data.get("carried")),
            recorded_at=str(data.get("recorded_at") or ""),
            conflicts=[str(c) for c in data.get("conflicts") or []],
            blocked=data.get("blocked") or None,
            raw=data,
        )


@dataclass(frozen=True)
class Recall:
    """A rendered memory block: the session snapshot or a turn's in-turn recall."""

    trace_id: int
    block: str
    rendered_sha256: str
    tokens: int
    degradation: str
    items: list[RecallItem]
    corrections: list[str]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recall:
        return cls(
            trace_id=int(data["trace_id"]),
            block=data["block"],
            rendered_sha256=data["rendered_sha256"],
            tokens=int(data["tokens"]),
            degradation=data.get("degradation", ""),
            items=[RecallItem.from_json(item) for item in data.get("items", [])],
            corrections=list(data.get("corrections", [])),
            raw=data,
        )

    @property
    def ids(self) -> list[str]:
        """The ``m:…`` ids of the items, in rendered order (what a reply may cite)."""
        return [item.id for item in self.items if item.id]


@dataclass(frozen=True)
class Session:
    session_id: int
    conversation_id: int
    kind: str
    snapshot_sha256: str
    snapshot_block: str
    snapshot: Recall | None
    #: The conversation's people; ``speaking`` marks the session's requester.
    participants: list[Participant]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Session:
        snapshot = data.get("snapshot")
        return cls(
            session_id=int(data["session_id"]),
            conversation_id=int(data["conversation_id"]),
            kind=data["kind"],
            snapshot_sha256=data["snapshot_sha256"],
            snapshot_block=data["snapshot_block"],
            snapshot=Recall.from_json(snapshot) if snapshot else None,
            participants=_participants(data),
            raw=data,
        )

    @property
    def requester(self) -> Participant | None:
        """The participant the session serves, when it has one."""
        return _speaker(self.participants)


@dataclass(frozen=True)
class Turn:
    turn_id: int
    session_id: int
    state: str
    rounds_used: int
    rounds_left: int
    tools: list[str]
    recall: Recall | None
    #: The conversation's people the model may name as a memory's subject; ``speaking`` marks the
    #: author of the inbound message being answered.
    participants: list[Participant]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Turn:
        recall = data.get("recall")
        return cls(
            turn_id=int(data["turn_id"]),
            session_id=int(data["session_id"]),
            state=data["state"],
            rounds_used=int(data["rounds_used"]),
            rounds_left=int(data["rounds_left"]),
            tools=list(data["tools"]),
            recall=Recall.from_json(recall) if recall else None,
            participants=_participants(data),
            raw=data,
        )

    @property
    def speaker(self) -> Participant | None:
        """The author of the inbound message: whom ``subject="speaker"`` names."""
        return _speaker(self.participants)


@dataclass(frozen=True)
class CallResult:
    """One verb call's outcome: ``ok``, ``unchanged`` (an unknown or already-forgotten id: nothing was
    written and nothing may be claimed) or ``error`` (with the service's ``code``)."""

    verb: str
    status: str
    code: str
    message: str
    result: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallResult:
        return cls(
            verb=data["verb"],
            status=data["status"],
            code=data.get("code", ""),
            message=data.get("message", ""),
            result=dict(data.get("result") or {}),
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Round:
    round: int
    results: list[CallResult]
    tools: list[str]
    final: bool
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Round:
        return cls(
            round=int(data["round"]),
            results=[CallResult.from_json(r) for r in data["results"]],
            tools=list(data["tools"]),
            final=bool(data["final"]),
            raw=data,
        )


@dataclass(frozen=True)
class Operation:
    """One committed memory operation, built by the server from the store's return values."""

    operation: str
    entry_id: int
    id: str | None
    revision: int | None
    previous_id: str | None
    subject_changed: bool
    round: int | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Operation:
        return cls(
            operation=data["operation"],
            entry_id=int(data["entry_id"]),
            id=data.get("id"),
            revision=data.get("revision"),
            previous_id=data.get("previous_id"),
            subject_changed=bool(data.get("subject_changed")),
            round=data.get("round"),
        )


@dataclass(frozen=True)
class Ledger:
    """The turn's committed ledger and the instruction to hand the model (``role``, usually
    ``developer``) before it writes the reply."""

    operations: list[Operation]
    instruction: str
    role: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ledger:
        return cls(
            operations=[Operation.from_json(o) for o in data["operations"]],
            instruction=data["instruction"],
            role=data.get("role", "developer"),
            raw=data,
        )


@dataclass(frozen=True)
class Reply:
    """A delivered reply and its stored provenance."""

    message_id: int
    state: str
    cited: list[str]
    ignored_citations: list[str]
    history_message_ids: list[int]
    memory_revision_ids: list[int]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reply:
        return cls(
            message_id=int(data["message_id"]),
            state=data["state"],
            cited=list(data["cited"]),
            ignored_citations=list(data["ignored_citations"]),
            history_message_ids=[int(i) for i in data["history_message_ids"]],
            memory_revision_ids=[int(i) for i in data["memory_revision_ids"]],
            raw=data,
        )


@dataclass(frozen=True)
class Trace:
    trace_id: int
    moment: str
    policy_version: str
    rendered_sha256: str
    block: str
    items: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trace:
        return cls(
            trace_id=int(data["trace_id"]),
            moment=data["moment"],
            policy_version=data["policy_version"],
            rendered_sha256=data["rendered_sha256"],
            block=data["block"],
            items=list(data["items"]),
            raw=data,
        )


@dataclass(frozen=True)
class Tools:
    """Tool definitions for a model, in one function-calling format; empty once no round is left."""

    format: str
    rounds_left: int | None
    instructions: str
    tools: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tools:
        return cls(
            format=data["format"],
            rounds_left=data.get("rounds_left"),
            instructions=data.get("instructions", ""),
            tools=list(data["tools"]),
            raw=data,
        )


@dataclass(frozen=True)
class Consent:
    """One person's answer to a sharing request: a ``source`` (the memory rests on their words) or its
    ``subject`` (another person it is about). The grant is created only once every consent is
    ``given``, or by an operator's review."""

    actor_id: int
    label: str
    role: str  # source | subject
    state: str  # given | pending | denied

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Consent:
        return cls(
            actor_id=int(data["actor_id"]),
            label=str(data.get("label", "")),
            role=str(data["role"]),
            state=str(data["state"]),
        )


@dataclass(frozen=True)
class SharingRequest:
    """An item of ``GET /api/v1/me/sharing-requests``: a request awaiting the signed-in person's answer,
    with every consent it needs. That endpoint belongs to the end user's login session, not to an
    agent's API key: the client has no method for it, only this type for code that reads it."""

    request_id: int
    id: str
    statement: str
    conversation: str
    state: str
    consents: list[Consent]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SharingRequest:
        return cls(
            request_id=int(data["request_id"]),
            id=str(data["id"]),
            statement=str(data["statement"]),
            conversation=str(data["conversation"]),
            state=str(data["state"]),
            consents=[Consent.from_json(c) for c in data.get("consents") or []],
            raw=data,
        )

    @property
    def pending(self) -> list[Consent]:
        """The consents still awaited."""
        return [c for c in self.consents if c.state == "pending"]
