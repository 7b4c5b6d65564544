"""The agent runtime API: sessions, turns, rounds of memory verbs, the committed ledger, the reply;
and the end user's own sharing decisions. Views are thin: validate, call a service, serialize.

Every object is fetched inside the caller's perspective; another agent's or tenant's object answers
404 exactly like a missing one.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.utils import OpenApiExample, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import request_agent
from config.api import ErrorSerializer, StrictSerializer
from config.errors import NotFound
from history.models import Session, SessionKind, Turn
from memory.claims import ledger_instruction
from memory.models import Authority, BeliefType, Portability, RecallTrace
from memory.retrieval.render import MAX_ALLOWANCE, MIN_ALLOWANCE
from memory.sharing import grant_revoke, requests_for_user, sharing_request_decide_as_source
from memory.turns import (
    MAX_CALLS_PER_ROUND,
    MAX_ROUNDS,
    VerbCall,
    recall_payload,
    reply_submit,
    round_run,
    session_of_agent,
    session_open,
    tools_offered,
    turn_ledger,
    turn_of_agent,
    turn_start,
)


def _memory_id() -> serializers.RegexField:
    return serializers.RegexField(r"^\[?m:[0-9a-f]{8,16}\]?$", help_text="A memory id as rendered, e.g. m:0000002a.")


# --------------------------------------------------------------------------------------------------
# verb schemas: one per verb, strict; remember has no entry id, revision or supersede flag
# --------------------------------------------------------------------------------------------------


def verb_field(name: str) -> serializers.ChoiceField:
    """Each verb's schema admits exactly its own name, so the documented oneOf is unambiguous."""
    return serializers.ChoiceField(choices=[name])


#: The largest id a verb may name (PostgreSQL bigint): a larger one is a 400, not a failed query.
MAX_ID = 2**63 - 1

