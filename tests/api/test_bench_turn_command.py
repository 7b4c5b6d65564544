"""``bench_turn`` builds its corpus, serves the API with gunicorn on the test database, drives whole
turns through HTTP over many conversations and ends with one JSON line of per-step latencies."""

from __future__ import annotations

import json
import random
from collections import Counter
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from accounts.services import api_key_create
from bench.harness.server import served_process
from bench.harness.stats import percentile
from bench.management.commands import bench_turn
from history.models import Conversation, Message, Session, Turn, TurnState
from memory.models import MemoryEntry, MemoryRevision
from memory.services import entry_forget


@pytest.mark.timeout(240)
def test_bench_turn_runs_tiny_and_reports_json(transactional_db: None) -> None:
    """The gunicorn server is another process: it sees only committed rows, hence ``transactional_db``.
    A second run reuses the corpus."""
    out = StringIO()
    call_command("bench_turn", "--memories", "200", "--messages", "1000", "--turns", "5", "--warmup", "1", stdout=out)
    lines = out.getvalue().strip().splitlines()
    result = json.loads(lines[-1])
    assert result["turns"] == 5
    assert set(result) == {
        "turns",
        "conversations",
        "withheld",
        "p50_ms",
        "p95_ms",
        "with_ingest",
        "steps",
        "cpu_ms_per_turn",
        "cpu_probe_s",
    }
    assert result["withheld"] == 0
    assert set(result["cpu_probe_s"]) == {"before", "after"} and min(result["cpu_probe_s"].values()) > 0
    # gunicorn's CPU is always read; the database server's when it runs on this machine (it does here,
    # unless DATABASE_URL names another host).
    assert result["cpu_ms_per_turn"]["server"] > 0
    assert result["cpu_ms_per_turn"]["database"] is None or result["cpu_ms_per_turn"]["database"] > 0
    assert set(result["steps"]) == {"ingest", "turn_start", "round", "ledger", "reply"}
    for step in result["steps"].values():
        assert set(step) == {"p50_ms", "p95_ms"} and 0 < step["p50_ms"] <= step["p95_ms"]
    assert 0 < result["p50_ms"] <= result["p95_ms"]
    # Each turn with its ingest takes longer than the turn alone.
    assert result["p50_ms"] < result["with_ingest"]["p50_ms"] <= result["with_ingest"]["p95_ms"]
    assert "corpus built" in lines[0]
    assert MemoryEntry.objects.count() == 200
    # The corpus, then per turn one inbound message and one delivered reply.
    assert Message.objects.count() == 1000 + 2 * (5 + 1)

    again = StringIO()
    call_command("bench_turn", "--memories", "200", "--messages", "1000", "--turns", "2", "--warmup", "0", stdout=again)
    assert "corpus reused" in again.getvalue().splitlines()[0]
    assert json.loads(again.getvalue().strip().splitlines()[-1])["turns"] == 2


@pytest.mark.timeout(240)
def test_bench_turn_against_another_checkout_serves_both_and_reports_each(transactional_db: None) -> None:
    """``--against`` serves a second checkout (here this one again) on the same corpus; the two take
    blocks of turns in turn, and each is reported with its own latencies and CPU."""
    out = StringIO()
    call_command(
        "bench_turn",
        *("--memories", "200", "--messages", "1000", "--turns", "12", "--warmup", "1"),
        *("--against", str(settings.BASE_DIR)),
        stdout=out,
    )
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    other = result["against"]
    assert result["turns"] == other["turns"] == 12
    assert other["code"] == str(settings.BASE_DIR)
    for figures in (result, other):
        assert 0 < figures["p50_ms"] <= figures["p95_ms"]
        assert set(figures["steps"]) == {"ingest", "turn_start", "round", "ledger", "reply"}
        assert figures["cpu_ms_per_turn"]["server"] > 0
    # Both servers' turns went to the one corpus: per turn an inbound message and a reply.
    assert Message.objects.count() == 1000 + 2 * 2 * (12 + 1)


def test_bench_turn_against_a_folder_that_is_not_a_checkout_is_refused(transactional_db: None, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="not a checkout of Engram"):
        call_command(
            "bench_turn",
            *("--memories", "50", "--messages", "100", "--turns", "1", "--warmup", "0", "--against", str(tmp_path)),
            stdout=StringIO(),
        )


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


@pytest.mark.timeout(240)
def test_a_withheld_reply_is_counted_and_the_run_goes_on(transactional_db: None, tmp_path: Path) -> None:
    """Between a turn's recall and its reply the memory the reply cites is forgotten (as another runtime
    of the agent may do): the server withholds the reply (409 ``reply_withheld``), and the benchmark
    counts it, keeps the turn's timings and runs the next turn."""
    agent, _ = bench_turn.ensure_agent(bench_turn.TurnSpec(revisions=100, agents=1, seed=3, messages=300))
    script = bench_turn.Script.load(agent, random.Random(5))
    secret = api_key_create(agent=agent, label="test").secret

    class ForgettingCitedMemory(bench_turn.Client):
        def call(self, method: str, path: str, expect: int, body: Any = None, **options: Any) -> tuple[Any, float]:
            if path.endswith("/reply") and body["cited_ids"]:
                revision_id = int(body["cited_ids"][0].removeprefix("m:"), 16)
                entry_id = MemoryRevision.objects.get(pk=revision_id).entry_id
                entry_forget(agent=agent, entry_id=entry_id)
            return super().call(method, path, expect, body, **options)

    with served_process(tmp_path) as (base_url, _):
        turns = [script.turn(ForgettingCitedMemory(base_url, secret)) for _ in range(3)]

    assert all(set(turn) == set(bench_turn.STEPS) for turn in turns)
    withheld = Turn.objects.filter(agent=agent, state=TurnState.WITHHELD).count()
    assert script.withheld == withheld >= 1
    assert Message.objects.filter(agent=agent, direction="outbound").count() == 3 - withheld


