"""Rendering contracts: the same belief set renders to the same bytes (across runs and processes);
whole items are packed under both caps and never truncated; the allowance is validated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from config.errors import Unprocessable
from memory.models import short_id
from memory.retrieval.render import Labels, estimate_tokens, pack, render_line
from memory.retrieval.service import Budget
from tests.retrieval.conftest import Workspace, revision_ids
from tests.retrieval.test_near_duplicates import candidate

REPO = Path(__file__).resolve().parents[2]

RENDER_IN_SUBPROCESS = """
import django, json, sys
django.setup()
from accounts.models import Actor
from history.models import Conversation
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import form_query
from memory.retrieval.service import recall, task_budget
args = json.loads(sys.argv[1])
conversation = Conversation.objects.get(pk=args["conversation"])
result = recall(
    perspective=perspective_for_conversation(conversation, requester_id=args["requester"]),
    query=form_query(message=args["text"], requester_id=args["requester"],
                     known_actors=list(Actor.objects.filter(connector__agent_id=conversation.agent_id))),
    budget=task_budget(),
)
sys.stdout.write(result.rendered)
"""


def seed(ws: Workspace) -> None:
    ws.remember(
        "Prefers tabs over spaces.", said_in=ws.general, by=ws.victor, about=ws.victor, belief_type="preference"
    )
    ws.remember("Reviews pull requests on Fridays.", said_in=ws.general, by=ws.alice, about=ws.victor)
    ws.remember(
        "The tabs versus spaces debate was settled in March.",
        said_in=ws.general,
        by=ws.bob,
        belief_type="decision",
        confidence=0.5,
    )
    ws.remember("Pull requests need two approvals.", said_in=ws.general, by=ws.bob, always_on=True, salience=0.9)


@pytest.mark.django_db(transaction=True)
def test_the_same_belief_set_renders_byte_identically_across_runs_and_processes(ws: Workspace) -> None:
    seed(ws)
    text = "tabs, spaces and pull requests"
    first = ws.ask(ws.general, ws.bob, text).rendered
    second = ws.ask(ws.general, ws.bob, text).rendered
    assert first == second

    database = settings.DATABASES["default"]
    url = f"postgresql://{database['USER']}@{quote(str(database['HOST']), safe='')}/{connection.settings_dict['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONHASHSEED": "random"}
    args = json.dumps({"conversation": ws.general.pk, "requester": ws.bob.pk, "text": text})
    other_process = subprocess.run(
        [sys.executable, "-c", RENDER_IN_SUBPROCESS, args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert other_process == first
    assert first.count("\n[m:") == 4 and first.startswith('<memory policy="retrieval@3" moment="tool">\n')
    assert "pull requests need two approvals" in first.lower()


@pytest.mark.django_db
def test_items_are_packed_whole_and_oversized_ones_skipped(ws: Workspace) -> None:
    """Under a small allowance an item too long to fit is skipped, never cut; smaller ones still fit."""
    long_body = "Release checklist: " + " ".join(f"step{i} verify the release artefact" for i in range(120))
    long = ws.remember(long_body, said_in=ws.general, by=ws.bob)
    short = ws.remember("Release checklist lives in the wiki.", said_in=ws.general, by=ws.bob)
    assert estimate_tokens(long_body) > 256

    result = ws.ask(ws.general, ws.alice, "Where is the release checklist?", max_tokens=256)

    assert revision_ids(result) == [short.pk]
    assert long.pk not in revision_ids(result) and "step119" not in result.rendered
    assert result.dropped_for_budget == 1
    assert result.tokens <= 256


@pytest.mark.django_db
def test_the_item_cap_bounds_the_block(ws: Workspace) -> None:
    for n in range(6):
        ws.remember(f"Runbook entry {n}: restart the queue worker.", said_in=ws.general, by=ws.bob)
    result = ws.ask(ws.general, ws.alice, "runbook queue worker restart", max_items=3)
    assert len(result.items) == 3 and result.dropped_for_budget == 3


def test_a_conflict_is_packed_whole_under_both_caps() -> None:
    """The sides of a conflict take consecutive places after the best of them and fit together or not at
    all, under the item cap and the token allowance alike; what they displace is the lowest-ranked."""
    first, other, partner, last = (
        candidate(1, "Lives in Porto."),
        candidate(2, "The Porto office opens at nine."),
        candidate(3, "Lives in Lisbon."),
        candidate(4, "Porto has a harbour."),
    )
    first.conflicts, partner.conflicts = [3], [1]
    ranked = [first, other, partner, last]
    labels = Labels({})

    def packed(**caps: int) -> list[int]:
        return [item.revision_id for item in pack(ranked, labels, **caps).items]  # type: ignore[arg-type]

    assert packed(max_items=4, max_tokens=4096) == [1, 3, 2, 4]
    assert packed(max_items=3, max_tokens=4096) == [1, 3, 2]
    assert packed(max_items=1, max_tokens=4096) == [2]
    lines = {item.revision_id: render_line(item, labels) for item in ranked}
    pair = estimate_tokens(lines[1]) + estimate_tokens(lines[3])
    assert packed(max_items=4, max_tokens=pair) == [1, 3]
    assert packed(max_items=4, max_tokens=pair - 1) == [2, 4]
    assert lines[1].endswith(f"conflicts=[{short_id(3)}]") and lines[3].endswith(f"conflicts=[{short_id(1)}]")


@pytest.mark.parametrize("allowance", [255, 32_769, 0])
def test_the_memory_allowance_must_lie_between_256_and_32768_tokens(allowance: int) -> None:
    with pytest.raises(Unprocessable) as refused:
        Budget(max_items=10, max_tokens=allowance)
    assert refused.value.code == "invalid_budget"


def test_the_token_estimate_is_conservative() -> None:
    """It never counts fewer tokens than one per four characters of English, the usual tokenizer rate."""
    text = "Prefers concise prose-first writing and short status updates on Fridays."
    assert estimate_tokens(text) >= len(text) / 4
