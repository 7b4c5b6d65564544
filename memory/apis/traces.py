"""A recall trace, read back by the agent that recalled it (another agent's answers 404)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import request_agent
from config.errors import NotFound
from memory.apis.errors import ERRORS
from memory.models import RecallTrace


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
