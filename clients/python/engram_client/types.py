"""Typed results: one frozen dataclass per output serializer of the API (``memory/apis/``,
``history/apis.py``). Each keeps the JSON it was built from in ``raw``, so a field the server adds
later is still reachable before this package names it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

#: A verb call as the rounds endpoint takes it: ``{"verb": "recall", "query": "..."}``.
VerbCall = dict[str, Any]
ToolFormat = Literal["openai", "anthropic"]


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
class Recall:
    """A rendered memory block: the session snapshot or a turn's in-turn recall."""

    trace_id: int
    block: str
    rendered_sha256: str
    tokens: int
    degradation: str
    items: list[dict[str, Any]]
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
            items=list(data.get("items", [])),
            corrections=list(data.get("corrections", [])),
            raw=data,
        )

    @property
    def ids(self) -> list[str]:
        """The ``m:…`` ids of the items, in rendered order (what a reply may cite)."""
        return [str(item["id"]) for item in self.items if item.get("id")]


@dataclass(frozen=True)
class Session:
    session_id: int
    conversation_id: int
    kind: str
    snapshot_sha256: str
    snapshot_block: str
    snapshot: Recall | None
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
            raw=data,
        )


@dataclass(frozen=True)
class Turn:
    turn_id: int
    session_id: int
    state: str
    rounds_used: int
    rounds_left: int
    tools: list[str]
    recall: Recall | None
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
            raw=data,
        )


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
