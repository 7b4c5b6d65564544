"""The turn lifecycle an agent runtime drives: open a session (frozen snapshot), start a turn
(in-turn recall), run at most three rounds of memory verbs, read the committed ledger, submit the
reply (claim guard, pre-delivery recheck, provenance).

The perspective is always bound from the turn: agent, destination audience and requester come from
stored rows, never from a verb's arguments. Every call of a round has been validated (by the API's
input serializers) before this module executes any of them, so a malformed call cannot leave an
earlier call's write committed.

- ``sessions``: opening a session, starting a turn, reading either back for its agent;
- ``participants``: the people a turn's model may name as a subject, and resolving the one it names;
- ``verbs``: the handler of each memory verb and the payloads they answer with;
- ``rounds``: running one round of calls, consecutive reads side by side;
- ``delivery``: the committed ledger, the claim guard, the pre-delivery recheck and delivery.
"""

from memory.turns.delivery import CITATION, Delivered, reply_submit, turn_ledger
from memory.turns.participants import (
    SPEAKER,
    Participant,
    conversation_participants,
    resolve_subject,
    turn_participants,
)
from memory.turns.rounds import MAX_CALLS_PER_ROUND, RoundResult, read_groups, round_run
from memory.turns.sessions import (
    MAX_LOADED_MESSAGES,
    MAX_ROUNDS,
    TOOLS,
    recalled_revision_ids,
    session_of_agent,
    session_open,
    tools_offered,
    turn_of_agent,
    turn_start,
)
from memory.turns.verbs import CallResult, VerbCall, recall_payload

__all__ = [
    "CITATION",
    "MAX_CALLS_PER_ROUND",
    "MAX_LOADED_MESSAGES",
    "MAX_ROUNDS",
    "SPEAKER",
    "TOOLS",
    "CallResult",
    "Delivered",
    "Participant",
    "RoundResult",
    "VerbCall",
    "conversation_participants",
    "read_groups",
    "recall_payload",
    "recalled_revision_ids",
    "reply_submit",
    "resolve_subject",
    "round_run",
    "session_of_agent",
    "session_open",
    "tools_offered",
    "turn_ledger",
    "turn_of_agent",
    "turn_participants",
    "turn_start",
]