#: The JSON type each kind of field takes. A verb's arguments come from a model following the tool
#: definitions (memory/tools.py), so the API takes exactly what those schemas admit: no coercion of
#: "5" to 5, 1 to True or 5 to "5", which DRF's fields would otherwise do.
_JSON_TYPES: list[tuple[type[serializers.Field[Any, Any, Any, Any]], tuple[type, ...], str]] = [
    (serializers.BooleanField, (bool,), "a boolean"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
    (serializers.CharField, (str,), "a string"),
    (serializers.ChoiceField, (str,), "a string"),
    (serializers.DateTimeField, (str,), "a string"),
]


def json_type_errors(fields: dict[str, Any], data: dict[str, Any]) -> dict[str, list[str]]:
    """The fields of ``data`` whose JSON type is not their field's (``null`` only where allowed)."""
    errors = {}
    for name, value in data.items():
        field = fields.get(name)
        if field is None or (value is None and field.allow_null):
            continue
        for kind, types, label in _JSON_TYPES:
            if isinstance(field, kind):
                integral = kind is serializers.IntegerField and isinstance(value, float) and value.is_integer()
                if (isinstance(value, bool) and bool not in types) or not (isinstance(value, types) or integral):
                    errors[name] = [f"must be {label}"]
                break
    return errors


class VerbIn(StrictSerializer):
    """One memory verb call; each verb's ``verb`` field selects its schema."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            errors = json_type_errors(dict(self.fields), data)
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class RememberIn(VerbIn):
    verb = verb_field("remember")
    body = serializers.CharField(max_length=2_000, help_text="Natural prose; names belong in subject, not here.")
    belief_type = serializers.ChoiceField(choices=BeliefType.choices, default=BeliefType.PROJECT_FACT)
    subject_actor_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_ID)
    portability = serializers.ChoiceField(choices=Portability.choices, default=Portability.PORTABLE)
    authority = serializers.ChoiceField(
        choices=[Authority.USER_STATED, Authority.INFERRED], default=Authority.USER_STATED
    )
    confidence = serializers.FloatField(min_value=0, max_value=1, default=0.8)
    salience = serializers.FloatField(min_value=0, max_value=1, default=0.5)
    always_on = serializers.BooleanField(default=False)
    valid_from = serializers.DateTimeField(required=False)
    valid_to = serializers.DateTimeField(required=False)


class RecallIn(VerbIn):
    verb = verb_field("recall")
    query = serializers.CharField(max_length=2_000, allow_blank=True)
    as_of = serializers.DateTimeField(required=False)
    known_at = serializers.DateTimeField(required=False)
    max_tokens = serializers.IntegerField(min_value=MIN_ALLOWANCE, max_value=MAX_ALLOWANCE, required=False)
    max_items = serializers.IntegerField(min_value=1, max_value=40, default=12)


class AmendIn(VerbIn):
    verb = verb_field("amend")
    id = _memory_id()
    body = serializers.CharField(max_length=2_000, required=False)
    subject_actor_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_ID)
    belief_type = serializers.ChoiceField(choices=BeliefType.choices, required=False)
    portability = serializers.ChoiceField(choices=Portability.choices, required=False)
    confidence = serializers.FloatField(min_value=0, max_value=1, required=False)
    salience = serializers.FloatField(min_value=0, max_value=1, required=False)
    always_on = serializers.BooleanField(required=False)
    valid_from = serializers.DateTimeField(required=False)
    valid_to = serializers.DateTimeField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if set(attrs) <= {"verb", "id"}:
            raise serializers.ValidationError("an amend changes at least one field")
        return attrs


class ForgetIn(VerbIn):
    verb = verb_field("forget")
    id = _memory_id()


class RequestSharingIn(VerbIn):
    verb = verb_field("request_memory_sharing")
    id = _memory_id()
    conversation_id = serializers.IntegerField(
        min_value=1, max_value=MAX_ID, help_text="The conversation to share it into."
    )


class SearchHistoryIn(VerbIn):
    verb = verb_field("search_history")
    query = serializers.CharField(max_length=2_000)
    actor = serializers.CharField(max_length=200, required=False, help_text='An actor id, name, or "requester".')
    conversation_id = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    connector = serializers.RegexField(r"^[a-z0-9_-]{1,50}:[A-Za-z0-9_.@-]{1,200}$", required=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    limit = serializers.IntegerField(min_value=1, max_value=20, default=8)


VERBS: dict[str, type[VerbIn]] = {
    "remember": RememberIn,
    "recall": RecallIn,
    "amend": AmendIn,
    "forget": ForgetIn,
    "request_memory_sharing": RequestSharingIn,
    "search_history": SearchHistoryIn,
}


class RoundIn(serializers.Serializer[Any]):
    calls = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=MAX_CALLS_PER_ROUND)


class RoundDoc(serializers.Serializer[Any]):
    """The documented shape of a round: each call is one verb's strict schema, chosen by ``verb``."""

    calls = serializers.ListField(
        child=PolymorphicProxySerializer(
            component_name="VerbCall",
            serializers={name: serializer for name, serializer in VERBS.items()},
            resource_type_field_name="verb",
        ),
        min_length=1,
        max_length=MAX_CALLS_PER_ROUND,
    )


def validate_round(data: Any) -> list[VerbCall]:
    """Validate every call before any executes; report each bad call by its position."""
    envelope = RoundIn(data=data)
    envelope.is_valid(raise_exception=True)
    calls, errors = [], {}
    for index, raw in enumerate(envelope.validated_data["calls"]):
        serializer_class = VERBS.get(str(raw.get("verb")))
        if serializer_class is None:
            errors[str(index)] = {"verb": [f"one of {sorted(VERBS)}"]}
            continue
        call = serializer_class(data=raw)
        if not call.is_valid():
            errors[str(index)] = call.errors
            continue
        args = dict(call.validated_data)
        calls.append(VerbCall(verb=args.pop("verb"), args=args))
    if errors:
        raise serializers.ValidationError({"calls": errors})
    return calls


# --------------------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------------------


class RecallOut(serializers.Serializer[Any]):
    trace_id = serializers.IntegerField()
    block = serializers.CharField(help_text="The trust-labelled memory block, byte-stable for one belief set.")
    rendered_sha256 = serializers.CharField()
    tokens = serializers.IntegerField()
    degradation = serializers.CharField(allow_blank=True)
    items = serializers.ListField(child=serializers.DictField())
    corrections = serializers.ListField(child=serializers.CharField())


class SessionIn(StrictSerializer):
    conversation_id = serializers.IntegerField(min_value=1)
    kind = serializers.ChoiceField(choices=SessionKind.choices, default=SessionKind.INTERACTIVE)
    requester_actor_id = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    goal = serializers.CharField(max_length=2_000, required=False, default="", allow_blank=True)
    parent_session_id = serializers.IntegerField(min_value=1, required=False, allow_null=True)


class SessionOut(serializers.Serializer[Any]):
    session_id = serializers.IntegerField()
    conversation_id = serializers.IntegerField()
    kind = serializers.CharField()
    snapshot_sha256 = serializers.CharField()
    snapshot = RecallOut(allow_null=True, help_text="Present when the session was just opened.")
    snapshot_block = serializers.CharField()


class TurnIn(StrictSerializer):
    inbound_message_id = serializers.IntegerField(min_value=1)
    loaded_message_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
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
    cited_ids = serializers.ListField(child=_memory_id(), required=False, default=list, max_length=100)


class ReplyOut(serializers.Serializer[Any]):
    message_id = serializers.IntegerField()
    state = serializers.CharField()
    cited = serializers.ListField(child=serializers.CharField())
    ignored_citations = serializers.ListField(child=serializers.CharField())
    history_message_ids = serializers.ListField(child=serializers.IntegerField())
    memory_revision_ids = serializers.ListField(child=serializers.IntegerField())


ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer, 422: ErrorSerializer}
#: The end user's endpoints use Django's session login: without one (or without its CSRF token) they
#: answer 403, as Django's session authentication does.
USER_ERRORS = {**ERRORS, 403: ErrorSerializer}


