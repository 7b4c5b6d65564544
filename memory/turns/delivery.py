"""The ledger and the reply: the turn's committed operations, the claim guard, the pre-delivery recheck
and delivery with its provenance and usage feedback.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from accounts.models import RuntimeAgent
from config.database.base import prepared_cursor
from config.errors import Conflict, NotFound, Unprocessable
from config.rows import fetch_all, select_list
from history.models import Message, Turn, TurnState
from history.services import reply_record
from memory.claims import UnsupportedClaim, ledger_instruction, unsupported_claims
from memory.models import MemoryOperation, MemoryRevision, parse_short_id, short_id
from memory.retrieval.eligibility import DISCLOSURE_ARGS, EligibleMessages, EligibleRevisions, perspective_for_turn
from memory.turns.sessions import recalled_revision_ids, turn_of_agent

CITATION = re.compile(r"\[(m:[0-9a-f]{8,})\]")


@functools.cache
def _ledger_sql() -> str:
    table = MemoryOperation._meta.db_table
    return f"SELECT {select_list(MemoryOperation, 'o')} FROM {table} o WHERE o.turn_id = %s ORDER BY o.id"


def turn_ledger(turn: Turn) -> list[MemoryOperation]:
    """The turn's committed operations in the order they committed."""
    return fetch_all(MemoryOperation, _ledger_sql(), [turn.pk])


@dataclass(frozen=True)
class Delivered:
    reply: Message
    cited: list[str]
    ignored_citations: list[str]


def reply_submit(*, agent: RuntimeAgent, turn_id: int, body: str, cited_ids: Sequence[str] = ()) -> Delivered:
    """Guard, recheck and deliver the final reply, or fail/withhold the turn and say why.

    One transaction holds the turn and its conversation locked from the claim guard to delivery, so
    an audience change or a concurrent submission waits for it, and the recheck judges exactly what
    is delivered. A failed or withheld turn is committed as such before the error is raised.
    """
    if not body.strip():
        raise Unprocessable("a reply needs a body", code="empty_body")
    claims: list[UnsupportedClaim] = []
    reason = ""
    with transaction.atomic():
        turn = turn_of_agent(agent, turn_id, lock=True)
        if turn is None:
            raise NotFound("turn not found", code="not_found")
        if turn.state != TurnState.OPEN:
            raise Conflict(f"the turn is {turn.state}", code="turn_closed")
        operations = turn_ledger(turn)
        claims = unsupported_claims(body, operations)
        if claims:
            _close(turn, TurnState.FAILED, "claim_guard")
        else:
            recalled = recalled_revision_ids(turn)
            written = [op.revision_id for op in operations if op.revision_id]
            memory_ids = sorted({*recalled, *written})
            cited, ignored = _citations(body, cited_ids, set(memory_ids))
            history_ids = list(dict.fromkeys([*turn.loaded_message_ids, *turn.evidence_message_ids]))
            reason = _recheck(turn, memory_ids, cited, history_ids, operations)
            if reason:
                _close(turn, TurnState.WITHHELD, reason)
            else:
                now = timezone.now()
                reply = reply_record(
                    turn_conversation=turn.session.conversation,
                    body=body,
                    history_message_ids=history_ids,
                    memory_revision_ids=memory_ids,
                    cited_revision_ids=cited,
                    created_at=now,
                )
                turn.reply = reply
                _close(turn, TurnState.DELIVERED, "")
                _feed_back_usage(cited_ids=cited, recalled_ids=recalled, now=now)
    if claims:
        raise Unprocessable(
            "the reply claims memory changes that did not commit; the turn has failed",
            code="claim_guard_failed",
            detail={
                "claims": [{"kind": c.kind, "text": c.text} for c in claims],
                "ledger": ledger_instruction(operations),
            },
        )
    if reason:
        raise Conflict(
            "the reply was withheld: what it was built from changed", code="reply_withheld", detail={"reason": reason}
        )
    return Delivered(reply=reply, cited=[short_id(r) for r in cited], ignored_citations=ignored)


def _close(turn: Turn, state: str, code: str) -> None:
    turn.state = state
    turn.failure_code = code
    turn.completed_at = timezone.now()
    turn.save(update_fields=["state", "failure_code", "completed_at", "reply"])


