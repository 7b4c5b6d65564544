"""Conflicts are found when a belief is written (``remember`` or ``amend``): a belief that gives a
single-valued predicate of its subject ("lives in", "works at", "works as", "is N years old",
"favourite X is", "prefers") a different value than a live belief the same readers can see is linked
to it as a ``RevisionConflict``. Nothing is resolved: both stay live and recall returns both, marked.
Restatements, other people, other predicates, the past and negations are never linked."""

from __future__ import annotations

import pytest

from memory.models import (
    EntryStatus,
    MemoryEntry,
    MemoryRevision,
    RecallTrace,
    RecallTraceItem,
    RevisionConflict,
    short_id,
)
from memory.services import Provenance, revision_amend
from memory.statements import parse_claim
from tests.retrieval.conftest import Workspace, revision_ids

pytestmark = pytest.mark.django_db


def linked(a: MemoryRevision, b: MemoryRevision) -> bool:
    first, second = sorted((a.pk, b.pk))
    return RevisionConflict.objects.filter(revision_a_id=first, revision_b_id=second).exists()


def about_alice(ws: Workspace, body: str) -> MemoryRevision:
    return ws.remember(body, said_in=ws.alice_dm, by=ws.alice, about=ws.alice)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Lives in Lisbon.", "Alice lives in Porto now."),
        ("Alice works at Acme.", "She works for Globex since March."),
        ("Works as a nurse.", "Alice works as a primary school teacher."),
        ("Is 34 years old.", "Alice is 35 years old."),
        ("Her favourite colour is blue.", "Alice's favorite color is green."),
        ("Prefers tea over coffee.", "Prefers coffee."),
    ],
)
def test_a_contradicting_belief_is_linked_and_neither_is_resolved(ws: Workspace, first: str, second: str) -> None:
    old, new = about_alice(ws, first), about_alice(ws, second)
    assert linked(old, new)
    conflict = RevisionConflict.objects.get()
    assert conflict.resolved_at is None and conflict.agent_id == ws.agent.pk
    for revision in (old, new):
        entry = MemoryEntry.objects.get(pk=revision.entry_id)
        assert entry.status == EntryStatus.LIVE and entry.current_revision_id == revision.pk


def test_recall_returns_both_sides_marked_as_conflicting(ws: Workspace) -> None:
    old, new = about_alice(ws, "Lives in Lisbon."), about_alice(ws, "Alice lives in Porto now.")
    items = {item.revision_id: item for item in ws.ask(ws.alice_dm, ws.alice, "Where do I live?").items}
    assert items[old.pk].conflicts == [short_id(new.pk)] and items[new.pk].conflicts == [short_id(old.pk)]


def test_a_recall_that_finds_one_side_returns_its_partner_beside_it_marked_and_traced(ws: Workspace) -> None:
    """A query for Porto matches only the newer belief; the one it contradicts comes with it, in the
    next place, each naming the other, and the trace records both."""
    lisbon, porto = about_alice(ws, "Lives in Lisbon."), about_alice(ws, "Alice lives in Porto now.")

    result = ws.ask(ws.alice_dm, ws.alice, "Porto")

    assert revision_ids(result) == [porto.pk, lisbon.pk]
    by_revision = {item.revision_id: item for item in result.items}
    assert by_revision[lisbon.pk].arms == []  # no arm proposed it: it came for its partner
    assert by_revision[porto.pk].conflicts == [short_id(lisbon.pk)]
    assert by_revision[lisbon.pk].conflicts == [short_id(porto.pk)]
    assert "beside the belief it conflicts with" in by_revision[lisbon.pk].reason
    lines = result.rendered.splitlines()[1:-1]
    assert lines[0].startswith(f"[{short_id(porto.pk)}]") and lines[0].endswith(f"conflicts=[{short_id(lisbon.pk)}]")
    assert lines[1].startswith(f"[{short_id(lisbon.pk)}]") and lines[1].endswith(f"conflicts=[{short_id(porto.pk)}]")
    trace = RecallTrace.objects.get(pk=result.trace_id)
    traced = RecallTraceItem.objects.filter(trace=trace).order_by("position")
    assert [(row.revision_id, row.conflicts) for row in traced] == [(porto.pk, [lisbon.pk]), (lisbon.pk, [porto.pk])]
    assert lisbon.pk in (trace.candidate_ids or []) and trace.returned_count == 2


def test_a_partner_the_reader_may_not_see_is_neither_added_nor_named(ws: Workspace) -> None:
    """Madrid was learned in Alice's DM and contradicts what #general was told (Porto). Asked in
    #general, Porto comes alone: the DM belief is not added, and no marker, line or trace names it. In
    Alice's DM, which may see both, the same question returns the pair."""
    public = ws.remember("Alice lives in Porto.", said_in=ws.general, by=ws.bob, about=ws.alice)
    private = about_alice(ws, "Lives in Madrid.")
    assert linked(public, private)

    outside = ws.ask(ws.general, ws.bob, "Porto")

    assert revision_ids(outside) == [public.pk]
    assert outside.items[0].conflicts == []
    assert short_id(private.pk) not in outside.rendered and "Madrid" not in outside.rendered
    assert "conflicts=" not in outside.rendered
    trace = RecallTrace.objects.get(pk=outside.trace_id)
    assert private.pk not in (trace.candidate_ids or []) and private.pk not in (trace.dropped_ids or [])
    assert list(RecallTraceItem.objects.filter(trace=trace).values_list("revision_id", "conflicts")) == [
        (public.pk, [])
    ]
    assert outside.considered == 1

    inside = ws.ask(ws.alice_dm, ws.alice, "Porto")

    assert revision_ids(inside) == [public.pk, private.pk]
    assert inside.items[0].conflicts == [short_id(private.pk)]


