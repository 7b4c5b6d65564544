"""examples/agent_loop.py end to end against a live server, run as a user would run it: the scripted
agent recalls, searches the history, remembers (Maya's facts with her as their subject, the project
fact found by the search with that message as its source), amends, cites ids and gets every reply
delivered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from accounts.models import Actor
from history.models import ConversationSearchEvent, Message, Turn
from memory.models import MemoryEntry, MemoryEvidence, MemoryOperation
from tests.clients.conftest import Workspace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def test_the_scripted_agent_runs_a_whole_conversation(workspace: Workspace) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", workspace.base_url, "--api-key", workspace.key],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "4 replies delivered" in out
    assert "The freeze ends on Friday 12 December at noon [m:" in out
    assert "Updated: you live in Lisbon now [m:" in out

    turns = Turn.objects.filter(session__agent=workspace.agent)
    assert sorted(turns.values_list("state", flat=True)) == ["delivered"] * 4
    operations = list(MemoryOperation.objects.filter(turn__in=turns).order_by("pk").values_list("kind", flat=True))
    assert operations == ["remember", "remember", "remember", "amend"]
    entries = MemoryEntry.objects.filter(agent=workspace.agent).select_related("current_revision")
    (home,) = [e for e in entries if e.current_revision and "Lisbon" in e.current_revision.body]
    assert home.current_revision is not None and home.current_revision.number == 2
    maya = Actor.objects.get(external_id="U0MAYA", connector__agent=workspace.agent)
    subjects = {e.current_revision.body: e.current_revision.subject_id for e in entries if e.current_revision}
    assert subjects == {
        "Lives in Lisbon.": maya.pk,
        "Prefers short answers.": maya.pk,
        "The deploy freeze ends on Friday 12 December at noon.": None,
    }
    assert ConversationSearchEvent.objects.filter(agent=workspace.agent).exists()
    replies = Message.objects.filter(agent=workspace.agent, direction="outbound").order_by("pk")
    last = replies.last()
    assert last is not None and home.current_revision_id in last.cited_revision_ids
    # The search's hits joined the second reply's provenance.
    freeze = Message.objects.get(agent=workspace.agent, body__startswith="The deploy freeze ends")
    assert freeze.pk in replies[1].history_message_ids
    # The project fact was learned from the message the search found, not from Maya's question.
    learned = MemoryEvidence.objects.filter(revision__body__startswith="The deploy freeze ends", kind="source_message")
    assert list(learned.values_list("message_id", flat=True)) == [freeze.pk]
