"""The sync and async clients against a live server: typed results, the turn protocol kept by the
helper, and each failure kind raised as its own exception carrying the API's code, message and detail."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from engram_client import (
    AsyncEngram,
    AuthenticationError,
    ClaimGuardFailed,
    Engram,
    NotFoundError,
    Participant,
    ProtocolError,
    RecallCall,
    RecallItem,
    Remember,
    ReplyWithheld,
    RoundLimitReached,
    SharingRequest,
    TurnClosed,
    ValidationError,
)
from engram_client.types import Audience
from rest_framework.test import APIClient

from accounts.models import UserActor
from history.models import Message, Turn
from memory.models import MemoryEntry
from tests.clients.conftest import Workspace, run_async


def _dm_turn_start(workspace: Workspace, engram: Engram, text: str) -> tuple[int, int]:
    inbound = engram.ingest([workspace.message("D-ALICE", "U2", text)])[0]
    session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
    return session.session_id, inbound.message_id


def test_a_whole_turn_through_the_helper_remembers_cites_and_delivers(workspace: Workspace, engram: Engram) -> None:
    """ingest → session → turn → rounds → ledger → reply, all typed; the reply's provenance is stored.
    The session and the turn name Alice as the one speaking; a memory about her names her as its
    subject ("speaker"), and recall gives her as its source."""
    inbound = engram.ingest([workspace.message("D-ALICE", "U2", "I moved to Lisbon last month.")])[0]
    session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
    alice = Participant(inbound.actor_id, "U2", "Alice", "slack:acme", True)
    assert session.participants == [alice] and session.requester == alice
    with engram.turn(session, inbound.message_id) as turn:
        assert turn.rounds_left == 3 and turn.recall is not None
        assert turn.participants == [alice] and turn.speaker == alice
        assert engram.get_turn(turn.turn_id).participants == [alice]
        lisbon: Remember = {"verb": "remember", "body": "Lives in Lisbon.", "belief_type": "user_model_attr"}
        first = turn.round([{**lisbon, "subject": "speaker"}])
        assert first.results[0].ok and first.round == 1
        memory_id = first.results[0].result["id"]
        recalled = turn.round([{"verb": "recall", "query": "Lisbon"}])
        (item,) = [RecallItem.from_json(i) for i in recalled.results[0].result["items"] if i["id"] == memory_id]
        assert item.subject is not None and item.subject.actor_id == inbound.actor_id
        assert [s.actor_id for s in item.sources] == [inbound.actor_id] and item.source == item.sources[0]
        ledger = turn.ledger()
        assert [op.operation for op in ledger.operations] == ["remember"] and ledger.role == "developer"
        assert memory_id in ledger.instruction
        reply = turn.reply(f"Noted, you live in Lisbon [{memory_id}].")
    assert reply.state == "delivered" and reply.cited == [memory_id]
    assert Message.objects.get(pk=reply.message_id).body.startswith("Noted")
    assert Turn.objects.get(pk=turn.turn_id).state == "delivered"


def test_recall_passes_subjects_and_type_hints_through(workspace: Workspace, engram: Engram) -> None:
    """A typed recall call with subjects (a reference and an actor id) and type hints: only the hinted
    type comes back, ranked as about the subject asked for; a stranger is refused with the API's code."""
    session_id, inbound = _dm_turn_start(workspace, engram, "I live in Porto; the Porto office opens at eight.")
    with engram.turn(session_id, inbound) as turn:
        alice = turn.speaker
        assert alice is not None
        wrote = turn.round(
            [
                {"verb": "remember", "body": "Lives in Porto.", "belief_type": "user_model_attr", "subject": "speaker"},
                {"verb": "remember", "body": "The Porto office opens at eight.", "belief_type": "project_fact"},
            ]
        )
        porto = wrote.results[0].result["id"]
        call: RecallCall = {
            "verb": "recall",
            "query": "Porto",
            "subjects": ["speaker", alice.actor_id],
            "type_hints": ["user_model_attr"],
        }
        items = turn.round([{**call}]).results[0].result["items"]
        assert porto in [i["id"] for i in items] and {i["belief_type"] for i in items} == {"user_model_attr"}
        assert next(i for i in items if i["id"] == porto)["components"]["asked_subject"] == 1.0
        refused = turn.round([{"verb": "recall", "query": "Porto", "subjects": ["U999"]}]).results[0]
        assert (refused.status, refused.code) == ("error", "subject_not_participant")
        turn.ledger()
        turn.reply("Noted.")


