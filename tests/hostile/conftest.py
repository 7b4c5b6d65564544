"""An agent runtime over HTTP (``tests/api/conftest.py``'s Runtime), with Victor, Alice and Bob in #general."""

from __future__ import annotations

import pytest

from tests.api.conftest import Runtime, alice_browser, runtime_for
from tests.factories import AgentFactory


@pytest.fixture
def runtime(db: None) -> Runtime:
    runtime = runtime_for(AgentFactory.create())
    for person in ("U100", "U200", "U300"):
        runtime.say("general", person, "Morning all")
    return runtime


__all__ = ["alice_browser", "runtime"]  # alice_browser: Alice signed in as herself (tests/api/conftest.py)
