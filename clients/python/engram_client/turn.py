"""The turn helper: ``with engram.turn(session, inbound_message_id) as turn: ...``.

It keeps a turn to the protocol (spec: bounded tool rounds, the committed ledger, the claim guard,
the pre-delivery recheck) so that misuse is an exception rather than a silent lie:

- a round is refused before it is sent once the turn has no round left (``RoundLimitReached``) or
  after the reply; the server bounds rounds too, this only saves the request;
- after a round, ``reply()`` is refused (``ProtocolError``) until ``ledger()`` has been read: the
  model must see what committed before it writes the reply;
- a withheld reply raises ``ReplyWithheld``, a reply claiming an uncommitted change raises
  ``ClaimGuardFailed``; either closes the turn;
- leaving the ``with`` block without a delivered reply (and without an exception already on its
  way) raises ``ProtocolError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from engram_client.errors import (
    ClaimGuardFailed,
    ProtocolError,
    ReplyWithheld,
    RoundLimitReached,
    TurnClosed,
)
from engram_client.tools import tool_calls_to_verb_calls
from engram_client.types import Ledger, Participant, Recall, Reply, Round, ToolFormat, Tools, Turn, VerbCall

if TYPE_CHECKING:
    from engram_client.client import AsyncEngram, Engram


class _TurnRules:
    """The protocol state both helpers share."""

    def __init__(self, max_rounds: int | None) -> None:
        self.max_rounds = max_rounds
        self.turn: Turn | None = None
        self.rounds: list[Round] = []
        self.rounds_left = 0
        self.ledger_read: Ledger | None = None
        self.ledger_stale = False
        self.delivered: Reply | None = None
        self.closed = False
        self.tools: dict[str, list[dict[str, Any]]] = {}
        #: What the tool definitions say about ids and rounds (for the system prompt).
        self.instructions = ""

    @property
    def turn_id(self) -> int:
        if self.turn is None:
            raise ProtocolError("the turn has not started: use it as a context manager", code="turn_not_started")
        return self.turn.turn_id

    def started(self, turn: Turn) -> None:
        self.turn = turn
        self.rounds_left = turn.rounds_left
        if self.max_rounds is not None:
            self.rounds_left = min(self.rounds_left, self.max_rounds)

    def before_round(self, calls: Sequence[VerbCall]) -> None:
        self.turn_id  # noqa: B018  (raises when not started)
        if self.closed:
            raise TurnClosed("the turn is closed; no round can run", code="turn_closed", status=409)
        if self.rounds_left <= 0:
            raise RoundLimitReached(
                "the turn has no round left (no tools are offered): read the ledger and write the reply",
                code="round_limit",
                status=409,
            )
        if not calls:
            raise ProtocolError("a round has at least one call", code="empty_round")

    def after_round(self, result: Round) -> None:
        self.rounds.append(result)
        self.rounds_left = 0 if result.final else self.rounds_left - 1
        self.ledger_stale = True

    def before_reply(self) -> None:
        self.turn_id  # noqa: B018
        if self.closed:
            raise TurnClosed("the turn is closed; no reply can be submitted", code="turn_closed", status=409)
        if self.ledger_stale:
            raise ProtocolError(
                "read the committed ledger (turn.ledger()) after the last round and give it to the model "
                "before writing the reply",
                code="ledger_not_read",
            )

    def after_ledger(self, ledger: Ledger) -> None:
        self.ledger_read = ledger
        self.ledger_stale = False

    def reply_failed(self, error: Exception) -> None:
        if isinstance(error, ReplyWithheld | ClaimGuardFailed | TurnClosed):
            self.closed = True

    def after_reply(self, reply: Reply) -> None:
        self.delivered = reply
        self.closed = True

    def on_exit(self, failed: bool) -> None:
        if not failed and self.turn is not None and not self.closed:
            raise ProtocolError("the turn ended without a reply: call turn.reply(...)", code="no_reply")


class TurnSession:
    """A turn in progress (sync). Start it with ``with engram.turn(...) as turn``."""

    def __init__(
        self,
        engram: Engram,
        session_id: int,
        inbound_message_id: int,
        loaded_message_ids: Sequence[int] = (),
        *,
        max_rounds: int | None = None,
    ) -> None:
        self._engram = engram
        self._start = (session_id, inbound_message_id, list(loaded_message_ids))
        self._rules = _TurnRules(max_rounds)

    def __enter__(self) -> TurnSession:
        self._rules.started(self._engram.start_turn(*self._start))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._rules.on_exit(failed=kind is not None)

    @property
    def turn(self) -> Turn:
        self._rules.turn_id  # noqa: B018
        assert self._rules.turn is not None
        return self._rules.turn

    @property
    def turn_id(self) -> int:
        return self._rules.turn_id

    @property
    def recall(self) -> Recall | None:
        """The in-turn recall: put its block (and corrections) in the user turn of the prompt."""
        return self.turn.recall

    @property
    def participants(self) -> list[Participant]:
        """The conversation's people the model may name as a memory's subject (show them to it)."""
        return self.turn.participants

    @property
    def speaker(self) -> Participant | None:
        """The author of the message being answered: whom ``subject="speaker"`` names."""
        return self.turn.speaker

    @property
    def rounds_left(self) -> int:
        return self._rules.rounds_left

    @property
    def rounds(self) -> list[Round]:
        return list(self._rules.rounds)

    @property
    def delivered(self) -> Reply | None:
        return self._rules.delivered

    @property
    def tool_instructions(self) -> str:
        """What the tool definitions say about ids and rounds, once ``tools()`` has been called."""
        return self._rules.instructions

    def tools(self, format: ToolFormat = "openai") -> list[dict[str, Any]]:
        """The tool definitions to offer the model now: empty once no round is left. The server's list
        is all the tools or none, so it is fetched once a format and then follows ``rounds_left``."""
        if self._rules.rounds_left <= 0 or self._rules.closed:
            return []
        if format not in self._rules.tools:
            result: Tools = self._engram.tools(format, turn_id=self.turn_id)
            self._rules.tools[format] = result.tools
            self._rules.instructions = result.instructions
        return list(self._rules.tools[format])

    def round(self, calls: Sequence[VerbCall]) -> Round:
        """Run one round of verb calls (``[{"verb": "recall", "query": "..."}, ...]``)."""
        self._rules.before_round(calls)
        result = self._engram.run_round(self.turn_id, calls)
        self._rules.after_round(result)
        return result

    def run_tool_calls(self, tool_calls: Sequence[Any], format: ToolFormat = "openai") -> Round:
        """Run a model's tool calls (OpenAI ``tool_calls`` or Anthropic ``tool_use`` blocks) as one round."""
        return self.round(tool_calls_to_verb_calls(tool_calls, format))

    def ledger(self) -> Ledger:
        """The committed ledger: hand ``ledger.instruction`` to the model (as ``ledger.role``) before the reply."""
        ledger = self._engram.ledger(self.turn_id)
        self._rules.after_ledger(ledger)
        return ledger

    def reply(self, body: str, cited_ids: Sequence[str] = ()) -> Reply:
        """Submit the final reply; ``ReplyWithheld`` or ``ClaimGuardFailed`` when it is not delivered."""
        self._rules.before_reply()
        try:
            reply = self._engram.submit_reply(self.turn_id, body, cited_ids)
        except Exception as error:
            self._rules.reply_failed(error)
            raise
        self._rules.after_reply(reply)
        return reply


