"""The rejection flow: four kinds, each a different committed write; durable events; and replay, so
that a belief rejected as untrue never comes back, through any write path or a reindex."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from accounts.models import OperatorScope, UserActor
from config.errors import NotFound, Unprocessable
from history.models import Message
from memory.embeddings.index import vectors_stored
from memory.fingerprint import belief_fingerprint
from memory.models import (
    EntryStatus,
    MemoryEntry,
    MemoryRevision,
    Portability,
    RecallTraceItem,
    Rejection,
    RejectionKind,
    RevisionEmbedding,
    RevisionOrigin,
)
from memory.rejections import rejection_record
from memory.services import Belief, Provenance, memory_remember, revision_amend
from tests.ui.conftest import LAUNCH, LISBON, MANAGER, QUESTION, TEA, World

pytestmark = pytest.mark.django_db


def item(world: World, key: str, *, turn_id: int | None = None) -> RecallTraceItem:
    """The traced item of memory ``key`` on a turn's page (the in-turn recall's, if it has one)."""
    items = RecallTraceItem.objects.filter(
        trace__turn_id=turn_id or world.turn.pk, revision=world.revisions[key]
    ).order_by("trace__moment")
    found = items.first()
    assert found is not None, key
    return found


def reject(world: World, key: str, kind: str, correction: str = "", *, user: User | None = None, **where: int) -> str:
    """POST the item's form as Alice (or ``user``), follow the redirect, return the page."""
    client = world.client(user or world.alice)
    turn_id = where.get("turn_id", world.turn.pk)
    target = item(world, key, turn_id=turn_id)
    response = client.post(
        f"/turns/{turn_id}/items/{target.pk}/reject/", {"kind": kind, "correction": correction}, follow=True
    )
    assert response.status_code == 200
    return str(response.content.decode())


def test_not_true_retires_the_belief_and_records_a_durable_event(world: World) -> None:
    html = reject(world, "lisbon", RejectionKind.NOT_TRUE)
    lisbon = world.revisions["lisbon"]
    assert MemoryEntry.objects.get(pk=lisbon.entry_id).status == EntryStatus.FORGOTTEN
    rejection = Rejection.objects.get()
    assert (rejection.user, rejection.revision, rejection.kind) == (world.alice, lisbon, RejectionKind.NOT_TRUE)
    assert rejection.trace_item == item(world, "lisbon")
    assert rejection.fingerprint == belief_fingerprint(LISBON, world.runtime.actor("U200").pk)
    assert rejection.resulting_revision is None
    assert f"Retired [{lisbon.short_id}]" in html and "since retired" in html
    assert lisbon.id not in world.recall_ids("dm-alice", "U200", QUESTION)


def test_has_changed_supersedes_with_the_users_correction_valid_from_now(world: World) -> None:
    before = timezone.now()
    html = reject(world, "tea", RejectionKind.CHANGED, "Drinks black coffee now.")
    old = world.revisions["tea"]
    entry = MemoryEntry.objects.get(pk=old.entry_id)
    new = entry.current_revision
    assert new is not None
    assert (new.body, new.supersedes_id, new.number) == ("Drinks black coffee now.", old.pk, 2)
    assert new.created_by == RevisionOrigin.USER_CORRECTION and new.authority == "user_stated"
    assert new.valid_from >= before and new.subject_id == old.subject_id
    assert new.audience == old.audience  # disclosed exactly where the belief it replaces was
    assert Rejection.objects.get().resulting_revision == new
    assert f"Corrected [{old.short_id}]: superseded by [{new.short_id}]" in html
    recalled = world.recall_ids("dm-alice", "U200", "What do I drink, green tea or black coffee?")
    assert new.pk in recalled and old.pk not in recalled


def test_has_changed_needs_the_correction(world: World) -> None:
    html = reject(world, "tea", RejectionKind.CHANGED, "   ")
    assert "Nothing was changed" in html
    assert not Rejection.objects.exists()
    assert MemoryEntry.objects.get(pk=world.revisions["tea"].entry_id).current_revision_id == world.revisions["tea"].pk


def test_true_elsewhere_not_here_makes_a_carried_belief_local_to_its_project(world: World) -> None:
    """Applied by Alice as an operator of the workspace: the launch date is Victor's statement."""
    launch = world.revisions["launch"]
    assert item(world, "launch").carried
    world.alice.is_staff = True
    world.alice.save(update_fields=["is_staff"])
    OperatorScope.objects.create(user=world.alice, tenant=world.runtime.agent.tenant)
    html = reject(world, "launch", RejectionKind.NOT_HERE)
    new = MemoryRevision.objects.get(supersedes=launch)
    assert (new.portability, new.body, new.origin_scope) == (Portability.LOCAL, LAUNCH, "atlas")
    assert MemoryEntry.objects.get(pk=launch.entry_id).status == EntryStatus.LIVE  # not a retirement
    assert Rejection.objects.get().origin_scope == "atlas"
    assert "local to atlas" in html
    assert new.pk not in world.recall_ids("dm-alice", "U200", "When is the atlas launch?")
    assert new.pk in world.recall_ids("general", "U100", "When is the atlas launch?")


def test_true_elsewhere_not_here_restricts_an_uncarried_belief_to_where_it_was_learned(world: World) -> None:
    """In another thread of the same project nothing is carried: the belief is restricted to the
    conversation it was learned in, where it stays true."""
    dev = {"kind": "workspace"}
    asked = world.turn_in("atlas-dev", "U200", "When is the atlas launch?", audience=dev, project="atlas")
    assert not item(world, "launch", turn_id=asked).carried
    victor = User.objects.create_user(username="victor")  # who said it, so his correction applies
    UserActor.objects.create(user=victor, actor=world.runtime.actor("U100"))
    html = reject(world, "launch", RejectionKind.NOT_HERE, user=victor, turn_id=asked)
    new = MemoryRevision.objects.get(supersedes=world.revisions["launch"])
    general = world.runtime.conversation("general")
    assert new.restricted_to_conversation_id == general.pk and new.portability == Portability.PORTABLE
    assert "kept only in the conversation where it was learned" in html
    assert new.pk not in world.recall_ids("atlas-dev", "U200", "When is the atlas launch?")
    assert new.pk in world.recall_ids("general", "U100", "When is the atlas launch?")


