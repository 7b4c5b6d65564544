"""Memory recall's source arm is on by default wherever the semantic arm runs: the messages memories were
learned from are ranked by their words and their meaning. Without vectors it stays out (by their words
alone the messages ranked worse than recall's own arms), and ``ENGRAM_RECALL_SOURCE_ARM=0`` leaves it out."""

from __future__ import annotations

from typing import Any

import pytest

from memory.embeddings.index import drain_outbox
from memory.retrieval.service import recall_providers
from memory.retrieval.sources import SourceMessages
from tests.retrieval.conftest import Workspace

pytestmark = pytest.mark.usefixtures("pgvector")

SAID = "The kiwi offsite moved to Lisbon because the visas were late."
QUESTION = "Why did the kiwi offsite move?"


def sourced(ws: Workspace) -> bool:
    return any(isinstance(p, SourceMessages) for p in recall_providers()[0])


def test_the_source_arm_runs_by_default_where_the_semantic_arm_runs(ws: Workspace, settings: Any) -> None:
    settings.ENGRAM_RECALL_SOURCE_ARM = True
    assert not sourced(ws), "no live generation yet: no vectors, no source arm"
    before = ws.ask(ws.general, ws.alice, "Where does the team meet?")
    assert before.rendered.startswith('<memory policy="retrieval@3"')

    meets = ws.remember(SAID, said_in=ws.general, by=ws.bob)
    while drain_outbox():
        pass
    assert sourced(ws)
    found = ws.ask(ws.general, ws.alice, QUESTION)
    assert found.degradation == ""
    (item,) = [item for item in found.items if item.revision_id == meets.pk]
    assert item.arms == ["lexical", "semantic", "source"]
    assert found.rendered.startswith('<memory policy="retrieval@3+source@2"')

    settings.ENGRAM_RECALL_SOURCE_ARM = False
    assert not sourced(ws)
    off = ws.ask(ws.general, ws.alice, QUESTION)
    assert [item.arms for item in off.items if item.revision_id == meets.pk] == [["lexical", "semantic"]]
    assert off.rendered.startswith('<memory policy="retrieval@3"')
