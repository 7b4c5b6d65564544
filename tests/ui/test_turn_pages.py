"""The end user's pages over HTTP: who may open what, what a turn page shows (faithfully, within the
stricter of the two ceilings, counting instead of showing), and that every page is valid HTML."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.test import Client
from django.utils import timezone

from memory.models import RecallMoment, RecallTrace, RecallTraceItem, Rejection, short_id
from memory.selectors import items_within_ceilings
from pages.views import TURNS_PER_PAGE
from tests.ui.conftest import MANAGER, PASSWORD, POISON, SALARY, World, assert_valid_html, shown_ids

pytestmark = pytest.mark.django_db

MOMENT = re.compile(r'<li class="aggregate" id="trace-(\d+)" data-moment="(\w+)">(.*?)</li>', re.S)
CARD = re.compile(r'<li class="item" id="[\w-]+" data-memory-id="m:[0-9a-f]+" data-moments="([\w ]*)">.*?</li>', re.S)


def sections(html: str) -> dict[int, str]:
    """Per recall trace: the cards marked with its moment, in page order, then the moment's counts."""
    cards = [(match.group(1).split(), match.group(0)) for match in CARD.finditer(html)]
    return {
        int(trace_id): "".join(card for moments, card in cards if moment in moments) + counts
        for trace_id, moment, counts in MOMENT.findall(html)
    }


def page(world: World, user: object, path: str) -> str:
    response = world.client(user).get(path)  # type: ignore[arg-type]
    assert response.status_code == 200, response.status_code
    html = response.content.decode()
    assert_valid_html(html)
    return html


# --- who may open what ----------------------------------------------------------------------------


def test_the_turn_list_holds_the_turns_of_conversations_the_user_could_read_newest_first(world: World) -> None:
    """Alice sees #general (a workspace she is on) and her DM, never Bob's DM; Mallory sees nothing."""
    html = page(world, world.alice, "/turns/")
    linked = [int(t) for t in re.findall(r'href="/turns/(\d+)/"', html)]
    conversations = {t.pk: t.session.conversation.external_thread_id for t in world.turn.__class__.objects.all()}
    assert {conversations[t] for t in linked} == {"general", "dm-alice"}
    assert linked == sorted(linked, reverse=True)
    assert linked[0] == world.turn.pk

    bobs = [int(t) for t in re.findall(r'href="/turns/(\d+)/"', page(world, world.bob, "/turns/"))]
    assert {conversations[t] for t in bobs} == {"general", "dm-bob"}
    assert not re.findall(r'href="/turns/(\d+)/"', page(world, world.mallory, "/turns/"))