def test_the_whole_turn_is_the_runtimes_steps_and_ingest_is_reported_beside_it() -> None:
    """Start, round, ledger and reply make the turn; the connector's ingest before it is added only in
    ``with_ingest``."""
    timings = [
        {"ingest": 10.0, "turn_start": 20.0, "round": 30.0, "ledger": 4.0, "reply": 16.0},
        {"ingest": 12.0, "turn_start": 22.0, "round": 40.0, "ledger": 5.0, "reply": 18.0},
    ]

    figures = bench_turn.turn_figures(timings)

    def p(values: list[float]) -> dict[str, Any]:
        return {"p50_ms": pytest.approx(percentile(values, 50)), "p95_ms": pytest.approx(percentile(values, 95))}

    assert bench_turn.TURN_STEPS == ("turn_start", "round", "ledger", "reply")
    assert [bench_turn.whole_turn(t) for t in timings] == [70.0, 85.0]
    assert {"p50_ms": figures["p50_ms"], "p95_ms": figures["p95_ms"]} == p([70.0, 85.0])
    assert figures["with_ingest"] == p([80.0, 97.0])
    assert figures["steps"]["ingest"] == p([10.0, 12.0])


@pytest.mark.timeout(300)
def test_via_client_times_the_python_client_beside_raw_http(transactional_db: None) -> None:
    """``--via-client``: the same kind of turns through engram_client and through raw HTTP, on one server,
    each counted, with the client's p95 over raw HTTP's in the JSON."""
    out = StringIO()
    call_command(
        "bench_turn",
        *("--memories", "100", "--messages", "300", "--turns", "10", "--warmup", "1", "--via-client"),
        stdout=out,
    )
    lines = out.getvalue().strip().splitlines()
    result = json.loads(lines[-1])
    assert result["turns"] == 10 and result["client"]["turns"] == 10
    assert set(result["client"]["steps"]) == set(bench_turn.STEPS)
    assert result["client"]["p95_ratio"] == round(result["client"]["p95_ms"] / result["p95_ms"], 3)
    assert any(line.startswith("through engram_client") for line in lines)
    # 1 + 1 warm-up turns and 10 + 10 measured ones, each delivered.
    assert Message.objects.filter(direction="outbound").count() == 22


def test_via_client_and_against_are_exclusive() -> None:
    with pytest.raises(CommandError, match="give one"):
        call_command("bench_turn", "--via-client", "--against", "/tmp", stdout=StringIO())
    with pytest.raises(CommandError, match="give one"):
        call_command("bench_turn", "--clients", "python,typescript", "--via-client", stdout=StringIO())


@pytest.mark.timeout(420)
def test_clients_times_the_python_and_typescript_clients_on_the_same_turns(transactional_db: None) -> None:
    """``--clients python,typescript``: the same script's turns through engram_client and through the
    TypeScript client (one Node process, built first), on one server, each counted and delivered, with
    both p95s and the TypeScript client's over the Python client's in the JSON."""
    out = StringIO()
    call_command(
        "bench_turn",
        *("--memories", "100", "--messages", "300", "--turns", "10", "--warmup", "1"),
        *("--clients", "python,typescript"),
        stdout=out,
    )
    lines = out.getvalue().strip().splitlines()
    result = json.loads(lines[-1])
    python, typescript = result["clients"]["python"], result["clients"]["typescript"]
    assert result["turns"] == python["turns"] == typescript["turns"] == 10
    assert result["p95_ms"] == python["p95_ms"] and set(typescript["steps"]) == set(bench_turn.STEPS)
    assert result["p95_ratios"] == {"typescript": round(typescript["p95_ms"] / python["p95_ms"], 3)}
    assert any(line.strip().startswith("typescript") and "p95 / python's" in line for line in lines)
    # 1 + 1 warm-up turns and 10 + 10 measured ones, each delivered or withheld.
    assert Message.objects.filter(direction="outbound").count() + result["withheld"] == 22
    assert Turn.objects.filter(state=TurnState.DELIVERED).count() + result["withheld"] == 22


@pytest.mark.parametrize("value", ["python", "python,python", "python,ruby", "http,python,typescript,python"])
def test_clients_takes_two_or_three_distinct_runtimes(value: str) -> None:
    with pytest.raises(CommandError, match="two or three distinct runtimes"):
        call_command("bench_turn", "--clients", value, stdout=StringIO())
