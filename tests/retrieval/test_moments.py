"""The three retrieval moments: a frozen session snapshot, in-turn recall with delta and correction
lines, and child runs with their own budget."""

from __future__ import annotations

import pytest

from history.models import Session, SessionKind, Turn
from memory.models import RecallMoment, RecallTrace
from memory.retrieval.moments import SNAPSHOT_BUDGETS, session_snapshot, turn_recall
from memory.services import Provenance, entry_forget, revision_amend
from tests.retrieval.conftest import Workspace, revision_ids

pytestmark = pytest.mark.django_db


def open_session(ws: Workspace, kind: str = SessionKind.INTERACTIVE) -> Session:
    return Session.objects.create(agent=ws.agent, conversation=ws.alice_dm, kind=kind)


def start_turn(ws: Workspace, session: Session, text: str) -> Turn:
    inbound = ws.say(ws.alice_dm, ws.alice, text)
    turn = Turn(agent=ws.agent, session=session, inbound_message=inbound, requester=ws.alice)
    turn.set_audience(ws.alice_dm.audience)
    turn.save()
    return turn


def test_the_snapshot_is_frozen_for_the_session(ws: Workspace) -> None:
    ws.remember(
        "Prefers concise prose-first writing.",
        said_in=ws.alice_dm,
        by=ws.alice,
        about=ws.alice,
        belief_type="preference",
    )
    session = open_session(ws)
    first = session_snapshot(session=session, requester_id=ws.alice.pk)
    assert first is not None
    ws.remember("Prefers dark mode.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice, belief_type="preference")

    again = session_snapshot(session=session, requester_id=ws.alice.pk)

    session.refresh_from_db()
    assert again is None
    assert session.snapshot_text == first.rendered and "dark mode" not in session.snapshot_text
    assert session.snapshot_sha256 == first.rendered_sha256
    assert RecallTrace.objects.get(pk=first.trace_id).moment == RecallMoment.SNAPSHOT


def test_the_snapshot_excludes_provisional_beliefs(ws: Workspace) -> None:
    confirmed = ws.remember(
        "Lives in Lisbon.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice, belief_type="user_model_attr"
    )
    provisional = ws.remember(
        "Might be moving to Berlin.",
        said_in=ws.alice_dm,
        by=ws.alice,
        about=ws.alice,
        belief_type="user_model_attr",
        lifecycle="provisional",
    )
    result = session_snapshot(session=open_session(ws), requester_id=ws.alice.pk)
    assert result is not None
    assert confirmed.pk in revision_ids(result) and provisional.pk not in revision_ids(result)


@pytest.mark.parametrize("kind", [SessionKind.INTERACTIVE, SessionKind.CHILD])
def test_snapshot_caps_depend_on_the_session_kind(ws: Workspace, kind: str) -> None:
    for n in range(50):
        ws.remember(
            f"Preference number {n}: likes option {n}.",
            said_in=ws.alice_dm,
            by=ws.alice,
            about=ws.alice,
            belief_type="preference",
            salience=0.9,
        )
    budget = SNAPSHOT_BUDGETS[SessionKind(kind)]
    result = session_snapshot(session=open_session(ws, kind), requester_id=ws.alice.pk)
    assert result is not None
    assert len(result.items) <= budget.max_items and result.tokens <= budget.max_tokens
    assert len(result.items) >= 1


def test_two_thirds_of_the_snapshot_are_reserved_for_durable_beliefs(ws: Workspace) -> None:
    """Project facts related to the opening goal cannot evict who the person is: of an interactive
    snapshot's 40 items, 26 go to durable beliefs and at most 14 to the goal's priming set."""
    for n in range(40):
        ws.remember(
            f"Atlas fact {n}: billing cutover.",
            said_in=ws.alice_dm,
            by=ws.alice,
            about=ws.alice,
            belief_type="project_fact",
            salience=1.0,
            confidence=1.0,
        )
    durable = {
        ws.remember(
            f"Detail {n}.",
            said_in=ws.alice_dm,
            by=ws.alice,
            about=ws.alice,
            belief_type="user_model_attr",
            salience=0.2,
        ).pk
        for n in range(30)
    }

    result = session_snapshot(session=open_session(ws), requester_id=ws.alice.pk, goal="billing cutover")

    assert result is not None
    assert sum(1 for item in result.items if item.revision_id in durable) == 26
    assert sum(1 for item in result.items if item.belief_type == "project_fact") == 14


def test_unused_priming_slots_are_not_backfilled(ws: Workspace) -> None:
    """With no opening goal, unrelated project facts do not fill the snapshot."""
    ws.remember(
        "Atlas billing cutover is on Friday.",
        said_in=ws.alice_dm,
        by=ws.alice,
        about=ws.alice,
        belief_type="project_fact",
        salience=1.0,
    )
    detail = ws.remember(
        "Lives in Lisbon.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice, belief_type="user_model_attr"
    )
    result = session_snapshot(session=open_session(ws), requester_id=ws.alice.pk)
    assert result is not None
    assert revision_ids(result) == [detail.pk]


def test_in_turn_recall_adds_the_delta_since_the_snapshot_and_correction_lines(ws: Workspace) -> None:
    tea = ws.remember("Drinks green tea.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice, belief_type="preference")
    cat = ws.remember(
        "Has a cat named Miso.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice, belief_type="relationship"
    )
    session = open_session(ws)
    snapshot = session_snapshot(session=session, requester_id=ws.alice.pk)
    assert snapshot is not None and {tea.pk, cat.pk} <= set(revision_ids(snapshot))

    coffee = revision_amend(
        agent=ws.agent,
        entry_id=tea.entry_id,
        expected_revision_id=tea.pk,
        provenance=Provenance(source_message_id=ws.say(ws.alice_dm, ws.alice, "switched to coffee").pk),
        body="Drinks black coffee.",
    ).revision
    entry_forget(agent=ws.agent, entry_id=cat.entry_id)
    new_fact = ws.remember("Started learning Portuguese.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    session.refresh_from_db()

    result = turn_recall(turn=start_turn(ws, session, "Any plans for the weekend?"))

    assert new_fact.pk in revision_ids(result) and coffee.pk in revision_ids(result)  # the delta
    assert f"correction: [m:{tea.pk:08x}] no longer holds as of " in result.rendered
    assert f"; superseded by [m:{coffee.pk:08x}]." in result.rendered
    assert f"correction: [m:{cat.pk:08x}] no longer holds as of " in result.rendered
    assert result.rendered.rstrip().endswith("forgotten.\n</memory>".rstrip())
    session.refresh_from_db()
    assert session.snapshot_text == snapshot.rendered  # the prefix is never rewritten
    assert RecallTrace.objects.get(pk=result.trace_id).moment == RecallMoment.IN_TURN


def test_without_a_snapshot_in_turn_recall_is_plain_task_recall(ws: Workspace) -> None:
    fact = ws.remember(
        "Allergic to peanuts.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice, belief_type="user_model_attr"
    )
    result = turn_recall(turn=start_turn(ws, open_session(ws), "Am I allergic to anything like peanuts?"))
    assert revision_ids(result) == [fact.pk]
    assert "correction:" not in result.rendered


def test_a_message_without_terms_of_its_own_is_recalled_for_through_the_messages_before_it(ws: Workspace) -> None:
    """A message like "And then?" names nothing: the conversation's latest messages carry the task, and
    the recall (its trace records the query it ran) finds what they were about. A message with terms of
    its own is recalled for by itself alone."""
    fact = ws.remember(
        "Allergic to peanuts.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice, belief_type="user_model_attr"
    )
    session = open_session(ws)
    ws.say(ws.alice_dm, ws.alice, "Which snacks with peanuts should I avoid?")

    followed_up = turn_recall(turn=start_turn(ws, session, "And then?"))
    asked_anew = turn_recall(turn=start_turn(ws, session, "What time is the standup?"))

    query_of = {
        result.trace_id: RecallTrace.objects.get(pk=result.trace_id).query_text for result in (followed_up, asked_anew)
    }
    assert (query_of[followed_up.trace_id] or "").endswith("Which snacks with peanuts should I avoid?")
    assert fact.pk in revision_ids(followed_up)
    assert query_of[asked_anew.trace_id] == "What time is the standup?"
    assert fact.pk not in revision_ids(asked_anew)