def test_true_elsewhere_not_here_is_refused_for_a_belief_learned_right_here(world: World) -> None:
    html = reject(world, "lisbon", RejectionKind.NOT_HERE)
    assert "Nothing was changed" in html and "no elsewhere" in html
    assert not Rejection.objects.exists() and not MemoryRevision.objects.filter(supersedes__isnull=False).exists()


def test_something_is_wrong_flags_and_down_weights_but_retires_nothing(world: World) -> None:
    manager = world.revisions["manager"]
    utility = MemoryEntry.objects.get(pk=manager.entry_id).utility
    html = reject(world, "manager", RejectionKind.WRONG)
    entry = MemoryEntry.objects.get(pk=manager.entry_id)
    assert entry.flagged_for_review and entry.utility == utility - 1.0
    assert entry.status == EntryStatus.LIVE and entry.current_revision_id == manager.pk
    assert "Flagged" in html and "Nothing was retired" in html
    assert manager.pk in world.recall_ids("dm-alice", "U200", "Who is my manager, is it Victor?")


def test_a_rejection_applies_to_the_belief_as_it_stands(world: World) -> None:
    """Once corrected, the old item can no longer be rejected: the page says it changed instead."""
    reject(world, "tea", RejectionKind.CHANGED, "Drinks black coffee now.")
    html = reject(world, "tea", RejectionKind.NOT_TRUE)
    assert "Nothing was changed" in html and "has changed since this turn" in html
    assert Rejection.objects.count() == 1
    assert MemoryEntry.objects.get(pk=world.revisions["tea"].entry_id).status == EntryStatus.LIVE


def test_the_service_refuses_items_the_user_cannot_see(world: World) -> None:
    target = item(world, "lisbon")
    for outsider in (world.bob, world.mallory):
        with pytest.raises(NotFound):
            rejection_record(user=outsider, trace_item_id=target.pk, kind=RejectionKind.NOT_TRUE)
    with pytest.raises(NotFound):
        rejection_record(user=world.alice, trace_item_id=10**9, kind=RejectionKind.NOT_TRUE)
    with pytest.raises(Unprocessable):
        rejection_record(user=world.alice, trace_item_id=target.pk, kind="nonsense")
    assert not Rejection.objects.exists()


# --- replay ---------------------------------------------------------------------------------------


def alice_remembers(world: World, body: str, subject: str = "U200") -> dict[str, object]:
    about = world.runtime.actor(subject).display_name
    turn = world.runtime.turn("dm-alice", "U200", f"Please remember this about {about}.")
    response = world.runtime.round(
        turn["turn_id"], {"verb": "remember", "body": body, "subject_actor_id": world.runtime.actor(subject).pk}
    )
    return dict(response.json()["results"][0])


def test_a_belief_rejected_as_untrue_is_never_stored_again(world: World) -> None:
    reject(world, "lisbon", RejectionKind.NOT_TRUE)
    reject(world, "tea", RejectionKind.CHANGED, "Drinks black coffee now.")

    for body in (LISBON, "  lives in LISBON ", TEA):
        result = alice_remembers(world, body)
        assert (result["status"], result["code"]) == ("error", "rejected_belief"), body

    message = Message.objects.filter(conversation__external_thread_id="dm-alice", direction="inbound").last()
    assert message is not None
    with pytest.raises(Unprocessable) as refused:
        memory_remember(
            agent=world.runtime.agent,
            belief=Belief(body=LISBON, subject_id=world.runtime.actor("U200").pk),
            provenance=Provenance(source_message_id=message.pk),
        )
    assert refused.value.code == "rejected_belief"
    manager = world.revisions["manager"]
    with pytest.raises(Unprocessable) as restored:
        revision_amend(
            agent=world.runtime.agent,
            entry_id=manager.entry_id,
            expected_revision_id=manager.pk,
            provenance=Provenance(),
            body=LISBON,
        )
    assert restored.value.code == "rejected_belief"

    assert alice_remembers(world, LISBON, subject="U300")["status"] == "ok"  # the same words about Bob
    assert alice_remembers(world, "Drinks black coffee now.")["status"] == "ok"


def test_scope_and_review_rejections_do_not_block_the_statement(world: World) -> None:
    reject(world, "manager", RejectionKind.WRONG)
    assert alice_remembers(world, MANAGER)["status"] == "ok"


def test_a_reindex_does_not_revive_a_rejected_belief(world: World) -> None:
    reject(world, "lisbon", RejectionKind.NOT_TRUE)
    reject(world, "tea", RejectionKind.CHANGED, "Drinks black coffee now.")
    if vectors_stored():  # a lexical-only server has no vector index to rebuild
        call_command("embeddings", "rebuild")
        # The rebuilt index holds vectors for the rejected revisions too; only canonical rows decide.
        assert RevisionEmbedding.objects.filter(revision=world.revisions["lisbon"]).exists()
    recalled = world.recall_ids("dm-alice", "U200", "Where do I live? Do I drink green tea?")
    assert world.revisions["lisbon"].pk not in recalled and world.revisions["tea"].pk not in recalled
    assert MemoryEntry.objects.get(pk=world.revisions["lisbon"].entry_id).status == EntryStatus.FORGOTTEN
