"""The agent runtime API: sessions, turns, rounds of memory verbs, the committed ledger, the reply;
and the end user's own sharing decisions. Views are thin: validate, call a service, serialize.

Every object is fetched inside the caller's perspective; another agent's or tenant's object answers
404 exactly like a missing one.

- ``verbs``: each memory verb's strict request schema and the validation of a round;
- ``turns``: sessions, turns, rounds, the ledger and the reply;
- ``traces``: a recall trace, read back by its agent;
- ``sharing``: the end user's sharing decisions and grant revocations (session login);
- ``data``: the management API, an agent's own memories (``/api/v1/memories``);
- ``tools``: tool definitions for models, in each provider's shape;
- ``errors``: the error responses every endpoint documents.
"""

from memory.apis.sharing import MyGrantRevokeApi, MySharingDecisionApi, MySharingRequestsApi
from memory.apis.traces import TraceDetailApi
from memory.apis.turns import (
    LedgerApi,
    ReplyCreateApi,
    RoundCreateApi,
    SessionCreateApi,
    SessionDetailApi,
    TurnCreateApi,
    TurnDetailApi,
)

__all__ = [
    "LedgerApi",
    "MyGrantRevokeApi",
    "MySharingDecisionApi",
    "MySharingRequestsApi",
    "ReplyCreateApi",
    "RoundCreateApi",
    "SessionCreateApi",
    "SessionDetailApi",
    "TraceDetailApi",
    "TurnCreateApi",
    "TurnDetailApi",
]
