"""The demo shows the flagship view on first run: ``load_demo`` drives real turns for Priya and Sam
through the API with the scripted agent (one leaves a memory worth correcting), each reply citing and
quoting exactly what its calls returned, Priya sees hers in Chromium, and ``demo_api_key`` prints the
key the run banner shows: the same one on every restart of the data folder until ``--rotate`` (only
where the demo is loaded; a runtime key, or with ``--manage`` one that may also read the memory list)."""

from __future__ import annotations

import re
import stat
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from accounts.models import Actor, ApiKey
from demo.management.commands.demo_api_key import key_path
from demo.management.commands.load_demo import DEMO_PASSWORD
from history.models import Message, Turn
from memory.models import EvidenceKind, MemoryEvidence, MemoryRevision
from memory.models.base import short_id
from tests.browser import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

CITATION = re.compile(r"\[(m:[0-9a-f]{8,16})\]")


@pytest.fixture(autouse=True)
def data_folder(settings: Any, tmp_path: Path) -> Path:
    """The demo key is kept in the data folder; each test gets its own."""
    settings.VAR_DIR = tmp_path
    return tmp_path


def _key(*args: str) -> str:
    out = StringIO()
    call_command("demo_api_key", *args, stdout=out)
    return out.getvalue().strip()


def _status(secret: str, path: str = "/api/v1/tools") -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get(path).status_code


def _turns() -> list[Turn]:
    return list(Turn.objects.select_related("inbound_message__actor", "reply").order_by("pk"))


def _reply(turn: Turn) -> Message:
    assert turn.reply is not None
    return turn.reply


def test_the_demo_load_drives_real_turns_for_priya_and_sam() -> None:
    call_command("load_demo", stdout=StringIO())
    turns = _turns()
    assert [(t.inbound_message.actor and t.inbound_message.actor.external_id, t.state) for t in turns] == [
        ("U01PRIYA", "delivered"),
        ("U01PRIYA", "delivered"),
        ("U03SAMLI", "delivered"),
        ("U03SAMLI", "delivered"),
        ("U03SAMLI", "delivered"),
    ]
    assert all(_reply(t).body for t in turns)
    assert not ApiKey.objects.filter(label="demo turns", revoked_at__isnull=True).exists()


def test_every_demo_reply_cites_only_what_its_turn_recalled_or_wrote() -> None:
    """Each citation in a reply's text is one the store accepted: a memory the turn recalled or wrote
    (the reply's ledger), none ignored."""
    call_command("load_demo", stdout=StringIO())
    for turn in _turns():
        reply = _reply(turn)
        written = set(
            MemoryRevision.objects.filter(turn=turn).values_list("pk", flat=True)
        )  # what the turn's own calls wrote
        assert set(reply.cited_revision_ids) <= set(reply.memory_revision_ids)
        assert set(reply.memory_revision_ids) >= written
        assert set(CITATION.findall(reply.body)) == {short_id(r) for r in reply.cited_revision_ids}, reply.body


def test_priyas_beta_question_cites_the_beta_launch_memory() -> None:
    """The new user's report: the beta launch reply cited the Okta SSO memory. It cites exactly the
    launch date memory, as amended when the launch moved, and states the date it holds."""
    call_command("load_demo", stdout=StringIO())
    beta = _turns()[0]
    reply = _reply(beta)
    assert beta.inbound_message.body.startswith("When does the Atlas beta launch now?")
    (cited,) = MemoryRevision.objects.filter(pk__in=reply.cited_revision_ids)
    assert cited.body.startswith("The Atlas beta launches on ") and cited.body.endswith("two weeks later than planned.")
    assert cited.number == 2 and cited.entry.current_revision_id == cited.pk
    launch_date = cited.body.removeprefix("The Atlas beta launches on ").split(",")[0]
    assert reply.body.startswith(f"{launch_date} [{cited.short_id}]")


def test_the_canary_reply_quotes_the_message_its_search_returned() -> None:
    """Sam asks what Marco said about the canary stage: the reply quotes Marco's message in #general,
    which the search returned, word for word; Marco's follow-up in #atlas-core, which Sam does not
    read, stays out of it."""
    call_command("load_demo", stdout=StringIO())
    canary = _turns()[3]
    assert canary.inbound_message.body.startswith("What did Marco say about the canary stage")
    marco = Actor.objects.get(external_id="U04MARCO")
    rule = Message.objects.get(actor=marco, conversation__title="#general", body__contains="canary stage")
    body = _reply(canary).body
    assert f"\u201c{rule.body}\u201d" in body
    assert rule.pk in canary.evidence_message_ids and rule.pk in _reply(canary).history_message_ids
    assert "45 minutes" not in body and "nothing" not in body


