"""A recall loads only the people its text could name, and finds exactly the ones it does name."""

from __future__ import annotations

import pytest

from accounts.models import Actor
from accounts.selectors import actors_named_in
from memory.retrieval.query import named_actor_ids
from tests.factories import ActorFactory, ConnectorFactory

pytestmark = pytest.mark.django_db


def test_only_the_agents_actors_whose_name_or_id_occurs_in_the_text_are_loaded() -> None:
    connector = ConnectorFactory.create()
    alice = ActorFactory.create(connector=connector, display_name="Alice Smith", external_id="U100")
    bob = ActorFactory.create(connector=connector, display_name="Bob", external_id="U200")
    al = ActorFactory.create(connector=connector, display_name="Al", external_id="U300")
    ActorFactory.create_batch(50, connector=connector, display_name="Zed")
    ActorFactory.create(display_name="Alice Smith", external_id="U100")  # another agent's person

    text = "Did ALICE SMITH mention the deploy? Ask u200."
    loaded = actors_named_in(connector.agent_id, text)

    # "Al" occurs inside "alice": loaded as a candidate, not named. Nobody else is read.
    assert [a.pk for a in loaded] == [alice.pk, bob.pk, al.pk]
    assert named_actor_ids(text, loaded) == (alice.pk, bob.pk)
    everyone = list(Actor.objects.filter(connector__agent=connector.agent))
    assert named_actor_ids(text, loaded) == named_actor_ids(text, everyone)


def test_a_text_naming_nobody_loads_nobody() -> None:
    connector = ConnectorFactory.create()
    ActorFactory.create_batch(5, connector=connector, display_name="Carol")
    assert actors_named_in(connector.agent_id, "what is the deploy schedule?") == []
