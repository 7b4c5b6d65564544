"""The agent runtime's endpoints: sessions, turns, rounds of memory verbs, the committed ledger and the
reply. Every object is fetched for the credential's agent; another agent's answers 404 like a missing
one.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import request_agent
from config.api import MAX_ID, StrictSerializer
from config.errors import NotFound
from history.models import Session, SessionKind, Turn
from memory.apis.errors import ERRORS
from memory.apis.verbs import RoundDoc, memory_id_field, validate_round
from memory.claims import ledger_instruction
from memory.turns import (
    MAX_CALLS_PER_ROUND,
    MAX_ROUNDS,
    conversation_participants,
    recall_payload,
    reply_submit,
    round_run,
    session_of_agent,
    session_open,
    tools_offered,
    turn_ledger,
    turn_of_agent,
    turn_participants,
    turn_start,
)


class RecallOut(serializers.Serializer[Any]):
    trace_id = serializers.IntegerField()
    block = serializers.CharField(help_text="The trust-labelled memory block, byte-stable for one belief set.")
    rendered_sha256 = serializers.CharField()
    tokens = serializers.IntegerField()
    degradation = serializers.CharField(allow_blank=True)
    items = serializers.ListField(child=serializers.DictField())
    corrections = serializers.ListField(child=serializers.CharField())


class ParticipantOut(serializers.Serializer[Any]):
    actor_id = serializers.IntegerField()
    external_id = serializers.CharField()
    display_name = serializers.CharField(help_text="Screened like any outside text; the external id if it failed.")
    connector = serializers.CharField(help_text="The connector's namespace, e.g. slack:acme.")
    speaking = serializers.BooleanField(help_text="True for the author of the message being answered.")


def participants_field() -> ParticipantOut:
    return ParticipantOut(
        many=True,
        help_text="The conversation's people a memory may be about: name one as a remember or amend call's "
        'subject ("speaker" or their external_id) or subject_actor_id.',
    )


class SessionIn(StrictSerializer):
    conversation_id = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    kind = serializers.ChoiceField(choices=SessionKind.choices, default=SessionKind.INTERACTIVE)
    requester_actor_id = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False, allow_null=True)
    goal = serializers.CharField(max_length=2_000, required=False, default="", allow_blank=True)
    parent_session_id = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False, allow_null=True)


class SessionOut(serializers.Serializer[Any]):
    session_id = serializers.IntegerField()
    conversation_id = serializers.IntegerField()
    kind = serializers.CharField()
    snapshot_sha256 = serializers.CharField()
    snapshot = RecallOut(allow_null=True, help_text="Present when the session was just opened.")
    snapshot_block = serializers.CharField()
    participants = participants_field()


class TurnIn(StrictSerializer):
    inbound_message_id = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    loaded_message_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID),
        required=False,
        default=list,
        max_length=100,
        help_text="The history window the runtime already put in the prompt.",
    )


class TurnOut(serializers.Serializer[Any]):
    turn_id = serializers.IntegerField()
    session_id = serializers.IntegerField()
    state = serializers.CharField()
    rounds_used = serializers.IntegerField()
    rounds_left = serializers.IntegerField()
    tools = serializers.ListField(child=serializers.CharField(), help_text="Empty once no round is left.")
    participants = participants_field()
    recall = RecallOut(required=False)


class CallOut(serializers.Serializer[Any]):
    verb = serializers.CharField()
    status = serializers.ChoiceField(choices=["ok", "unchanged", "error"])
    code = serializers.CharField(allow_blank=True)
    message = serializers.CharField(allow_blank=True)
    result = serializers.DictField()


class RoundOut(serializers.Serializer[Any]):
    round = serializers.IntegerField()
    results = CallOut(many=True)
    tools = serializers.ListField(child=serializers.CharField())
    final = serializers.BooleanField(help_text="True when no further round is offered.")


class OperationOut(serializers.Serializer[Any]):
    operation = serializers.CharField()
    entry_id = serializers.IntegerField()
    id = serializers.CharField(allow_null=True)
    revision = serializers.IntegerField(allow_null=True)
    previous_id = serializers.CharField(allow_null=True)
    subject_changed = serializers.BooleanField()
    round = serializers.IntegerField(allow_null=True)


class LedgerOut(serializers.Serializer[Any]):
    operations = OperationOut(many=True)
    instruction = serializers.CharField(help_text="Hand this to the model as a developer-role message.")
    role = serializers.CharField()


class ReplyIn(StrictSerializer):
    body = serializers.CharField(max_length=20_000)
    cited_ids = serializers.ListField(child=memory_id_field(), required=False, default=list, max_length=100)


class ReplyOut(serializers.Serializer[Any]):
    message_id = serializers.IntegerField()
    state = serializers.CharField()
    cited = serializers.ListField(child=serializers.CharField())
    ignored_citations = serializers.ListField(child=serializers.CharField())
    history_message_ids = serializers.ListField(child=serializers.IntegerField())
    memory_revision_ids = serializers.ListField(child=serializers.IntegerField())


def _session(request: Request, session_id: int) -> Session:
    session = session_of_agent(request_agent(request), session_id)
    if session is None:
        raise NotFound("session not found", code="not_found")
    return session


def _turn(request: Request, turn_id: int) -> Turn:
    turn = turn_of_agent(request_agent(request), turn_id)
    if turn is None:
        raise NotFound("turn not found", code="not_found")
    return turn


def _turn_body(turn: Turn, recall: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "turn_id": turn.pk,
        "session_id": turn.session_id,
        "state": turn.state,
        "rounds_used": turn.rounds_used,
        "rounds_left": MAX_ROUNDS - turn.rounds_used,
        "tools": tools_offered(turn),
        "participants": [p.as_dict() for p in turn_participants(turn)],
    }
    if recall is not None:
        body["recall"] = recall_payload(recall)
    return body


class SessionCreateApi(APIView):
    @extend_schema(
        operation_id="sessions_create",
        summary="Open a session",
        description="Opens a session in a conversation and takes its frozen memory snapshot (byte-stable for "
        "the session's life; put it in the cacheable prompt prefix).",
        request=SessionIn,
        responses={201: SessionOut, **ERRORS},
        examples=[
            OpenApiExample("Interactive", request_only=True, value={"conversation_id": 12, "requester_actor_id": 7})
        ],
    )
    def post(self, request: Request) -> Response:
        payload = SessionIn(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        session, snapshot = session_open(
            agent=request_agent(request),
            conversation_id=data["conversation_id"],
            kind=data["kind"],
            requester_id=data.get("requester_actor_id"),
            goal=data["goal"],
            parent_session_id=data.get("parent_session_id"),
        )
        body = _session_body(session, snapshot, requester_id=data.get("requester_actor_id"))
        return Response(SessionOut(body).data, status=status.HTTP_201_CREATED)


def _session_body(session: Session, snapshot: Any = None, *, requester_id: int | None = None) -> dict[str, Any]:
    participants = conversation_participants(session.conversation, speaker_id=requester_id)
    return {
        "participants": [p.as_dict() for p in participants],
        "session_id": session.pk,
        "conversation_id": session.conversation_id,
        "kind": session.kind,
        "snapshot_sha256": session.snapshot_sha256,
        "snapshot_block": session.snapshot_text,
        "snapshot": recall_payload(snapshot) if snapshot is not None else None,
    }


class SessionDetailApi(APIView):
    @extend_schema(operation_id="sessions_retrieve", summary="Read a session", responses={200: SessionOut, **ERRORS})
    def get(self, request: Request, session_id: int) -> Response:
        return Response(SessionOut(_session_body(_session(request, session_id))).data)


class TurnCreateApi(APIView):
    @extend_schema(
        operation_id="turns_create",
        summary="Start a turn",
        description="Starts a turn for an inbound message of the session's conversation. Returns the in-turn "
        "recall (put it in the user turn, not the prefix), with the delta since the snapshot and correction "
        "lines for snapshot items that changed, and the tools still offered.",
        request=TurnIn,
        responses={201: TurnOut, **ERRORS},
        examples=[
            OpenApiExample(
                "Turn", request_only=True, value={"inbound_message_id": 345, "loaded_message_ids": [330, 331, 344]}
            )
        ],
    )
    def post(self, request: Request, session_id: int) -> Response:
        payload = TurnIn(data=request.data)
        payload.is_valid(raise_exception=True)
        turn, result = turn_start(
            session=_session(request, session_id),
            inbound_message_id=payload.validated_data["inbound_message_id"],
            loaded_message_ids=payload.validated_data["loaded_message_ids"],
        )
        return Response(TurnOut(_turn_body(turn, result)).data, status=status.HTTP_201_CREATED)


class TurnDetailApi(APIView):
    @extend_schema(operation_id="turns_retrieve", summary="Read a turn", responses={200: TurnOut, **ERRORS})
    def get(self, request: Request, turn_id: int) -> Response:
        return Response(TurnOut(_turn_body(_turn(request, turn_id))).data)


class RoundCreateApi(APIView):
    @extend_schema(
        operation_id="turns_rounds_create",
        summary="Run a round of memory verbs",
        description=f"At most {MAX_ROUNDS} rounds per turn and {MAX_CALLS_PER_ROUND} calls per round. Every "
        "call is validated before any executes: one malformed call rejects the round and nothing is "
        "written. A call that changed nothing (unknown or already-forgotten id) says so with status "
        "'unchanged' and adds nothing to the ledger. After the last round no tools are offered.",
        request=RoundDoc,
        responses={200: RoundOut, **ERRORS},
        examples=[
            OpenApiExample(
                "Recall, then search history",
                request_only=True,
                value={
                    "calls": [
                        {"verb": "recall", "query": "deploy schedule"},
                        {"verb": "search_history", "query": "deploy freeze", "limit": 5},
                    ]
                },
            ),
            OpenApiExample(
                "Correct a memory",
                request_only=True,
                value={"calls": [{"verb": "amend", "id": "m:0000002a", "body": "Prefers spaces over tabs."}]},
            ),
        ],
    )
    def post(self, request: Request, turn_id: int) -> Response:
        turn = _turn(request, turn_id)
        calls = validate_round(request.data)
        outcome = round_run(turn=turn, calls=calls)
        body = {
            "round": outcome.round,
            "results": [
                {"verb": r.verb, "status": r.status, "code": r.code, "message": r.message, "result": r.result}
                for r in outcome.results
            ],
            "tools": outcome.tools,
            "final": outcome.final,
        }
        return Response(RoundOut(body).data)


class LedgerApi(APIView):
    @extend_schema(
        operation_id="turns_ledger_retrieve",
        summary="The committed ledger",
        description="Every durable memory operation the turn committed, built from the store's return "
        "values, and the developer-role instruction to give the model before it writes its reply.",
        responses={200: LedgerOut, **ERRORS},
    )
    def get(self, request: Request, turn_id: int) -> Response:
        ledger = turn_ledger(_turn(request, turn_id))
        operations = [
            {
                "operation": op.kind,
                "entry_id": op.entry_id,
                "id": f"m:{op.revision_id:08x}" if op.revision_id else None,
                "revision": op.revision_number,
                "previous_id": f"m:{op.previous_revision_id:08x}" if op.previous_revision_id else None,
                "subject_changed": op.subject_changed,
                "round": op.round,
            }
            for op in ledger
        ]
        body = {"operations": operations, "instruction": ledger_instruction(ledger), "role": "developer"}
        return Response(LedgerOut(body).data)


class ReplyCreateApi(APIView):
    @extend_schema(
        operation_id="turns_reply_create",
        summary="Submit the final reply",
        description="The claim guard fails a reply asserting (first person, past tense) a memory change that did "
        "not commit (422 claim_guard_failed). The pre-delivery recheck withholds the reply if the destination "
        "audience or anything it was built from changed (409 reply_withheld). A delivered reply stores its "
        "provenance; the [m:…] ids it cites mark those memories used.",
        request=ReplyIn,
        responses={201: ReplyOut, **ERRORS},
        examples=[
            OpenApiExample("Reply", request_only=True, value={"body": "Noted: you prefer spaces now [m:0000002b]."})
        ],
    )
    def post(self, request: Request, turn_id: int) -> Response:
        payload = ReplyIn(data=request.data)
        payload.is_valid(raise_exception=True)
        delivered = reply_submit(
            agent=request_agent(request),
            turn_id=turn_id,
            body=payload.validated_data["body"],
            cited_ids=payload.validated_data["cited_ids"],
        )
        reply = delivered.reply
        body = {
            "message_id": reply.pk,
            "state": "delivered",
            "cited": delivered.cited,
            "ignored_citations": delivered.ignored_citations,
            "history_message_ids": reply.history_message_ids,
            "memory_revision_ids": reply.memory_revision_ids,
        }
        return Response(ReplyOut(body).data, status=status.HTTP_201_CREATED)