def test_the_helper_refuses_a_reply_before_the_ledger_is_read(workspace: Workspace, engram: Engram) -> None:
    """After a round, reply() raises ProtocolError and sends nothing until ledger() was read."""
    session_id, inbound = _dm_turn_start(workspace, engram, "Remember I like tea.")
    with engram.turn(session_id, inbound) as turn:
        turn.round([{"verb": "remember", "body": "Likes tea.", "belief_type": "preference", "subject": "speaker"}])
        with pytest.raises(ProtocolError) as refused:
            turn.reply("Done.")
        assert refused.value.code == "ledger_not_read"
        assert Turn.objects.get(pk=turn.turn_id).state == "open"
        turn.ledger()
        turn.reply("I will remember that you like tea.")


def test_the_helper_bounds_the_rounds_and_offers_no_tools_after_the_last(workspace: Workspace, engram: Engram) -> None:
    """Three rounds, then RoundLimitReached without a request, and an empty tool list."""
    session_id, inbound = _dm_turn_start(workspace, engram, "What do you know?")
    with engram.turn(session_id, inbound) as turn:
        assert len(turn.tools("openai")) == 6
        for _ in range(3):
            turn.round([{"verb": "recall", "query": ""}])
        assert turn.rounds_left == 0 and turn.rounds[-1].final
        assert turn.tools("openai") == [] and turn.tools("anthropic") == []
        with pytest.raises(RoundLimitReached):
            turn.round([{"verb": "recall", "query": ""}])
        assert Turn.objects.get(pk=turn.turn_id).rounds_used == 3
        turn.ledger()
        turn.reply("Nothing yet.")


def test_leaving_a_turn_without_a_reply_is_an_error(workspace: Workspace, engram: Engram) -> None:
    session_id, inbound = _dm_turn_start(workspace, engram, "Hello?")
    with pytest.raises(ProtocolError) as refused, engram.turn(session_id, inbound):
        pass
    assert refused.value.code == "no_reply"


def test_a_claim_of_an_uncommitted_change_raises_claim_guard_failed(workspace: Workspace, engram: Engram) -> None:
    """The claim guard's 422 becomes ClaimGuardFailed with the API's code and detail; the turn is closed."""
    session_id, inbound = _dm_turn_start(workspace, engram, "Forget my address.")
    with engram.turn(session_id, inbound) as turn:
        with pytest.raises(ClaimGuardFailed) as failed:
            turn.reply("I forgot your address.")
        assert failed.value.status == 422 and failed.value.code == "claim_guard_failed"
        assert failed.value.detail["claims"] and "ledger" in failed.value.detail
        with pytest.raises(TurnClosed):
            turn.reply("Sorry.")
    assert Turn.objects.get(pk=turn.turn_id).state == "failed"


def test_a_withheld_reply_raises_reply_withheld(workspace: Workspace, engram: Engram) -> None:
    """The pre-delivery recheck withholds a reply when the audience widened after recall: ReplyWithheld
    (409 reply_withheld, not retried), nothing delivered."""
    inbound = engram.ingest([workspace.message("D-ALICE", "U2", "My salary is 90k.")])[0]
    session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
    with engram.turn(session, inbound.message_id) as turn:
        salary = {"body": "Earns 90k a year.", "belief_type": "user_model_attr", "subject": "speaker"}
        turn.round([{"verb": "remember", **salary}])
        turn.ledger()
        # The connector reports the thread has become public: the memory may no longer be disclosed there.
        engram.ingest([workspace.message("D-ALICE", "U2", "Adding everyone here.", audience={"kind": "public"})])
        with pytest.raises(ReplyWithheld) as withheld:
            turn.reply("Noted your salary.")
        assert withheld.value.code == "reply_withheld" and withheld.value.detail["reason"]
    assert Turn.objects.get(pk=turn.turn_id).state == "withheld"
    assert not Message.objects.filter(conversation_id=inbound.conversation_id, direction="outbound").exists()


