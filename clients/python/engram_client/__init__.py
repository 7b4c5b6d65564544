"""engram-client: the Python client of Engram's agent runtime API.

from engram_client import Engram

with Engram("http://127.0.0.1:8000", api_key="...") as engram:
    inbound = engram.ingest([message])[0]
    session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
    with engram.turn(session, inbound.message_id) as turn:
        turn.round([{"verb": "recall", "query": "deploy schedule"}])
        # a memory about a person names its subject: "speaker", or an external id of turn.participants
        turn.round([{"verb": "remember", "body": "Prefers short answers.", "belief_type": "preference",
                     "subject": "speaker"}])
        ledger = turn.ledger()          # give ledger.instruction to the model
        reply = turn.reply("...")       # ReplyWithheld / ClaimGuardFailed when not delivered
"""

from engram_client.client import AsyncEngram, Engram
from engram_client.errors import (
    AuthenticationError,
    ClaimGuardFailed,
    ConcurrentUpdate,
    ConflictError,
    EngramError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    RateLimitedError,
    ReplyWithheld,
    RoundLimitReached,
    ServerError,
    TransportError,
    TurnClosed,
    UnavailableError,
    ValidationError,
)
from engram_client.tools import tool_calls_to_verb_calls, tool_messages
from engram_client.turn import AsyncTurnSession, TurnSession
from engram_client.types import (
    BELIEF_TYPES,
    SPEAKER,
    ActorLabel,
    Amend,
    BeliefType,
    CallResult,
    Consent,
    Ingested,
    Ledger,
    MessageIn,
    Operation,
    Participant,
    Recall,
    RecallCall,
    RecallItem,
    Remember,
    Reply,
    Round,
    Session,
    SharingRequest,
    Tools,
    Trace,
    Turn,
    VerbCall,
)

__version__ = "0.1.0"

__all__ = [
    "BELIEF_TYPES",
    "SPEAKER",
    "ActorLabel",
    "Amend",
    "AsyncEngram",
    "AsyncTurnSession",
    "AuthenticationError",
    "BeliefType",
    "CallResult",
    "ClaimGuardFailed",
    "ConcurrentUpdate",
    "ConflictError",
    "Consent",
    "Engram",
    "EngramError",
    "Ingested",
    "Ledger",
    "MessageIn",
    "NotFoundError",
    "Operation",
    "Participant",
    "PermissionDeniedError",
    "ProtocolError",
    "RateLimitedError",
    "Recall",
    "RecallCall",
    "RecallItem",
    "Remember",
    "Reply",
    "ReplyWithheld",
    "Round",
    "RoundLimitReached",
    "ServerError",
    "Session",
    "SharingRequest",
    "Tools",
    "Trace",
    "TransportError",
    "Turn",
    "TurnClosed",
    "TurnSession",
    "UnavailableError",
    "ValidationError",
    "VerbCall",
    "tool_calls_to_verb_calls",
    "tool_messages",
]
