"""An erasure killed mid-way (SIGKILL to a real ``manage.py erase_person`` process, inside an open
batch transaction) leaves a consistent database and a running tombstone; running it again finishes
the job: nothing of the person is left, and the counts add up to one uninterrupted run's."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db.models import Q

from history.models import Message, MessageDirection, Turn, TurnState
from memory.models import ErasureEvent, ErasureKind, ErasureState, MemoryRevision
from tests.conftest import _worker_env
from tests.privacy.demo_world import build_demo_world, rows_with_text

pytestmark = pytest.mark.django_db(transaction=True)

#: Lines the paused process may print before it says it paused (one per step, plus the plan).
MAX_LINES_BEFORE_PAUSE = 50


def erase_command(actor_id: int, *extra: str) -> list[str]:
    return [sys.executable, "manage.py", "erase_person", str(actor_id), "--yes", "--batch-size", "1", *extra]


def test_an_erasure_killed_inside_a_batch_resumes_to_completion(tmp_path: Path) -> None:
    """SIGKILL inside the third message batch: the first two batches stay committed, the third rolls
    back, the tombstone is running with the rest pending; a second run erases everything and completes."""
    world = build_demo_world()
    sam_messages = set(Message.objects.filter(actor=world.sam).values_list("pk", flat=True))
    all_messages = set(Message.objects.values_list("pk", flat=True))
    replies = set(Message.objects.filter(direction=MessageDirection.OUTBOUND).values_list("pk", flat=True))
    all_revisions = set(MemoryRevision.objects.values_list("pk", flat=True))
    env = _worker_env(settings.DATABASES["default"]["NAME"], tmp_path / "broker")

    process = subprocess.Popen(
        erase_command(world.sam.pk, "--pause-after", "2"),
        env=env,
        cwd=settings.BASE_DIR,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for _ in range(MAX_LINES_BEFORE_PAUSE):
            line = process.stdout.readline()
            lines.append(line)
            if not line or line.startswith("paused after"):
                break
        assert lines[-1].startswith("paused after 2"), lines
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL

    event = ErasureEvent.objects.get(kind=ErasureKind.PERSON, actor_id=world.sam.pk)
    assert event.state == ErasureState.RUNNING and event.completed_at is None
    # The person's direct conversation and memories went in earlier steps; two message batches committed.
    assert event.counts["conversations"] == 1 and event.counts["messages"] == 2, event.counts
    assert len(event.pending["messages"]) >= 2, event.pending
    left = set(Message.objects.filter(pk__in=sam_messages).values_list("pk", flat=True))
    assert left and left < sam_messages

    finished = subprocess.run(
        erase_command(world.sam.pk), env=env, cwd=settings.BASE_DIR, capture_output=True, text=True, check=False
    )
    assert finished.returncode == 0, finished.stderr
    assert "tombstone" in finished.stdout

    event.refresh_from_db()
    assert event.state == ErasureState.COMPLETE and event.pending == {}
    assert ErasureEvent.objects.filter(kind=ErasureKind.PERSON, actor_id=world.sam.pk).count() == 1
    assert not Message.objects.filter(pk__in=sam_messages).exists()
    assert rows_with_text() == {}
    general_turn = Turn.objects.get(pk=world.general_turn)
    assert general_turn.state == TurnState.WITHHELD and general_turn.reply_id is None
    # Every erased message was counted once: 2 before the kill, the rest after. Besides Sam's own,
    # only agent replies went (in their DM, and elsewhere those built from what was erased).
    gone = all_messages - set(Message.objects.values_list("pk", flat=True))
    assert sam_messages < gone and gone - sam_messages <= replies, sorted(gone - sam_messages - replies)
    total = event.counts["messages"] + event.counts["messages (with conversations)"]
    assert total == len(gone), (event.counts, len(gone))
    gone_revisions = all_revisions - set(MemoryRevision.objects.values_list("pk", flat=True))
    built_from_gone = (
        Q(history_message_ids__overlap=sorted(gone))
        | Q(memory_revision_ids__overlap=sorted(gone_revisions))
        | Q(cited_revision_ids__overlap=sorted(gone_revisions))
    )
    assert not Message.objects.filter(built_from_gone).exists()