def _citations(body: str, cited_ids: Sequence[str], allowed: set[int]) -> tuple[list[int], list[str]]:
    refs = list(dict.fromkeys([*CITATION.findall(body), *cited_ids]))
    cited: list[int] = []
    ignored: list[str] = []
    for ref in refs:
        revision_id = parse_short_id(ref)
        if revision_id is not None and revision_id in allowed:
            cited.append(revision_id)
        else:
            ignored.append(ref)  # the model cited something it was never shown in this turn
    return sorted(set(cited)), ignored


def _recheck(
    turn: Turn, memory_ids: list[int], cited: list[int], history_ids: list[int], operations: list[MemoryOperation]
) -> str:
    """Revalidate, just before delivery, everything the reply was built from. Returns why to withhold.

    ``turn.session.conversation`` was read, and locked, with the turn in the delivering transaction;
    the memories and messages are judged by one statement, through the same eligibility as recall
    and history search.
    """
    if turn.session.conversation.audience != turn.audience:
        return "audience_changed"
    perspective = perspective_for_turn(turn)
    revisions = EligibleRevisions(perspective)
    messages = EligibleMessages(perspective)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT engram_revisions_disclosable(%(el_agent)s, %(memory_ids)s::bigint[], {DISCLOSURE_ARGS}),"
            f" ARRAY(SELECT el.revision_id FROM ({revisions.sql()}) el"
            " WHERE el.revision_id = ANY(%(cited_ids)s::bigint[])),"
            f" (SELECT count(*) FROM {messages.owned()} WHERE m.id = ANY(%(history_ids)s::bigint[])"
            f" AND {messages.predicate()})",
            {**revisions.params(), "memory_ids": memory_ids, "cited_ids": cited, "history_ids": history_ids},
        )
        disclosable, current_cited, eligible_messages = cursor.fetchone()
    if memory_ids and not disclosable:
        return "memory_no_longer_disclosable"
    changed_here = {op.entry_id for op in operations}
    for revision_id in cited:
        if revision_id not in current_cited:
            entry_id = MemoryRevision.objects.filter(pk=revision_id).values_list("entry_id", flat=True).first()
            if entry_id not in changed_here:  # the turn may acknowledge its own amend or forget
                return "memory_changed"
    if eligible_messages != len(set(history_ids)):
        return "history_no_longer_disclosable"
    return ""


#: Usage feedback: citing a memory raises its utility; being shown and never used lowers it a little.
USED_UTILITY, UNUSED_UTILITY = 1.0, -0.1


def _feed_back_usage(*, cited_ids: list[int], recalled_ids: list[int], now: datetime) -> None:
    """Move ``last_used_at`` and utility only; confidence and evidence age are never touched.

    The entries of cited revisions count as used; the other entries the turn was shown, as unused. The
    entries are locked in id order before they are updated: replies delivered at the same time to
    turns that were shown the same memories would otherwise lock them in whatever order each update's
    plan reads them, and deadlock. The lock is the one the update itself takes (``FOR NO KEY UPDATE``),
    which lets the key-share locks of rows that reference an entry (a trace item being written by a
    turn that is recalling it) through; ``FOR UPDATE`` would wait for them, and deadlock with them.
    """
    with prepared_cursor() as cursor:
        cursor.execute(
            "WITH cited AS (SELECT entry_id FROM memory_memoryrevision WHERE id = ANY(%(cited)s::bigint[])),"
            " shown AS (SELECT entry_id FROM memory_memoryrevision WHERE id = ANY(%(shown)s::bigint[])),"
            " locked AS (SELECT l.id FROM memory_memoryentry l"
            " WHERE l.id IN (SELECT entry_id FROM cited UNION SELECT entry_id FROM shown)"
            " ORDER BY l.id FOR NO KEY UPDATE)"
            " UPDATE memory_memoryentry e"
            " SET utility = e.utility"
            " + CASE WHEN e.id IN (SELECT entry_id FROM cited) THEN %(used)s ELSE %(unused)s END,"
            " last_used_at = CASE WHEN e.id IN (SELECT entry_id FROM cited) THEN %(now)s ELSE e.last_used_at END"
            " FROM locked WHERE e.id = locked.id",
            {"cited": cited_ids, "shown": recalled_ids, "used": USED_UTILITY, "unused": UNUSED_UTILITY, "now": now},
        )