def test_a_conflict_is_packed_whole_and_displaces_the_lowest_ranked_item(ws: Workspace) -> None:
    """The partner takes the place after its rival and pushes the lowest-ranked item out; a budget
    too small for both sides shows neither, never one side alone, and never more than the budget."""
    lisbon, porto = about_alice(ws, "Lives in Lisbon."), about_alice(ws, "Alice lives in Porto now.")
    others = [
        ws.remember(body, said_in=ws.general, by=ws.bob)
        for body in ("The Porto office opens at nine.", "Porto trains run late on Sundays.", "Porto has a harbour.")
    ]
    everything = revision_ids(ws.ask(ws.alice_dm, ws.alice, "Porto"))
    assert set(everything) == {lisbon.pk, porto.pk, *(o.pk for o in others)}
    assert everything.index(lisbon.pk) == everything.index(porto.pk) + 1
    assert everything[:2] == [porto.pk, lisbon.pk]  # Alice's own belief, about the requester, ranks first
    rest = everything[2:]

    for max_items in range(2, 6):
        result = ws.ask(ws.alice_dm, ws.alice, "Porto", max_items=max_items)
        assert revision_ids(result) == [porto.pk, lisbon.pk, *rest[: max_items - 2]]
        assert result.dropped_for_budget == 5 - max_items
    # One place cannot hold both sides: the pair is skipped whole and the next match takes the place.
    alone = ws.ask(ws.alice_dm, ws.alice, "Porto", max_items=1)
    assert revision_ids(alone) == rest[:1] and alone.dropped_for_budget == 4
    assert "conflicts=" not in alone.rendered


@pytest.mark.parametrize(
    "second",
    [
        "Alice lives in Lisbon, Portugal, with her husband.",  # the same value, reworded
        "She lives in lisbon.",
        "Lives near Porto.",  # another predicate
        "Used to live in Porto.",  # the past
        "Lived in Porto until 2019.",
        "Alice no longer lives in Porto.",
        "Does not live in Porto.",  # a negation
        "Wants to live in Porto one day.",  # a plan
        "Alice's sister lives in Porto.",  # another person
        "Works at a bakery in Porto.",  # another single-valued predicate
    ],
)
def test_near_misses_are_not_linked(ws: Workspace, second: str) -> None:
    about_alice(ws, "Lives in Lisbon.")
    about_alice(ws, second)
    assert not RevisionConflict.objects.exists()


def test_the_same_statement_about_another_subject_is_not_linked(ws: Workspace) -> None:
    about_alice(ws, "Lives in Lisbon.")
    ws.remember("Lives in Porto.", said_in=ws.alice_dm, by=ws.alice, about=ws.bob)
    ws.remember("Lives in Madrid.", said_in=ws.alice_dm, by=ws.alice)  # no subject
    assert not RevisionConflict.objects.exists()


def test_an_amendment_that_contradicts_another_belief_is_linked(ws: Workspace) -> None:
    lisbon = about_alice(ws, "Lives in Lisbon.")
    job = about_alice(ws, "Works at Acme.")
    message = ws.say(ws.alice_dm, ws.alice, "Actually I moved.")
    amended = revision_amend(
        agent=ws.agent,
        entry_id=job.entry_id,
        expected_revision_id=job.pk,
        body="Lives in Porto.",
        provenance=Provenance(source_message_id=message.pk),
    ).revision
    assert linked(lisbon, amended) and not linked(lisbon, job)
    # Amending a belief's own value is a supersession, not a conflict with itself.
    again = revision_amend(
        agent=ws.agent,
        entry_id=lisbon.entry_id,
        expected_revision_id=lisbon.pk,
        body="Lives in Madrid.",
        provenance=Provenance(source_message_id=message.pk),
    ).revision
    assert not linked(lisbon, again) and linked(again, amended)


def test_only_beliefs_the_new_ones_readers_may_see_are_compared(ws: Workspace) -> None:
    """Alice's DM is hers: a belief stated in public is not linked to it (the channel's readers cannot
    see the DM), while a belief stated in her DM is linked to what the channel says (she can see it)."""
    private = about_alice(ws, "Lives in Lisbon.")
    public = ws.remember("Alice lives in Porto.", said_in=ws.general, by=ws.bob, about=ws.alice)
    assert not linked(private, public)
    later = about_alice(ws, "Lives in Madrid.")
    assert linked(public, later) and linked(private, later)


def test_another_agents_beliefs_are_never_compared(ws: Workspace) -> None:
    from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, direct_conversation

    other_agent = AgentFactory.create(tenant=ws.agent.tenant)
    connector = ConnectorFactory.create(agent=other_agent, type="slack", name="acme")
    alice = ActorFactory.create(connector=connector, display_name="Alice", external_id="U200")
    other = Workspace(
        agent=other_agent,
        connector=connector,
        victor=alice,
        alice=alice,
        bob=alice,
        alice_dm=direct_conversation(connector, alice),
        bob_dm=direct_conversation(connector, alice),
        general=direct_conversation(connector, alice),
    )
    about_alice(ws, "Lives in Lisbon.")
    about_alice(other, "Lives in Porto.")
    assert not RevisionConflict.objects.exists()


def test_the_parser_reads_only_present_claims_about_the_subject() -> None:
    assert parse_claim("Lives in Lisbon.") is not None
    assert parse_claim("Caroline is 30 years old and single") is not None
    for body in ("Used to live in Lisbon", "Her manager is Victor.", "Lives near Lisbon", "Bob's dog lives in Porto"):
        assert parse_claim(body) is None, body