def test_the_turn_list_is_paginated(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pages.views.TURNS_PER_PAGE", 2)
    first = page(world, world.alice, "/turns/")
    second = page(world, world.alice, "/turns/?page=2")
    assert 'href="?page=2"' in first and "Page 1 of 2" in first
    assert set(re.findall(r'href="/turns/(\d+)/"', first)).isdisjoint(re.findall(r'href="/turns/(\d+)/"', second))
    assert TURNS_PER_PAGE == 20


def test_anyone_who_could_not_read_the_conversation_gets_404_like_a_missing_turn(world: World) -> None:
    item = RecallTraceItem.objects.filter(trace__turn=world.turn).first()
    assert item is not None
    source = world.revisions["lisbon"].evidence.get(kind="source_message").message_id
    for outsider in (world.bob, world.mallory):
        client = world.client(outsider)
        assert client.get(f"/turns/{world.turn.pk}/").status_code == 404
        assert client.get("/turns/999999/").status_code == 404
        assert client.get(f"/messages/{source}/").status_code == 404
        response = client.post(f"/turns/{world.turn.pk}/items/{item.pk}/reject/", {"kind": "not_true"})
        assert response.status_code == 404
    assert not Rejection.objects.exists()
    assert world.client(world.alice).get(f"/messages/{source}/").status_code == 200


def test_anonymous_visitors_are_sent_to_log_in(world: World) -> None:
    response = Client().get(f"/turns/{world.turn.pk}/")
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


# --- what the page says ---------------------------------------------------------------------------


def test_the_page_shows_each_traced_item_with_its_moment_and_used_or_available(world: World) -> None:
    html = page(world, world.alice, f"/turns/{world.turn.pk}/")
    by_trace = sections(html)
    moments = {t.pk: t.moment for t in world.traces()}
    assert sorted(moments[t] for t in by_trace) == [RecallMoment.IN_TURN, RecallMoment.SNAPSHOT]
    assert html.index("Session snapshot") < html.index("In-turn recall")
    for trace_id, body in by_trace.items():
        for match in re.finditer(r'data-memory-id="(m:[0-9a-f]+)".*?<span class="badge (\w+)">', body, re.S):
            expected = "used" if match.group(1) in (world.short("lisbon"), world.short("launch")) else "available"
            assert match.group(2) == expected, (trace_id, match.group(1))
    launch = re.search(rf'data-memory-id="{world.short("launch")}".*?</li>', html, re.S)
    assert launch is not None
    assert "<strong>carried</strong>" in launch.group(0) and "in <bdi>atlas</bdi>" in launch.group(0)
    assert "user-stated" in html and 'href="/messages/' in html


def test_the_ids_shown_are_exactly_the_traced_ones_within_the_ceiling(world: World) -> None:
    """Trace faithfulness: per moment, the page lists the trace's own items, in their order, minus
    only those withheld by the safety scan or above the viewer's ceiling."""
    html = page(world, world.alice, f"/turns/{world.turn.pk}/")
    for trace_id, body in sections(html).items():
        trace = RecallTrace.objects.get(pk=trace_id)
        within = items_within_ceilings(world.alice, trace)
        expected = [i.revision_id for i in trace.items.order_by("position") if i.pk in within]
        traced = [i.revision_id for i in trace.items.order_by("position") if not i.blocked_reason]
        # One card per memory, in the order first shown: a later moment's own order is not the page's.
        assert sorted(shown_ids(body)) == sorted(expected) == sorted(traced)  # nothing is above Alice's ceiling
    assert len(shown_ids(html)) == len(set(shown_ids(html))), "each memory has one card"


def test_blocked_and_unshown_items_are_counted_never_described(world: World) -> None:
    html = page(world, world.alice, f"/turns/{world.turn.pk}/")
    snapshot = next(t for t in world.traces() if t.moment == RecallMoment.SNAPSHOT)
    assert snapshot.blocked_count == 1
    body = sections(html)[snapshot.pk]
    shown = len(shown_ids(body))
    assert f"{snapshot.considered_count - shown} further memories were considered and not shown" in body
    assert "1 of these was withheld by the safety scan" in body
    assert POISON not in html and world.short("poison") not in html and "BLOCKED" not in html
    assert SALARY not in html and world.short("salary") not in html
    displayed = set(shown_ids(html))
    for trace in world.traces():
        for candidate in trace.candidate_ids or []:
            if candidate not in displayed:
                assert short_id(candidate) not in html
    for internal in ("score", "policy", "rrf", "latency", "candidate", trace.policy_version):
        assert internal not in html.lower()


def test_subjects_are_rendered_from_current_actor_records(world: World) -> None:
    renamed = world.runtime.post(
        "/api/v1/messages",
        {
            "messages": [
                {
                    "connector": {"type": "slack", "name": "acme"},
                    "thread": {"external_id": "general", "audience": {"kind": "workspace"}},
                    "actor": {"external_id": "U200", "display_name": "Alicia"},
                    "body": "hello",
                    "created_at": "2026-11-30T10:00:00Z",
                    "evidence": {"method": "connector_signed"},
                }
            ]
        },
    )
    assert renamed.status_code == 201  # the connector now reports her new display name
    html = page(world, world.alice, f"/turns/{world.turn.pk}/")
    assert "<dd><bdi>Alicia (id U200)</bdi></dd>" in html
    assert RecallTraceItem.objects.filter(subject_label="Alice (id U200)").exists()  # the trace itself is unchanged


# --- the stricter of two ceilings -----------------------------------------------------------------


def test_an_item_above_the_viewers_ceiling_never_appears_and_is_counted(world: World) -> None:
    """A thread shared with an outside organisation: its memories may be recalled there, but they
    cannot be disclosed to a direct conversation with Alice, so her view of that turn omits them."""
    shared = {"kind": "external", "readers": ["U200", "U300"]}
    told = world.turn_in("partner", "U200", "The partner contract renews in June.", audience=shared)
    world.runtime.round(told, {"verb": "remember", "body": "The partner contract renews in June."})
    asked = world.turn_in("partner", "U200", "When does the partner contract renew?", audience=shared)
    trace = RecallTrace.objects.get(turn_id=asked, moment=RecallMoment.IN_TURN)
    traced = [i.revision_id for i in trace.items.all()]
    assert len(traced) == 1

    html = page(world, world.alice, f"/turns/{asked}/")
    assert short_id(traced[0]) not in html and "renews in June" not in html
    assert f"{trace.considered_count} further memor" in sections(html)[trace.pk]
    assert items_within_ceilings(world.alice, trace) == set()


def test_an_item_above_the_recalls_ceiling_never_appears_even_where_the_viewer_could_see_it(world: World) -> None:
    """The launch date (workspace origin) is visible to Alice in her DM, but a trace recorded for a
    public thread must never show it: the view takes the minimum of both ceilings."""
    public_turn = world.turn_in("town-hall", "U200", "hello everyone", audience={"kind": "public"})
    launch = world.revisions["launch"]
    trace = RecallTrace.objects.create(
        agent=world.runtime.agent,
        session_id=RecallTrace.objects.filter(turn_id=public_turn).values_list("session_id", flat=True)[0],
        turn_id=public_turn,
        moment=RecallMoment.TOOL,
        profile="task",
        policy_version="test",
        as_of=timezone.now(),
        rendered_text="x",
        rendered_sha256=hashlib.sha256(b"x").hexdigest(),
        considered_count=1,
        returned_count=1,
        audience_kind="public",
    )
    RecallTraceItem.objects.create(
        trace=trace, position=0, entry_id=launch.entry_id, revision=launch, band="high", score=1.0, reason=""
    )
    assert world.short("launch") in page(world, world.alice, f"/turns/{world.turn.pk}/")

    html = page(world, world.alice, f"/turns/{public_turn}/")
    assert world.short("launch") not in html
    assert "1 further memory was considered and not shown" in sections(html)[trace.pk]


def test_every_page_is_valid_html(world: World) -> None:
    anonymous = Client()
    for path in ("/login/", "/login/?next=/turns/"):
        response = anonymous.get(path)
        assert response.status_code == 200
        assert_valid_html(response.content.decode())
    failed = anonymous.post("/login/", {"username": "alice", "password": "wrong"})
    assert failed.status_code == 200 and "Please enter a correct username" in failed.content.decode()
    assert_valid_html(failed.content.decode())
    logged_in = anonymous.post("/login/", {"username": "alice", "password": PASSWORD})
    assert logged_in.status_code == 302 and logged_in["Location"] == "/turns/"

    page(world, world.alice, "/turns/")
    page(world, world.mallory, "/turns/")
    page(world, world.alice, f"/turns/{world.turn.pk}/")
    source = world.revisions["lisbon"].evidence.get(kind="source_message").message_id
    assert "I live in Lisbon" in page(world, world.alice, f"/messages/{source}/")

    client = world.client(world.alice)
    manager = RecallTraceItem.objects.filter(trace__turn=world.turn, revision=world.revisions["manager"]).get()
    lisbon = RecallTraceItem.objects.filter(trace__turn=world.turn, revision=world.revisions["lisbon"]).get()
    client.post(
        f"/turns/{world.turn.pk}/items/{manager.pk}/reject/", {"kind": "changed", "correction": "Reports to Bob."}
    )
    client.post(f"/turns/{world.turn.pk}/items/{lisbon.pk}/reject/", {"kind": "not_here"})  # refused: learned here
    after = client.get(f"/turns/{world.turn.pk}/")
    html = after.content.decode()
    assert_valid_html(html)
    assert "Corrected" in html and "Nothing was changed" in html and "since changed" in html
    assert MANAGER in html  # what the agent knew then is still what the page says it knew
