"""The lexical arm's cap counts only matches the destination may see: a better-ranked match that
eligibility removes neither appears among the candidates nor takes one of the cap's places."""

from __future__ import annotations

import pytest

from memory.models import RecallTrace
from memory.retrieval import arms
from tests.retrieval.conftest import Workspace


def test_the_lexical_cap_is_filled_by_the_best_matches_the_destination_may_see(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arms, "LEXICAL_CAP", 2)
    # The best match by far (the word three times), but said in Bob's DM: never disclosable in #general.
    private = ws.remember("Kiwi kiwi kiwi rollout notes.", said_in=ws.bob_dm, by=ws.bob)
    visible = [ws.remember(f"Kiwi rollout step {n}.", said_in=ws.general, by=ws.bob) for n in range(3)]

    result = ws.ask(ws.general, ws.alice, "kiwi")

    trace = RecallTrace.objects.get(pk=result.trace_id)
    assert trace.arms is not None
    assert trace.arms["hits"]["lexical"] == 2
    # Equal ranks are ordered by revision id: the first two visible matches fill the cap.
    assert trace.candidate_ids == sorted(r.pk for r in visible[:2])
    assert private.pk not in trace.candidate_ids
