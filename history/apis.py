"""Connector ingest for agent runtimes: batches of authenticated messages, idempotent per message."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import request_agent
from config.api import ErrorSerializer, StrictSerializer
from history.audience import DESTINATION_KINDS
from history.models import EvidenceMethod
from history.services import IngestItem, messages_ingest_batch

MAX_BATCH = 500
#: Methods a connector can attest. Agent replies and operator imports are recorded by Engram itself.
CONNECTOR_METHODS = [EvidenceMethod.CONNECTOR_SIGNED, EvidenceMethod.CONNECTOR_API]
NAME = r"^[A-Za-z0-9_.@-]{1,200}$"


class ConnectorRef(StrictSerializer):
    type = serializers.RegexField(r"^[a-z0-9_-]{1,50}$", help_text="e.g. slack, email")
    name = serializers.RegexField(NAME, help_text="e.g. the workspace or domain")


class AudienceIn(StrictSerializer):
    kind = serializers.ChoiceField(choices=[str(k) for k in DESTINATION_KINDS])
    readers = serializers.ListField(
        child=serializers.RegexField(NAME),
        required=False,
        default=list,
        max_length=1000,
        help_text="External ids of the people who can read the thread (members and external audiences).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        needs_readers = attrs["kind"] in ("members", "external")
        if needs_readers != bool(attrs["readers"]):
            raise serializers.ValidationError(
                {"readers": ["required for members and external audiences" if needs_readers else "not allowed"]}
            )
        return attrs


class ThreadIn(StrictSerializer):
    external_id = serializers.CharField(max_length=200)
    title = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    project = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    audience = AudienceIn()


class ActorIn(StrictSerializer):
    external_id = serializers.RegexField(NAME)
    display_name = serializers.CharField(max_length=200)


class EvidenceIn(StrictSerializer):
    method = serializers.ChoiceField(choices=[str(m) for m in CONNECTOR_METHODS])
    detail = serializers.DictField(required=False, default=dict)


class MessageIn(StrictSerializer):
    connector = ConnectorRef()
    thread = ThreadIn()
    actor = ActorIn()
    external_id = serializers.CharField(max_length=200, required=False, allow_null=True, default=None)
    body = serializers.CharField(max_length=20_000, trim_whitespace=False)
    created_at = serializers.DateTimeField()
    evidence = EvidenceIn()

    def validate_body(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("must not be blank")
        if "\x00" in value:
            raise serializers.ValidationError("must not contain NUL characters")
        return value


class IngestIn(StrictSerializer):
    messages = serializers.ListField(child=MessageIn(), min_length=1, max_length=MAX_BATCH)


class IngestedOut(serializers.Serializer[Any]):
    external_id = serializers.CharField(allow_null=True)
    message_id = serializers.IntegerField()
    conversation_id = serializers.IntegerField()
    actor_id = serializers.IntegerField()
    created = serializers.BooleanField(help_text="False when this external id was already ingested.")


class IngestOut(serializers.Serializer[Any]):
    messages = IngestedOut(many=True)


class MessageIngestApi(APIView):
    @extend_schema(
        operation_id="messages_ingest",
        summary="Ingest connector messages",
        description="A batch of up to 500 messages as a connector saw them, with the connector's "
        "authentication as source evidence. The whole batch is validated before anything is written; a "
        "repeated external message id creates nothing new.",
        request=IngestIn,
        responses={201: IngestOut, 400: ErrorSerializer, 401: ErrorSerializer, 422: ErrorSerializer},
        examples=[
            OpenApiExample(
                "A DM message",
                request_only=True,
                value={
                    "messages": [
                        {
                            "connector": {"type": "slack", "name": "acme"},
                            "thread": {
                                "external_id": "D024BE91L",
                                "audience": {"kind": "members", "readers": ["U123"]},
                            },
                            "actor": {"external_id": "U123", "display_name": "Victor"},
                            "external_id": "1700000000.000100",
                            "body": "I prefer tabs over spaces.",
                            "created_at": "2026-11-30T09:00:00Z",
                            "evidence": {"method": "connector_signed", "detail": {"signature": "v0=..."}},
                        }
                    ]
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        payload = IngestIn(data=request.data)
        payload.is_valid(raise_exception=True)
        items = [
            IngestItem(
                connector_type=m["connector"]["type"],
                connector_name=m["connector"]["name"],
                thread_id=m["thread"]["external_id"],
                audience_kind=m["thread"]["audience"]["kind"],
                reader_external_ids=tuple(m["thread"]["audience"]["readers"]),
                actor_external_id=m["actor"]["external_id"],
                actor_display_name=m["actor"]["display_name"],
                body=m["body"],
                created_at=m["created_at"],
                evidence_method=m["evidence"]["method"],
                evidence_detail=m["evidence"]["detail"],
                external_id=m["external_id"],
                thread_title=m["thread"]["title"],
                project=m["thread"]["project"],
            )
            for m in payload.validated_data["messages"]
        ]
        results = messages_ingest_batch(agent=request_agent(request), items=items)
        body = {
            "messages": [
                {
                    "external_id": r.message.external_id,
                    "message_id": r.message.pk,
                    "conversation_id": r.message.conversation_id,
                    "actor_id": r.message.actor_id,
                    "created": r.created,
                }
                for r in results
            ]
        }
        return Response(IngestOut(body).data, status=status.HTTP_201_CREATED)
