"""Oversized and malformed requests answer a clear 4xx with a machine-readable code and change nothing:
a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413 ``request_too_large``; a batch over 500 messages, a
round over 8 calls, a window over 100 messages, a field over its length are 400 ``invalid_request``;
JSON that is nested too deeply or holds strings PostgreSQL cannot store (NUL, lone surrogates) is
400 ``malformed_request``, wherever in the document they are."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from history.apis import MAX_BATCH
from history.models import Message, Turn
from memory.models import MemoryEntry
from memory.turns import MAX_CALLS_PER_ROUND, MAX_LOADED_MESSAGES
from tests.api.conftest import Runtime


def message(n: int = 0, **override: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "connector": {"type": "slack", "name": "acme"},
        "thread": {"external_id": "general", "audience": {"kind": "workspace"}},
        "actor": {"external_id": "U100", "display_name": "Victor"},
        "external_id": f"hostile-{n}",
        "body": f"Message number {n}.",
        "created_at": "2026-11-30T10:00:00Z",
        "evidence": {"method": "connector_signed"},
    }
    body.update(override)
    return body


def post_raw(runtime: Runtime, path: str, raw: bytes) -> Any:
    return runtime.client.generic("POST", path, raw, content_type="application/json")  # type: ignore[arg-type]


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert body["code"] == code and body["message"] and "detail" in body, body
    return dict(body)


def test_the_configured_body_limit_fits_the_largest_valid_batch() -> None:
    largest = json.dumps({"messages": [message(n, body="x" * 20_000) for n in range(MAX_BATCH)]})
    assert len(largest.encode()) < settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def test_a_body_over_the_limit_answers_413_request_too_large_and_writes_nothing(runtime: Runtime) -> None:
    before = Message.objects.count()
    raw = json.dumps({"messages": [message(n, body="y" * 5_000) for n in range(10)]}).encode()
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=len(raw) - 1):
        response = post_raw(runtime, "/api/v1/messages", raw)
    assert_error(response, 413, "request_too_large")
    assert Message.objects.count() == before


def test_a_batch_over_500_messages_is_refused_whole(runtime: Runtime) -> None:
    before = Message.objects.count()
    response = runtime.post("/api/v1/messages", {"messages": [message(n) for n in range(MAX_BATCH + 1)]})
    body = assert_error(response, 400, "invalid_request")
    assert "messages" in body["detail"]
    assert Message.objects.count() == before


def test_a_round_over_8_calls_is_refused_before_any_runs(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U100", "Please remember a lot of things.")
    calls = [{"verb": "remember", "body": f"Fact {n}."} for n in range(MAX_CALLS_PER_ROUND + 1)]
    body = assert_error(runtime.round(turn["turn_id"], *calls), 400, "invalid_request")
    assert "calls" in body["detail"]
    assert not MemoryEntry.objects.filter(agent=runtime.agent).exists()
    assert Turn.objects.get(pk=turn["turn_id"]).rounds_used == 0


@pytest.mark.parametrize(
    ("path", "payload"),
    [
        ("/api/v1/messages", {"messages": [message(body="z" * 20_001)]}),
        ("/api/v1/messages", {"messages": [message(external_id="e" * 201)]}),
        ("/api/v1/messages", {"messages": []}),
        ("/api/v1/messages", {"messages": [message(thread={"external_id": "t", "audience": {"kind": "members"}})]}),
        ("/api/v1/messages", {"messages": [message(surprise=True)]}),
        ("/api/v1/messages", {"messages": "not a list"}),
    ],
)
def test_invalid_ingest_payloads_answer_400_invalid_request(runtime: Runtime, path: str, payload: Any) -> None:
    before = Message.objects.count()
    assert_error(runtime.post(path, payload), 400, "invalid_request")
    assert Message.objects.count() == before


def test_a_loaded_window_over_100_messages_is_refused(runtime: Runtime) -> None:
    inbound = runtime.say("general", "U100", "hello")
    session = runtime.session("general", "U100")
    window = list(range(1, MAX_LOADED_MESSAGES + 2))
    response = runtime.post(
        f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound, "loaded_message_ids": window}
    )
    assert_error(response, 400, "invalid_request")
    assert not Turn.objects.filter(session_id=session).exists()


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"not json",
        b'{"messages": [1, 2,]}',
        b"[" * 50_000 + b"]" * 50_000,  # deeper than Python's recursion limit
        b'{"messages": [{"evidence": {"method": "connector_signed", "detail": {"k": "a\\u0000b"}}}]}',
        b'{"messages": [{"evidence": {"method": "connector_signed", "detail": {"k\\u0000": 1}}}]}',
        b'{"messages": [{"evidence": {"method": "connector_signed", "detail": {"k": "\\ud800"}}}]}',
    ],
    ids=["truncated", "text", "trailing-comma", "deep", "nul-value", "nul-key", "lone-surrogate"],
)
def test_malformed_json_answers_400_malformed_request(runtime: Runtime, raw: bytes) -> None:
    before = Message.objects.count()
    assert_error(post_raw(runtime, "/api/v1/messages", raw), 400, "malformed_request")
    assert Message.objects.count() == before


def test_a_well_formed_nul_in_a_free_form_field_is_refused_before_it_reaches_postgresql(runtime: Runtime) -> None:
    # Found by this suite: the evidence ``detail`` (a JSON object) once carried NUL through to a jsonb
    # column and answered 500; the parser now refuses it wherever it appears.
    raw = json.dumps({"messages": [message(evidence={"method": "connector_signed", "detail": {"k": "\x00"}})]})
    assert_error(post_raw(runtime, "/api/v1/messages", raw.encode()), 400, "malformed_request")


def test_a_lone_surrogate_in_a_declared_text_field_is_refused(runtime: Runtime) -> None:
    raw = json.dumps({"messages": [message(body="half \ud83d of an emoji")]}).encode()
    response = post_raw(runtime, "/api/v1/messages", raw)
    assert response.status_code == 400 and response.json()["code"] in {"malformed_request", "invalid_request"}


@pytest.mark.parametrize("host", ["", "evil.example\x00", "bad host"])
def test_a_request_with_a_missing_or_disallowed_host_answers_a_json_400(runtime: Runtime, host: str) -> None:
    turn = Turn.objects.filter(agent=runtime.agent).first()
    response = runtime.client.get(f"/api/v1/turns/{turn.pk if turn else 1}/ledger", HTTP_HOST=host)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "bad_request"
