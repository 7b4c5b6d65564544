"""Providers share one deadline: a provider that runs providers of its own gives them what is left of
its deadline, never a fresh one, so a read with a hung vector store still answers within the deadline it
was given."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from memory.retrieval.providers import PROVIDER_DEADLINE_S, ArmHit, ProviderCall, ProviderOutcome, run_providers

pytestmark = pytest.mark.django_db

#: Much shorter than the default deadline the inner providers would otherwise get.
OUTER_DEADLINE_S = 0.4
HANG_S = 2.0


def hung_vector_store() -> Sequence[ArmHit]:
    time.sleep(HANG_S)
    return [ArmHit("semantic", 1, 1, 1.0)]


def test_providers_run_by_a_provider_end_by_its_deadline() -> None:
    inner: list[ProviderOutcome] = []

    def nesting_provider() -> Sequence[ArmHit]:
        # Asks for the default deadline, as history search does.
        inner.append(run_providers([ProviderCall("semantic", False, hung_vector_store)], cap=10))
        return []

    started = time.monotonic()
    outer = run_providers([ProviderCall("source", True, nesting_provider)], cap=10, deadline_s=OUTER_DEADLINE_S)
    elapsed = time.monotonic() - started

    assert HANG_S < PROVIDER_DEADLINE_S
    assert elapsed < HANG_S / 2
    assert inner[0].degradation == "semantic_timeout" and inner[0].failed == {"semantic"}
    assert outer.degradation == "" and outer.failed == frozenset()


def test_a_provider_alone_keeps_the_deadline_it_was_given() -> None:
    """Outside any provider the deadline is the caller's own: nothing is left over from an earlier read."""
    run_providers([ProviderCall("source", True, lambda: [])], cap=10, deadline_s=0.01)
    time.sleep(0.05)

    outcome = run_providers([ProviderCall("semantic", False, lambda: [ArmHit("semantic", 1, 1, 1.0)])], cap=10)
    assert outcome.degradation == "" and outcome.hits == [ArmHit("semantic", 1, 1, 1.0)]
