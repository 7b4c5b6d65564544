"""The source arm reads a source message's meaning with the exchange it answers: the message said just
before it, in its conversation, within the exchange gap, that the perspective may read. A message the
perspective may not read lends nothing: the nearest earlier one it may read is the exchange instead."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from accounts.models import Actor
from history.models import Conversation, EvidenceMethod
from history.services import message_ingest
from memory.embeddings.index import drain_outbox
from memory.embeddings.search import semantic_providers
from memory.models import MemoryRevision
from memory.retrieval.arms import sql_arms
from memory.retrieval.eligibility import EligibleRevisions, perspective_for_conversation
from memory.retrieval.history_search import EXCHANGE_GAP
from memory.retrieval.query import form_query
from memory.retrieval.sources import SourceMessages
from memory.services import Belief, Provenance, memory_remember
from tests.retrieval.conftest import Workspace

pytestmark = pytest.mark.usefixtures("pgvector")

QUESTION = "Which city hosts the kiwi offsite?"
#: The line a reply answers, close in meaning to the question.
ASKED = "Which city hosts the kiwi offsite this year, Lisbon or Porto?"
#: A line about something else.
ELSEWHERE = "The quarterly budget spreadsheet needs two more columns."
#: Every memory's source says the same thing, so only the exchange can tell their sources apart.
REPLY = "Sounds good to me."


def line(ws: Workspace, by: Actor, body: str, at: datetime, *, authenticated: bool = True) -> int:
    method = EvidenceMethod.CONNECTOR_SIGNED if authenticated else None
    message = message_ingest(conversation=ws.general, actor=by, body=body, created_at=at, evidence_method=method)
    return message.message.pk


def replied(ws: Workspace, at: datetime, statement: str) -> MemoryRevision:
    """Bob replies in #general at ``at``, and a memory is learned from the reply."""
    source = line(ws, ws.bob, REPLY, at)
    return memory_remember(
        agent=ws.agent,
        belief=Belief(body=statement),
        provenance=Provenance(source_message_id=source),
    ).revision


def answers_the_question(ws: Workspace, at: datetime) -> MemoryRevision:
    """Alice asks the question's own line at ``at``, Bob replies at once, and a memory is learned from
    the reply: the memory the exchange should rank first."""
    line(ws, ws.alice, ASKED, at)
    return replied(ws, at + timedelta(seconds=5), "Bob is fine with the kiwi offsite plan, Lisbon.")


def ranked(ws: Workspace, conversation: Conversation) -> list[int]:
    """What the source arm ranks, in its order, over the pool recall's lexical arm gathered, with the
    messages' vectors."""
    while drain_outbox():
        pass
    _, message_vectors, unavailable = semantic_providers()
    assert unavailable == ""
    perspective = perspective_for_conversation(conversation, requester_id=ws.alice.pk)
    query = form_query(message=QUESTION, requester_id=ws.alice.pk, known_actors=[ws.alice, ws.bob, ws.victor])
    eligible = EligibleRevisions(perspective, named_subject_ids=query.named_subject_ids)
    pool = sql_arms(eligible, query).pool
    return [hit.target_id for hit in SourceMessages(message_vectors).rank(eligible, query, pool)]


def test_a_reply_is_ranked_with_the_line_it_answers(ws: Workspace) -> None:
    """Two memories learned from the same words: the one whose reply answers the question's own line
    ranks first, though it was written later (ties go to the earlier message)."""
    start = timezone.now() - timedelta(days=2)
    line(ws, ws.alice, ELSEWHERE, start)
    replied(ws, start + timedelta(seconds=5), "Bob is fine with the kiwi offsite plan.")
    answered = answers_the_question(ws, start + EXCHANGE_GAP + timedelta(hours=1))

    assert ranked(ws, ws.general)[0] == answered.pk


def test_a_line_the_perspective_may_not_read_lends_no_meaning(ws: Workspace) -> None:
    """The line just before the reply has unknown provenance, so no perspective may read it: the reply
    is read with the line before that one (about something else), and ranks below the reply that
    answers a line that may be read."""
    start = timezone.now() - timedelta(days=2)
    line(ws, ws.alice, ELSEWHERE, start)
    line(ws, ws.alice, ASKED, start + timedelta(seconds=2), authenticated=False)
    replied(ws, start + timedelta(seconds=5), "Bob is fine with the kiwi offsite plan.")
    answered = answers_the_question(ws, start + EXCHANGE_GAP + timedelta(hours=1))

    assert ranked(ws, ws.general)[0] == answered.pk


def test_a_line_said_long_before_is_not_the_exchange(ws: Workspace) -> None:
    """The question's own line, said more than the exchange gap before the reply, lends it nothing: the
    reply written later, which answers it at once, ranks first."""
    start = timezone.now() - timedelta(days=2)
    line(ws, ws.alice, ASKED, start)
    replied(ws, start + EXCHANGE_GAP + timedelta(minutes=5), "Bob is fine with the kiwi offsite plan.")
    answered = answers_the_question(ws, start + 2 * EXCHANGE_GAP + timedelta(hours=1))

    assert ranked(ws, ws.general)[0] == answered.pk