def test_sams_friday_turn_writes_a_memory_about_sam_from_his_message_and_cites_it() -> None:
    """The memory worth correcting: inferred, about Sam (Lindqvist), resting on his message, cited by
    the id the remember call returned."""
    call_command("load_demo", stdout=StringIO())
    friday = _turns()[4]
    sam = friday.inbound_message.actor
    assert sam is not None and sam.external_id == "U03SAMLI"
    inferred = MemoryRevision.objects.get(body="Does not work on Fridays.")
    assert (inferred.authority, inferred.turn_id, inferred.subject_id) == ("inferred", friday.pk, sam.pk)
    assert inferred.source_actor_ids == [sam.pk]
    sources = MemoryEvidence.objects.filter(revision=inferred, kind=EvidenceKind.SOURCE_MESSAGE)
    assert list(sources.values_list("message_id", flat=True)) == [friday.inbound_message_id]
    assert _reply(friday).cited_revision_ids == [inferred.pk]
    assert f"[{inferred.short_id}]" in _reply(friday).body


def test_the_demo_api_key_is_the_same_on_every_restart_until_rotated(data_folder: Path) -> None:
    """``scripts/run`` asks for the key on every start: it gets the same one, which keeps working,
    kept in the data folder readable by its owner only; ``--rotate`` issues a new one and the old one
    answers 401."""
    assert _key() == ""  # no demo workspace, no key
    assert not key_path().exists()
    call_command("load_demo", stdout=StringIO())
    first, second = _key(), _key()
    assert first and first == second
    assert _status(second) == 200
    assert key_path() == data_folder / "demo-api-key"
    assert key_path().read_text().strip() == first
    assert stat.S_IMODE(key_path().stat().st_mode) == 0o600

    rotated = _key("--rotate")
    assert rotated != first
    assert _status(rotated) == 200
    assert _status(first) == 401
    assert _key() == rotated
    assert stat.S_IMODE(key_path().stat().st_mode) == 0o600
    assert ApiKey.objects.filter(label="demo (run banner)", revoked_at__isnull=True).count() == 1


def test_a_kept_key_that_no_longer_authenticates_is_replaced() -> None:
    """A missing file, a revoked key or a secret this database never issued (a rebuilt database):
    a new key is issued and kept, and it works."""
    call_command("load_demo", stdout=StringIO())
    first = _key()
    ApiKey.objects.filter(label="demo (run banner)").update(revoked_at="2026-01-01T00:00:00Z")
    after_revoke = _key()
    assert after_revoke != first and _status(after_revoke) == 200
    key_path().write_text("engram_00000000_not-a-key-this-database-issued\n")
    unknown = _key()
    assert unknown not in (after_revoke, "engram_00000000_not-a-key-this-database-issued")
    assert _status(unknown) == 200 and _status(after_revoke) == 401
    key_path().unlink()
    missing = _key()
    assert missing != unknown and _status(missing) == 200 and _status(unknown) == 401


def test_the_demo_key_is_a_runtime_key_unless_manage_is_asked_for() -> None:
    """The banner's key may not read the memory list; ``--manage`` prints a key that may, kept in its
    own file, and leaves the banner's key valid."""
    call_command("load_demo", stdout=StringIO())
    banner, manage = _key(), _key("--manage")
    assert _key("--manage") == manage and _key() == banner
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {banner}")
    refused = client.get("/api/v1/memories")
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"
    assert client.get("/api/v1/tools").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {manage}")
    assert client.get("/api/v1/memories").status_code == 200
    assert client.get("/api/v1/tools").status_code == 200
    assert key_path(manage=True).read_text().strip() == manage


@pytest.mark.browser
def test_priya_sees_the_demo_turns_in_chromium(page: Any, live_server: Any) -> None:
    call_command("load_demo", stdout=StringIO())
    base = live_server.url
    page.goto(f"{base}/turns/")
    page.fill("#id_username", "priya")
    page.fill("#id_password", DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/turns/")
    said = page.locator(".turn-said").all_inner_texts()
    assert len(said) == 2 and all(text.startswith("Priya Raman:") for text in said)
    assert any("time zone" in text for text in said) and not any("palette" in text for text in said)
    page.locator(".turn-link").first.click()
    assert page.locator("h1").inner_text() == "What did the agent know?"
    screenshot(page, "demo-turn")
