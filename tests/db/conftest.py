from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.db.helpers import World
from tests.factories import ActorFactory, ConnectorFactory, public_channel


@pytest.fixture
def world(db: None) -> World:
    """One agent with its connector, a person, a workspace channel and an operator user."""
    connector = ConnectorFactory.create()
    return World(
        agent=connector.agent,
        connector=connector,
        actor=ActorFactory.create(connector=connector),
        conversation=public_channel(connector),
        user=User.objects.create(username="operator"),
    )
