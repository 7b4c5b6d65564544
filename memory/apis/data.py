"""The management API: an agent's own memories, read outside any turn.

Read-only, bound to the agent of the API key (the same perspective rule as every other endpoint: an
entry of another agent or tenant answers 404 exactly like a missing one), and only for a key with the
``manage`` scope (``ManageScope``: a runtime key answers ``403 insufficient_scope`` before anything is
read). What it returns is what an operator of the tenant already sees in the admin inspector: the
entries, their revision history with evidence (ids, never message text), grants and rejections (kinds,
never correction text). These reads are not recalls: they write no trace, retrieval event or ledger
entry, change no usage statistics, and no turn's provenance can include them. Each one that answers
200 writes a ``ManagementReadEvent`` before responding (the key, the endpoint, the entry ids shown and
the list's filters); a 404 read nothing and records nothing. Views are thin: validate the filters, call
a selector, record the read, serialize.

One memory is named in its path as people name it: ``m:0000002b``, the short id of any of its revisions
(the current one or an older one a citation still shows), or its entry id as a decimal number
(``parse_memory_name``; ``MemoryIdConverter``).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import IsAgent, ManageScope, request_agent, request_principal
from accounts.models import Actor
from config.api import MAX_ID, ErrorSerializer, StrictCursorPagination, StrictQuerySerializer
from memory.management_reads import management_read_record
from memory.models import (
    EntryStatus,
    ManagementEndpoint,
    MemoryEntry,
    MemoryName,
    MemoryRevision,
    Portability,
    parse_memory_name,
    short_id,
)
from memory.selectors import MemoryFilters, RevisionHistory, memories_of_agent, memory_history

#: 403 (``insufficient_scope``) is documented by accounts.authentication.document_scopes.
ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 404: ErrorSerializer}
#: The management reads need a key with the manage scope (a runtime key is refused).
MANAGE = [IsAgent, ManageScope]


#: A memory in a path: a revision's short id (``m:`` and up to 16 hex digits) or a decimal entry id.
MEMORY_ID_PATTERN = "m:[0-9a-fA-F]{1,16}|[0-9]{1,19}"


class MemoryIdConverter:
    """``<memory:name>`` in a route: ``m:`` and up to 16 hex digits (a revision's short id) or a decimal
    entry id, as a :class:`MemoryName`. A plain number is always the entry id here, whatever its width: a
    revision is named with its ``m:``. An id past bigint (or 0) matches no route and answers 404 like a
    missing memory (``PATH_CONVERTER_OVERRIDES`` in the settings publishes the pattern)."""

    regex = MEMORY_ID_PATTERN

    def to_python(self, value: str) -> MemoryName:
        name = parse_memory_name(value, bare_short_id=False)
        if name is None:
            raise ValueError(f"not a memory id: {value}")
        return name

    def to_url(self, value: MemoryName | int | str) -> str:
        if isinstance(value, MemoryName):
            return short_id(value.id) if value.is_revision else str(value.id)
        return str(value)


MEMORY_ID = OpenApiParameter(
    "memory_id",
    str,
    OpenApiParameter.PATH,
    pattern=f"^({MEMORY_ID_PATTERN})$",
    description="The memory as people and models name it: `m:0000002b`, the short id of any of its revisions "
    "(the current one or an older one a citation shows), or its entry id (`42`). A plain number is the entry "
    "id; a revision id always carries its `m:`.",
)


def _entry_id_of(agent_id: int, name: MemoryName) -> int:
    """The agent's entry a path names. A revision id resolves to its entry only among the agent's own
    revisions: another agent's id answers 404 exactly like one that does not exist."""
    if not name.is_revision:
        return name.id
    entry_id = MemoryRevision.objects.filter(pk=name.id, agent_id=agent_id).values_list("entry_id", flat=True).first()
    if entry_id is None:
        raise NotFound("memory not found", code="not_found")
    return entry_id


class MemoryCursorPagination(StrictCursorPagination):
    """Newest entry first; stable under inserts (the cursor encodes the position, not an offset). A
    cursor this API did not issue answers 400 invalid_cursor."""

    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class MemoryFiltersIn(StrictQuerySerializer):
    subject_actor_id = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_ID, help_text="Memories about this actor."
    )
    source_actor_id = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_ID, help_text="Memories learned from this actor."
    )
    status = serializers.ChoiceField(choices=EntryStatus.choices, required=False)
    portability = serializers.ChoiceField(choices=Portability.choices, required=False)
    project = serializers.CharField(required=False, max_length=200, help_text="The project it was learned in.")
    flagged = serializers.BooleanField(required=False, help_text="Flagged for operator review (or not).")
    # Pagination parameters, declared so that every other key is refused.
    cursor = serializers.CharField(required=False, help_text="The page to read, from a previous next/previous link.")
    page_size = serializers.IntegerField(required=False, min_value=1, max_value=200)


class MemoryActorOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField(help_text="Current display name and stable external id, as recall renders it.")


class RevisionOut(serializers.Serializer[Any]):
    id = serializers.CharField(help_text="The revision's short id, as recall renders it (m:…).")
    revision_id = serializers.IntegerField()
    number = serializers.IntegerField()
    body = serializers.CharField()
    subject = MemoryActorOut(allow_null=True)
    source_actor = MemoryActorOut(allow_null=True)
    belief_type = serializers.CharField()
    portability = serializers.CharField()
    origin_scope = serializers.CharField()
    confidence = serializers.FloatField()
    authority = serializers.CharField()
    salience = serializers.FloatField()
    always_on = serializers.BooleanField()
    lifecycle = serializers.CharField()
    valid_from = serializers.DateTimeField()
    valid_to = serializers.DateTimeField(allow_null=True)
    recorded_at = serializers.DateTimeField()
    supersedes = serializers.CharField(allow_null=True)
    source_audience = serializers.DictField(help_text="Computed from all of its evidence, most restrictive wins.")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()


class MemoryOut(serializers.Serializer[Any]):
    id = serializers.IntegerField(help_text="The entry id.")
    status = serializers.CharField()
    flagged_for_review = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    forgotten_at = serializers.DateTimeField(allow_null=True)
    current = RevisionOut()


class RevisionEvidenceOut(serializers.Serializer[Any]):
    kind = serializers.CharField()
    message_id = serializers.IntegerField(allow_null=True)
    parent_revision = serializers.CharField(allow_null=True)
    audience = serializers.DictField()
    created_at = serializers.DateTimeField()


class RevisionGrantOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    audience = serializers.DictField()
    granted_by_actor_id = serializers.IntegerField(allow_null=True)
    by_operator = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)


class RevisionRejectionOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    has_correction = serializers.BooleanField(help_text="The correction's text is not returned here.")
    resulting_revision = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


class RevisionHistoryOut(RevisionOut):
    evidence = RevisionEvidenceOut(many=True)
    grants = RevisionGrantOut(many=True)
    rejections = RevisionRejectionOut(many=True)


class MemoryDetailOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    status = serializers.CharField()
    flagged_for_review = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    forgotten_at = serializers.DateTimeField(allow_null=True)
    current = serializers.CharField(allow_null=True, help_text="Short id of the current revision.")
    revisions = RevisionHistoryOut(many=True)


def _audience(row: Any) -> dict[str, Any]:
    return {"kind": row.audience_kind, "namespace": row.audience_namespace, "readers": list(row.audience_readers)}


def _actor(actor: Actor | None) -> dict[str, Any] | None:
    return None if actor is None else {"id": actor.pk, "name": actor.label}


def _revision(revision: MemoryRevision) -> dict[str, Any]:
    return {
        "id": revision.short_id,
        "revision_id": revision.pk,
        "number": revision.number,
        "body": revision.body,
        "subject": _actor(revision.subject),
        "source_actor": _actor(revision.source_actor),
        "belief_type": revision.belief_type,
        "portability": revision.portability,
        "origin_scope": revision.origin_scope,
        "confidence": revision.confidence,
        "authority": revision.authority,
        "salience": revision.salience,
        "always_on": revision.always_on,
        "lifecycle": revision.lifecycle,
        "valid_from": revision.valid_from,
        "valid_to": revision.valid_to,
        "recorded_at": revision.recorded_at,
        "supersedes": short_id(revision.supersedes_id) if revision.supersedes_id else None,
        "source_audience": _audience(revision),
        "created_by": revision.created_by,
        "created_at": revision.created_at,
    }


def _entry(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "status": entry.status,
        "flagged_for_review": entry.flagged_for_review,
        "created_at": entry.created_at,
        "forgotten_at": entry.forgotten_at,
    }


