"""Tool definitions for models over HTTP: the memory verbs and ``search_history`` in the OpenAI or
Anthropic function-calling format, unbound (to register them) or bound to a turn (to offer them)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import ErrorSerializer, StrictQuerySerializer
from memory.apis.turns import _turn
from memory.tools import FORMATS, INSTRUCTIONS, definitions, definitions_for_turn
from memory.turns import MAX_ROUNDS


class ToolsQuery(StrictQuerySerializer):
    # Not ``format``: DRF reads ``?format=`` as a renderer override.
    provider = serializers.ChoiceField(choices=list(FORMATS), default="openai")


class ToolsOut(serializers.Serializer[Any]):
    format = serializers.CharField()
    rounds_left = serializers.IntegerField(allow_null=True, help_text="Rounds the turn has left; null when unbound.")
    instructions = serializers.CharField(help_text="About ids and rounds; for the system or developer prompt.")
    tools = serializers.ListField(
        child=serializers.DictField(),
        help_text="OpenAI: {type: function, function: {name, description, parameters}}; Anthropic: {name, "
        "description, input_schema}. Empty once the turn has no round left.",
    )


FORMAT = OpenApiParameter(
    "provider", str, enum=list(FORMATS), default="openai", description="Whose function-calling format."
)
ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 404: ErrorSerializer}


def _format(request: Request) -> Any:
    query = ToolsQuery(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    return query.validated_data["provider"]


class ToolsApi(APIView):
    @extend_schema(
        operation_id="tools_list",
        summary="Tool definitions for models",
        description="The memory verbs (remember, recall, amend, forget, request_memory_sharing) and "
        "search_history as function-calling tool definitions, generated from the schemas the rounds endpoint "
        "validates with. None takes an agent, audience or perspective: those are bound from the API key and "
        "the turn. To offer them to a model during a turn, use the turn's tools instead.",
        parameters=[FORMAT],
        responses={200: ToolsOut, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        format = _format(request)
        body = {"format": format, "rounds_left": None, "instructions": INSTRUCTIONS, "tools": definitions(format)}
        return Response(ToolsOut(body).data)


class TurnToolsApi(APIView):
    @extend_schema(
        operation_id="turns_tools_retrieve",
        summary="Tool definitions to offer in this turn",
        description=f"The tools still offered in the turn, as function-calling definitions. A turn has at most "
        f"{MAX_ROUNDS} rounds; once it has used them (or is closed) the list is empty: the model's next "
        "request carries no tools, so it answers instead of calling one.",
        parameters=[FORMAT],
        responses={200: ToolsOut, **ERRORS},
    )
    def get(self, request: Request, turn_id: int) -> Response:
        format = _format(request)
        turn = _turn(request, turn_id)
        body = {
            "format": format,
            "rounds_left": MAX_ROUNDS - turn.rounds_used,
            "instructions": INSTRUCTIONS,
            "tools": definitions_for_turn(turn, format),
        }
        return Response(ToolsOut(body).data)