# --------------------------------------------------------------------------------------------------
# views
# --------------------------------------------------------------------------------------------------


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
        return Response(SessionOut(_session_body(session, snapshot)).data, status=status.HTTP_201_CREATED)


def _session_body(session: Session, snapshot: Any = None) -> dict[str, Any]:
    return {
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


class TraceOut(serializers.Serializer[Any]):
    trace_id = serializers.IntegerField()
    moment = serializers.CharField()
    policy_version = serializers.CharField()
    rendered_sha256 = serializers.CharField()
    block = serializers.CharField()
    items = serializers.ListField(child=serializers.DictField())


class TraceDetailApi(APIView):
    @extend_schema(operation_id="traces_retrieve", summary="Read a recall trace", responses={200: TraceOut, **ERRORS})
    def get(self, request: Request, trace_id: int) -> Response:
        trace = RecallTrace.objects.filter(pk=trace_id, agent=request_agent(request)).first()
        if trace is None:
            raise NotFound("trace not found", code="not_found")
        items = [
            {
                "id": f"m:{i.revision_id:08x}",
                "entry_id": i.entry_id,
                "band": i.band,
                "score": i.score,
                "reason": i.reason,
                "carried": i.carried,
                "blocked": i.blocked_reason or None,
            }
            for i in trace.items.order_by("position")
        ]
        body = {
            "trace_id": trace.pk,
            "moment": trace.moment,
            "policy_version": trace.policy_version,
            "rendered_sha256": trace.rendered_sha256,
            "block": trace.rendered_text,
            "items": items,
        }
        return Response(TraceOut(body).data)


# --------------------------------------------------------------------------------------------------
# the end user's own decisions (Django session login; no agent key can reach these)
# --------------------------------------------------------------------------------------------------


class UserApi(APIView):
    authentication_classes = [SessionAuthentication]
    permission_classes = [IsAuthenticated]

    def user(self, request: Request) -> AbstractBaseUser:
        user = request.user
        assert isinstance(user, AbstractBaseUser)
        return user


class SharingRequestOut(serializers.Serializer[Any]):
    request_id = serializers.IntegerField()
    id = serializers.CharField()
    statement = serializers.CharField()
    conversation = serializers.CharField()
    state = serializers.CharField()


class DecisionIn(StrictSerializer):
    approve = serializers.BooleanField()


class DecisionOut(serializers.Serializer[Any]):
    request_id = serializers.IntegerField()
    state = serializers.CharField()
    grant_id = serializers.IntegerField(allow_null=True)


class MySharingRequestsApi(UserApi):
    @extend_schema(
        operation_id="me_sharing_requests_list",
        summary="Sharing requests awaiting my answer",
        responses={200: SharingRequestOut(many=True), **USER_ERRORS},
    )
    def get(self, request: Request) -> Response:
        rows = [
            {
                "request_id": r.pk,
                "id": r.revision.short_id,
                "statement": r.revision.body,
                "conversation": str(r.conversation),
                "state": r.state,
            }
            for r in requests_for_user(self.user(request))
        ]
        return Response(SharingRequestOut(rows, many=True).data)


class MySharingDecisionApi(UserApi):
    @extend_schema(
        operation_id="me_sharing_requests_decide",
        summary="Answer a sharing request about something I said",
        description="Only the person whose statement it is (logged in as that actor) can approve; approval "
        "creates a revocable grant. Agents cannot call this endpoint.",
        request=DecisionIn,
        responses={200: DecisionOut, **USER_ERRORS},
    )
    def post(self, request: Request, request_id: int) -> Response:
        payload = DecisionIn(data=request.data)
        payload.is_valid(raise_exception=True)
        approve = payload.validated_data["approve"]
        grant = sharing_request_decide_as_source(request_id=request_id, user=self.user(request), approve=approve)
        body = {
            "request_id": request_id,
            "state": "approved" if approve else "denied",
            "grant_id": grant.pk if grant else None,
        }
        return Response(DecisionOut(body).data)


class GrantOut(serializers.Serializer[Any]):
    grant_id = serializers.IntegerField()
    revoked = serializers.BooleanField()


class MyGrantRevokeApi(UserApi):
    @extend_schema(
        operation_id="me_grants_revoke",
        summary="Revoke a grant I gave",
        request=None,
        responses={200: GrantOut, **USER_ERRORS},
    )
    def post(self, request: Request, grant_id: int) -> Response:
        grant = grant_revoke(grant_id=grant_id, user=self.user(request))
        return Response(GrantOut({"grant_id": grant.pk, "revoked": grant.revoked_at is not None}).data)
