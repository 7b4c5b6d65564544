"""The evaluation contract of spec/000 ("Memory retrieval"), one test per case, named after it.

Each case separates eligibility from relevance; the privacy case also runs with a provider that
claims the private memory is the best possible match, to show similarity cannot restore it.
"""

from __future__ import annotations

from collections.abc import Sequence

from accounts.services import actor_rename
from memory.models import MemoryRevision, RecallTrace
from memory.retrieval.eligibility import EligibleRevisions, perspective_for_conversation
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import RecallQuery, form_query
from memory.retrieval.service import recall, task_budget
from memory.services import Provenance, revision_amend
from tests.factories import ActorFactory
from tests.retrieval.conftest import Workspace, revision_ids


class EverythingMatches:
    """A semantic provider that ranks every revision of the agent first: similarity at its maximum."""

    name = "semantic"
    in_database = True

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        ids = MemoryRevision.objects.filter(agent_id=eligible.perspective.agent_id).values_list("pk", flat=True)
        return [ArmHit("semantic", revision_id, 1, 1.0) for revision_id in ids]


def test_current_actor_asks_about_their_children_subject_boost_retrieves_the_fact(ws: Workspace) -> None:
    """Alice asks about her children; the fact about her ranks above an equally worded fact about Bob."""
    # Both facts were learned in #general and Bob's is the stronger lexical match: only the subject
    # boost (not the conversation boost) can put Alice's first when she asks in her DM.
    bobs = ws.remember(
        "Has three children; the children play soccer.",
        said_in=ws.general,
        by=ws.bob,
        about=ws.bob,
        belief_type="relationship",
    )
    alices = ws.remember(
        "Has two children, Maya and Leo.", said_in=ws.general, by=ws.alice, about=ws.alice, belief_type="relationship"
    )

    result = ws.ask(ws.alice_dm, ws.alice, "How many children do I have?")

    assert revision_ids(result)[0] == alices.pk
    assert result.items[0].components["subject"] == 1.0
    assert bobs.pk in revision_ids(result)  # relevant too: subject is a boost, not a boundary


def test_another_actor_asks_tabs_versus_spaces_cto_preference_keeps_subject_and_source(ws: Workspace) -> None:
    """Bob's question retrieves the CTO's preference, rendered with Victor as subject and source."""
    cto = ws.remember(
        "Prefers tabs over spaces.", said_in=ws.general, by=ws.victor, about=ws.victor, belief_type="preference"
    )

    result = ws.ask(ws.general, ws.bob, "Should we indent with tabs or spaces?")

    item = next(i for i in result.items if i.revision_id == cto.pk)
    assert (item.subject_id, item.source_actor_id) == (ws.victor.pk, ws.victor.pk)
    assert "about Victor (id U123): Prefers tabs over spaces." in result.rendered


def test_a_coding_question_does_not_select_an_unrelated_favorite_food_memory(ws: Workspace) -> None:
    """The subject arm finds Alice's food preference, but a non-empty query needs relevance."""
    food = ws.remember("Favorite food is ramen.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)

    result = ws.ask(ws.alice_dm, ws.alice, "Why does this Python import raise a circular dependency error?")

    assert food.pk not in revision_ids(result)
    assert "ramen" not in result.rendered


def test_a_food_question_selects_that_favorite_food_memory(ws: Workspace) -> None:
    food = ws.remember("Favorite food is ramen.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)

    result = ws.ask(ws.alice_dm, ws.alice, "What food should we order for my lunch?")

    assert revision_ids(result)[0] == food.pk


def test_a_private_direct_message_memory_is_never_eligible_in_another_actors_turn(ws: Workspace) -> None:
    """Alice's DM fact never reaches Bob's DM or the channel, even when a provider ranks it first."""
    secret = ws.remember("Salary is 90k and negotiating a raise.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    text = "Salary is 90k and negotiating a raise."

    for conversation in (ws.bob_dm, ws.general):
        for providers in ((), (EverythingMatches(),)):
            result = recall(
                perspective=perspective_for_conversation(conversation, requester_id=ws.bob.pk),
                query=form_query(message=text, requester_id=ws.bob.pk),
                budget=task_budget(),
                providers=providers,
            )
            assert secret.pk not in revision_ids(result)
            assert "90k" not in result.rendered
    assert secret.pk in revision_ids(ws.ask(ws.alice_dm, ws.alice, text))  # it is there for Alice


def test_an_amended_memory_exposes_only_its_current_revision(ws: Workspace) -> None:
    first = ws.remember("Drives a Civic.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    second = revision_amend(
        agent=ws.agent,
        entry_id=first.entry_id,
        expected_revision_id=first.pk,
        provenance=Provenance(source_message_id=ws.say(ws.alice_dm, ws.alice, "I sold the Civic").pk),
        body="Drives a Model 3, sold the Civic.",
    ).revision

    result = ws.ask(ws.alice_dm, ws.alice, "Civic or Model 3: what do I drive?")

    assert revision_ids(result) == [second.pk]
    assert "Drives a Civic." not in result.rendered
    # Eligibility itself excludes it: the old revision is not even a candidate (collapse would also
    # drop it beside its successor, but that is a second line of defence, not the rule).
    assert first.pk not in (RecallTrace.objects.get(pk=result.trace_id).candidate_ids or [])


def test_an_actor_rename_changes_rendering_without_rewriting_memory_text(ws: Workspace) -> None:
    pref = ws.remember("Prefers tabs over spaces.", said_in=ws.general, by=ws.victor, about=ws.victor)
    before = ws.ask(ws.general, ws.bob, "tabs or spaces?").rendered

    actor_rename(actor=ws.victor, display_name="Viktor")
    after = ws.ask(ws.general, ws.bob, "tabs or spaces?").rendered

    assert "Victor (id U123)" in before and "Viktor (id U123)" in after
    assert after == before.replace("Victor (id U123)", "Viktor (id U123)")
    assert MemoryRevision.objects.get(pk=pref.pk).body == "Prefers tabs over spaces."


def test_two_actors_with_the_same_display_name_remain_distinct_through_stable_ids(ws: Workspace) -> None:
    sam_a = ActorFactory.create(connector=ws.connector, display_name="Sam", external_id="U901")
    sam_b = ActorFactory.create(connector=ws.connector, display_name="Sam", external_id="U902")
    about_a = ws.remember("Owns the billing service.", said_in=ws.general, by=sam_a, about=sam_a)
    about_b = ws.remember("Owns the search service.", said_in=ws.general, by=sam_b, about=sam_b)

    result = ws.ask(ws.general, ws.bob, "Who owns the billing and search services?")

    subjects = {item.revision_id: item.subject for item in result.items}
    assert subjects[about_a.pk] == "Sam (id U901)"
    assert subjects[about_b.pk] == "Sam (id U902)"
