"""Recording what a recall rendered, in the render pass, bound to the exact bytes by a sha256.

The ``RecallTrace`` with its items and the operator ``RetrievalEvent`` are written in one
transaction; if either write fails the recall fails, so no context reaches a model unaudited. That
transaction's commit does not wait for the WAL flush (see ``config.audit.read_audit_transaction``).
A trace can be re-rendered from its own rows (``rerender``): the items, the labels they were shown
with and the correction lines reproduce ``rendered_sha256``, which is what makes it trustworthy.

A task recall for a non-empty query that returned nothing counts a ``RecallMiss`` for the
requester in the same transaction: repeated misses are a formation signal.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, Model
from django.utils import timezone

from config.audit import audit_digest, read_audit_transaction
from config.database.base import prepared_cursor
from history.models import Session, Turn
from memory.models import MemoryRevision, RecallTrace, RecallTraceItem, RetrievalEvent
from memory.retrieval.candidates import Candidate
from memory.retrieval.eligibility import Perspective
from memory.retrieval.query import RecallQuery
from memory.retrieval.render import Labels, render_block, render_line


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@read_audit_transaction()
def record(
    *,
    perspective: Perspective,
    moment: str,
    profile: str,
    policy: str,
    query_text: str,
    query_hints: dict[str, list[Any]],
    as_of: Any,
    historical: bool,
    rendered: str,
    items: Sequence[Candidate],
    labels: Labels,
    corrections: Sequence[str],
    tokens: int,
    considered: int,
    withheld_unknown: int,
    degradation: str,
    arms: dict[str, Any],
    candidate_ids: Sequence[int],
    dropped_ids: Sequence[int],
    session: Session | None,
    turn: Turn | None,
    cost_ms: float,
) -> RecallTrace:
    destination = perspective.destination
    trace = RecallTrace(
        agent_id=perspective.agent_id,
        session=session,
        turn=turn,
        moment=moment,
        profile=profile,
        policy_version=policy,
        as_of=as_of,
        historical=historical,
        rendered_text=rendered,
        rendered_sha256=sha256_hex(rendered),
        corrections=list(corrections),
        token_estimate=tokens,
        considered_count=considered,
        returned_count=len(items),
        blocked_count=sum(1 for item in items if item.blocked),
        withheld_unknown_count=withheld_unknown,
        degradation=degradation,
        query_text=query_text,
        query_hints=query_hints,
        arms=arms,
        candidate_ids=list(candidate_ids),
        dropped_ids=list(dropped_ids),
        audience_kind=destination.kind,
        audience_namespace=destination.namespace,
        audience_readers=list(destination.readers),
    )
    trace_items = [
        RecallTraceItem(
            position=position,
            entry_id=item.entry_id,
            revision_id=item.revision_id,
            band=item.band,
            score=item.score,
            components=item.components,
            reason=item.reason,
            carried=item.carried,
            blocked_reason=item.blocked,
            conflicts=item.conflicts,
            subject_label=labels.of(item.subject_id) or "",
            source_label=labels.said_by(item.source_actor_ids, item.subject_id) or "",
        )
        for position, item in enumerate(items)
    ]
    event = RetrievalEvent(
        agent_id=perspective.agent_id,
        query_digest=audit_digest(query_text) if query_text else "",
        destination_audience=destination.as_dict(),
        selected_revision_ids=[item.revision_id for item in items],
        score_components={str(item.revision_id): item.components for item in items},
        cost_tokens=tokens,
        degradation=degradation,
        withheld_unknown_count=withheld_unknown,
    )
    _insert_trace(trace, trace_items, event)
    if profile == "task" and perspective.requester_id is not None and not items and not RecallQuery(query_text).empty:
        _record_miss(agent_id=perspective.agent_id, subject_id=perspective.requester_id)
    return trace


def _insert_trace(trace: RecallTrace, items: Sequence[RecallTraceItem], event: RetrievalEvent) -> None:
    """Insert the trace, its items and its event in one statement (one round trip), each row as
    ``Model.save()`` would write it (the fields' own defaults); sets ``trace.pk``.

    The items travel as one JSON document that ``jsonb_to_recordset`` expands into typed rows, so the
    statement's text is the same for any number of items: the driver binds one value instead of
    quoting every field of every item, and parses the statement once per process.
    """
    trace_columns, trace_values, params = _row(trace)
    sql = f"WITH t AS (INSERT INTO {RecallTrace._meta.db_table} ({trace_columns}) VALUES ({trace_values}) RETURNING id)"
    if items:
        shape = _shape(RecallTraceItem, "trace")
        sql += (
            f", i AS (INSERT INTO {RecallTraceItem._meta.db_table} (trace_id, {shape.columns})"
            f" SELECT t.id, {shape.columns} FROM t, jsonb_to_recordset(%s::jsonb) AS v({shape.record}))"
        )
        rows = [{f.column: f.pre_save(item, True) for f in shape.fields} for item in items]
        params.append(json.dumps(rows, cls=DjangoJSONEncoder, allow_nan=False))
    event_columns, event_values, event_params = _row(event, parent="trace")
    sql += (
        f", e AS (INSERT INTO {RetrievalEvent._meta.db_table} (trace_id, {event_columns})"
        f" SELECT t.id, {event_values} FROM t) SELECT id FROM t"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, params + event_params)
        row = cursor.fetchone()
    assert row is not None
    trace.pk = row[0]
    trace._state.adding = False


def _row(obj: Model, *, parent: str = "") -> tuple[str, str, list[Any]]:
    """Columns, typed placeholders and values of an unsaved row, leaving out its primary key and the
    ``parent`` foreign key (filled from the statement's own insert)."""
    shape = _shape(type(obj), parent)
    db = connections[DEFAULT_DB_ALIAS]
    return shape.columns, shape.placeholders, [f.get_db_prep_save(f.pre_save(obj, True), db) for f in shape.fields]


@dataclass(frozen=True)
class _Shape:
    """The columns ``model``'s rows are inserted with (all but its primary key and ``parent``)."""

    fields: tuple[Field[Any, Any], ...]
    #: Quoted column names, comma-separated.
    columns: str
    #: One typed placeholder per column, for a ``VALUES`` row.
    placeholders: str
    #: One typed column definition per column, for ``jsonb_to_recordset``.
    record: str


@functools.cache
def _shape(model: type[Model], parent: str) -> _Shape:
    db = connections[DEFAULT_DB_ALIAS]
    fields = tuple(f for f in model._meta.concrete_fields if not f.primary_key and f.name != parent)
    quoted = [(db.ops.quote_name(f.column), f.db_type(db)) for f in fields]
    return _Shape(
        fields=fields,
        columns=", ".join(column for column, _ in quoted),
        placeholders=", ".join(f"CAST(%s AS {kind})" for _, kind in quoted),
        record=", ".join(f"{column} {kind}" for column, kind in quoted),
    )


def _record_miss(*, agent_id: int, subject_id: int) -> None:
    """Count a task recall about ``subject_id`` that returned nothing: one upsert, so concurrent misses
    for the same subject add up instead of racing."""
    with prepared_cursor() as cursor:
        cursor.execute(
            "INSERT INTO memory_recallmiss (agent_id, subject_id, count, last_missed_at) VALUES (%s, %s, 1, %s)"
            " ON CONFLICT (agent_id, subject_id) DO UPDATE"
            " SET count = memory_recallmiss.count + 1, last_missed_at = EXCLUDED.last_missed_at",
            [agent_id, subject_id, timezone.now()],
        )


def rerender(trace: RecallTrace) -> str:
    """Rebuild the rendered block from the trace's own rows: items, recorded labels, corrections."""
    items = list(trace.items.order_by("position"))
    revisions = MemoryRevision.objects.in_bulk([i.revision_id for i in items])
    candidates: list[Candidate] = []
    label_map: dict[int, str] = {}
    for item in items:
        revision = revisions[item.revision_id]
        # Labels are keyed by negative positions so the recorded text is used, whatever the actor is called now.
        subject_key, source_key = -(2 * item.position + 1), -(2 * item.position + 2)
        if item.subject_label:
            label_map[subject_key] = item.subject_label
        if item.source_label:
            label_map[source_key] = item.source_label
        candidates.append(
            Candidate(
                revision_id=revision.pk,
                entry_id=revision.entry_id,
                number=revision.number,
                body=revision.body,
                subject_id=subject_key if item.subject_label else None,
                source_actor_id=source_key if item.source_label else None,
                source_actor_ids=[source_key] if item.source_label else [],
                belief_type=revision.belief_type,
                portability=revision.portability,
                origin_scope=revision.origin_scope,
                confidence=revision.confidence,
                authority=revision.authority,
                salience=revision.salience,
                always_on=revision.always_on,
                lifecycle=revision.lifecycle,
                valid_from=revision.valid_from,
                valid_to=revision.valid_to,
                recorded_at=revision.recorded_at,
                restricted_to_conversation_id=revision.restricted_to_conversation_id,
                supersedes_id=revision.supersedes_id,
                utility=0.0,
                last_used_at=None,
                flagged_for_review=False,
                evidence_count=0,
                in_conversation=False,
                source_message_id=None,
                band=item.band,
                carried=item.carried,
                blocked=item.blocked_reason,
                conflicts=list(item.conflicts),
            )
        )
    labels = Labels(label_map)
    lines = [render_line(candidate, labels) for candidate in candidates]
    return render_block(
        lines,
        policy=trace.policy_version,
        moment=trace.moment,
        as_of=trace.as_of if trace.historical else None,
        corrections=trace.corrections,
    )