def test_failures_raise_one_class_each_with_the_apis_code(workspace: Workspace, engram: Engram) -> None:
    with pytest.raises(AuthenticationError) as unauthenticated, Engram(workspace.base_url, "nope") as stranger:
        stranger.get_turn(1)
    assert unauthenticated.value.status == 401 and unauthenticated.value.code == "unauthenticated"
    with pytest.raises(NotFoundError) as missing:
        engram.get_turn(999_999)
    assert missing.value.code == "not_found"
    with pytest.raises(ValidationError) as invalid:
        engram.open_session(0)
    assert invalid.value.status == 400 and "conversation_id" in invalid.value.detail
    session_id, inbound = _dm_turn_start(workspace, engram, "hi")
    turn = engram.start_turn(session_id, inbound)
    before = MemoryEntry.objects.count()
    with pytest.raises(ValidationError) as bad_round:
        engram.run_round(turn.turn_id, [{"verb": "remember", "body": "x"}, {"verb": "remember", "entry_id": 1}])
    assert bad_round.value.code == "invalid_request" and "1" in bad_round.value.detail["calls"]
    with pytest.raises(ValidationError) as unattributed:
        engram.run_round(turn.turn_id, [{"verb": "remember", "body": "Likes tea.", "belief_type": "preference"}])
    assert unattributed.value.status == 400 and unattributed.value.code == "subject_required"
    assert "U2" in str(unattributed.value.detail)  # the refusal names whom the memory may be about
    both = {"subject": "speaker", "subject_actor_id": Message.objects.get(pk=inbound).actor_id}
    with pytest.raises(ValidationError) as twice:
        engram.run_round(
            turn.turn_id, [{"verb": "remember", "body": "Likes tea.", "belief_type": "preference", **both}]
        )
    assert twice.value.status == 400
    assert MemoryEntry.objects.count() == before and engram.get_turn(turn.turn_id).rounds_used == 0


def test_ingest_batches_large_inputs(workspace: Workspace, engram: Engram) -> None:
    """Ingest splits into requests of ``batch_size`` and returns every message's result in order."""
    messages = [workspace.message("general", "U1", f"note {i}") for i in range(7)]
    results = engram.ingest(messages, batch_size=3)
    assert [r.external_id for r in results] == [m["external_id"] for m in messages]
    assert all(r.created for r in results)
    again = engram.ingest(messages[:2])
    assert [r.created for r in again] == [False, False]


def test_the_async_client_runs_the_same_turn(workspace: Workspace) -> None:
    async def scenario() -> str:
        async with AsyncEngram(workspace.base_url, workspace.key) as engram:
            inbound = (await engram.ingest([workspace.message("D-ALICE", "U2", "I drink green tea.")]))[0]
            session = await engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
            async with engram.turn(session, inbound.message_id) as turn:
                assert turn.speaker is not None and turn.speaker.external_id == "U2"
                tea = {"body": "Drinks green tea.", "belief_type": "preference", "subject": turn.speaker.external_id}
                done = await turn.round([{"verb": "remember", **tea}])
                with pytest.raises(ProtocolError):
                    await turn.reply("ok")
                await turn.ledger()
                reply = await turn.reply(f"Noted [{done.results[0].result['id']}].")
            with pytest.raises(NotFoundError):
                await engram.get_turn(999_999)
            return reply.state

    assert run_async(scenario()) == "delivered"


def test_a_memory_about_someone_else_asks_both_for_consent_to_share(workspace: Workspace, engram: Engram) -> None:
    """In a private channel of Victor and Alice, Victor says something about Alice: remembered with
    Alice's external id as its subject and Victor as its source. Asked to share it into #general, the
    request (read by Alice at /api/v1/me/sharing-requests, typed as SharingRequest) waits for both:
    Victor as its source, Alice as its subject."""
    private: Audience = {"kind": "members", "readers": ["U1", "U2"]}
    (general,) = engram.ingest([workspace.message("general", "U2", "Morning all.")])
    (inbound,) = engram.ingest([workspace.message("G-PAIR", "U1", "Alice prefers async reviews.", private)])
    session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
    with engram.turn(session, inbound.message_id) as turn:
        alice = next(p for p in turn.participants if p.external_id == "U2")
        assert turn.speaker is not None and turn.speaker.actor_id == inbound.actor_id and not alice.speaking
        fact = {"body": "Prefers async reviews.", "belief_type": "preference", "subject": alice.external_id}
        memory_id = turn.round([{"verb": "remember", **fact}]).results[0].result["id"]
        share = {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": general.conversation_id}
        assert turn.round([share]).results[0].ok
        turn.ledger()
        turn.reply("I have asked before sharing it.")

    user = User.objects.create_user(username="alice", password="pw")
    UserActor.objects.create(user=user, actor_id=alice.actor_id)
    browser = APIClient()
    browser.force_login(user)
    (request,) = [SharingRequest.from_json(r) for r in browser.get("/api/v1/me/sharing-requests").json()]
    assert request.id == memory_id and request.state == "pending"
    roles = {(c.role, c.actor_id, c.state) for c in request.consents}
    assert roles == {("source", inbound.actor_id, "pending"), ("subject", alice.actor_id, "pending")}
    assert len(request.pending) == 2