class AsyncTurnSession:
    """A turn in progress (async). Start it with ``async with engram.turn(...) as turn``."""

    def __init__(
        self,
        engram: AsyncEngram,
        session_id: int,
        inbound_message_id: int,
        loaded_message_ids: Sequence[int] = (),
        *,
        max_rounds: int | None = None,
    ) -> None:
        self._engram = engram
        self._start = (session_id, inbound_message_id, list(loaded_message_ids))
        self._rules = _TurnRules(max_rounds)

    async def __aenter__(self) -> AsyncTurnSession:
        self._rules.started(await self._engram.start_turn(*self._start))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._rules.on_exit(failed=kind is not None)

    @property
    def turn(self) -> Turn:
        self._rules.turn_id  # noqa: B018
        assert self._rules.turn is not None
        return self._rules.turn

    @property
    def turn_id(self) -> int:
        return self._rules.turn_id

    @property
    def recall(self) -> Recall | None:
        return self.turn.recall

    @property
    def participants(self) -> list[Participant]:
        return self.turn.participants

    @property
    def speaker(self) -> Participant | None:
        return self.turn.speaker

    @property
    def rounds_left(self) -> int:
        return self._rules.rounds_left

    @property
    def rounds(self) -> list[Round]:
        return list(self._rules.rounds)

    @property
    def delivered(self) -> Reply | None:
        return self._rules.delivered

    @property
    def tool_instructions(self) -> str:
        return self._rules.instructions

    async def tools(self, format: ToolFormat = "openai") -> list[dict[str, Any]]:
        if self._rules.rounds_left <= 0 or self._rules.closed:
            return []
        if format not in self._rules.tools:
            result: Tools = await self._engram.tools(format, turn_id=self.turn_id)
            self._rules.tools[format] = result.tools
            self._rules.instructions = result.instructions
        return list(self._rules.tools[format])

    async def round(self, calls: Sequence[VerbCall]) -> Round:
        self._rules.before_round(calls)
        result = await self._engram.run_round(self.turn_id, calls)
        self._rules.after_round(result)
        return result

    async def run_tool_calls(self, tool_calls: Sequence[Any], format: ToolFormat = "openai") -> Round:
        return await self.round(tool_calls_to_verb_calls(tool_calls, format))

    async def ledger(self) -> Ledger:
        ledger = await self._engram.ledger(self.turn_id)
        self._rules.after_ledger(ledger)
        return ledger

    async def reply(self, body: str, cited_ids: Sequence[str] = ()) -> Reply:
        self._rules.before_reply()
        try:
            reply = await self._engram.submit_reply(self.turn_id, body, cited_ids)
        except Exception as error:
            self._rules.reply_failed(error)
            raise
        self._rules.after_reply(reply)
        return reply