def _history(item: RevisionHistory) -> dict[str, Any]:
    return {
        **_revision(item.revision),
        "evidence": [
            {
                "kind": e.kind,
                "message_id": e.message_id,
                "parent_revision": short_id(e.parent_revision_id) if e.parent_revision_id else None,
                "audience": _audience(e),
                "created_at": e.created_at,
            }
            for e in item.evidence
        ],
        "grants": [
            {
                "id": g.pk,
                "audience": _audience(g),
                "granted_by_actor_id": g.granted_by_actor_id,
                "by_operator": g.granted_by_user_id is not None,
                "created_at": g.created_at,
                "revoked_at": g.revoked_at,
            }
            for g in item.grants
        ],
        "rejections": [
            {
                "id": r.pk,
                "kind": r.kind,
                "has_correction": bool(r.correction),
                "resulting_revision": short_id(r.resulting_revision_id) if r.resulting_revision_id else None,
                "created_at": r.created_at,
            }
            for r in item.rejections
        ],
    }


class MemoryListApi(ListAPIView[MemoryEntry]):
    permission_classes = MANAGE
    pagination_class = MemoryCursorPagination
    serializer_class = MemoryOut

    @extend_schema(
        operation_id="memories_list",
        summary="List the agent's memories",
        description="The calling agent's memory entries with their current revisions, newest first, filtered "
        "(each filter only narrows) and cursor-paginated. Outside any turn: nothing here is recorded as a "
        "recall, and no reply may cite it as recalled. Each page read is audited (the key, the filters and "
        "the entry ids shown).",
        parameters=[MemoryFiltersIn],
        responses={200: MemoryOut(many=True), **ERRORS},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def filters(self) -> dict[str, Any]:
        params = MemoryFiltersIn(data=self.request.query_params.dict())
        params.is_valid(raise_exception=True)
        return dict(params.validated_data)

    def get_queryset(self) -> QuerySet[MemoryEntry]:
        return self.filtered(self.filters())

    def filtered(self, data: dict[str, Any]) -> QuerySet[MemoryEntry]:
        filters = MemoryFilters(
            subject_actor_id=data.get("subject_actor_id"),
            source_actor_id=data.get("source_actor_id"),
            status=data.get("status"),
            portability=data.get("portability"),
            project=data.get("project"),
            flagged=data.get("flagged"),
        )
        return memories_of_agent(request_agent(self.request).pk, filters)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        filters = self.filters()
        page = self.paginate_queryset(self.filtered(filters))
        assert page is not None  # a pagination class is set
        body = []
        for entry in page:
            assert entry.current_revision is not None  # the selector keeps entries with one
            body.append({**_entry(entry), "current": _revision(entry.current_revision)})
        principal = request_principal(request)
        management_read_record(
            agent_id=principal.agent.pk,
            api_key_id=principal.api_key_id,
            endpoint=ManagementEndpoint.MEMORIES_LIST,
            entry_ids=[entry.pk for entry in page],
            filters=filters,
        )
        return self.get_paginated_response(MemoryOut(body, many=True).data)


class MemoryDetailApi(APIView):
    permission_classes = MANAGE

    @extend_schema(
        operation_id="memories_retrieve",
        summary="Read one memory with its history",
        description="One of the calling agent's memory entries with every revision, each with its evidence "
        "(message ids, never their text), sharing grants and rejections (kinds, never correction text). "
        "The memory is named by the `m:` id of any of its revisions or by its entry id. Another agent's "
        "memory answers 404 like a missing one. Each read is audited (the key and the entry id).",
        parameters=[MEMORY_ID],
        responses={200: MemoryDetailOut, **ERRORS},
    )
    def get(self, request: Request, memory_id: MemoryName) -> Response:
        principal = request_principal(request)
        history = memory_history(principal.agent.pk, _entry_id_of(principal.agent.pk, memory_id))
        entry = history.entry
        body = {
            **_entry(entry),
            "current": short_id(entry.current_revision_id) if entry.current_revision_id else None,
            "revisions": [_history(item) for item in history.revisions],
        }
        management_read_record(
            agent_id=principal.agent.pk,
            api_key_id=principal.api_key_id,
            endpoint=ManagementEndpoint.MEMORIES_RETRIEVE,
            entry_ids=[entry.pk],
        )
        return Response(MemoryDetailOut(body).data)
