"""``bench_turn`` builds its corpus, serves the API with gunicorn on the test database, drives whole
turns through HTTP over many conversations and ends with one JSON line of per-step latencies."""

from __future__ import annotations

import json
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command

from history.models import Conversation, Message, Session
from memory.models import MemoryEntry


@pytest.mark.timeout(240)
def test_bench_turn_runs_tiny_and_reports_json(transactional_db: None) -> None:
    """The gunicorn server is another process: it sees only committed rows, hence ``transactional_db``.
    A second run reuses the corpus."""
    out = StringIO()
    call_command("bench_turn", "--memories", "200", "--messages", "1000", "--turns", "5", "--warmup", "1", stdout=out)
    lines = out.getvalue().strip().splitlines()
    result = json.loads(lines[-1])
    assert result["turns"] == 5
    assert set(result) == {"turns", "conversations", "p50_ms", "p95_ms", "steps", "cpu_ms_per_turn"}
    # gunicorn's CPU is always read; the database server's when it runs on this machine (it does here,
    # unless DATABASE_URL names another host).
    assert result["cpu_ms_per_turn"]["server"] > 0
    assert result["cpu_ms_per_turn"]["database"] is None or result["cpu_ms_per_turn"]["database"] > 0
    assert set(result["steps"]) == {"ingest", "turn_start", "round", "ledger", "reply"}
    for step in result["steps"].values():
        assert set(step) == {"p50_ms", "p95_ms"} and 0 < step["p50_ms"] <= step["p95_ms"]
    assert 0 < result["p50_ms"] <= result["p95_ms"]
    assert "corpus built" in lines[0]
    assert MemoryEntry.objects.count() == 200
    # The corpus, then per turn one inbound message and one delivered reply.
    assert Message.objects.count() == 1000 + 2 * (5 + 1)

    again = StringIO()
    call_command("bench_turn", "--memories", "200", "--messages", "1000", "--turns", "2", "--warmup", "0", stdout=again)
    assert "corpus reused" in again.getvalue().splitlines()[0]
    assert json.loads(again.getvalue().strip().splitlines()[-1])["turns"] == 2


@pytest.mark.timeout(240)
def test_bench_turn_ends_conversations_and_opens_a_session_per_conversation(transactional_db: None) -> None:
    """A conversation ends after ``--per-conversation`` turns and the next turns in its room arrive in a
    new thread with the room's audience, served by a session of its own: no conversation grows past
    its length, so a long run never reaches the lineage cap and every reply is delivered."""
    out = StringIO()
    call_command(
        "bench_turn",
        *("--memories", "100", "--messages", "300", "--turns", "60", "--warmup", "0", "--per-conversation", "2"),
        stdout=out,
    )
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    assert result["turns"] == 60

    replies = Message.objects.filter(direction="outbound")
    assert replies.count() == 60
    per_conversation = Counter(replies.values_list("conversation_id", flat=True))
    assert max(per_conversation.values()) <= 2
    assert len(per_conversation) == result["conversations"] >= 30
    assert Session.objects.filter(conversation_id__in=per_conversation).count() == len(per_conversation)
    rooms = {c.external_thread_id: c for c in Conversation.objects.exclude(external_thread_id__contains="/")}
    threads = Conversation.objects.filter(pk__in=per_conversation, external_thread_id__contains="/")
    assert threads.exists() and any(
        c.external_thread_id in rooms for c in Conversation.objects.filter(pk__in=per_conversation)
    )
    for thread in threads:
        room = rooms[thread.external_thread_id.split("/")[0]]
        assert (thread.audience_kind, thread.audience_readers) == (room.audience_kind, room.audience_readers)

    # A second run on the same corpus continues the rooms, not the threads the first run opened, and
    # counts the first run's turns toward each conversation's length.
    call_command(
        "bench_turn",
        *("--memories", "100", "--messages", "300", "--turns", "20", "--warmup", "0", "--per-conversation", "2"),
        stdout=StringIO(),
    )
    per_conversation = Counter(Message.objects.filter(direction="outbound").values_list("conversation_id", flat=True))
    assert sum(per_conversation.values()) == 80 and max(per_conversation.values()) <= 2
    assert not Conversation.objects.filter(external_thread_id__regex=r"/.*/").exists()
