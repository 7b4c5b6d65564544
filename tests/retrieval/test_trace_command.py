"""``manage.py memory trace <id> --tenant <slug>``: the operator's JSON view of one recall trace."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from history.models import EvidenceMethod
from history.services import message_ingest
from memory.models import RecallTrace
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import form_query
from memory.retrieval.service import RecallResult, recall, task_budget
from memory.services import Belief, Provenance, memory_remember
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, TenantFactory, public_channel

pytestmark = pytest.mark.django_db


def traced_recall(tenant_slug: str) -> RecallResult:
    agent = AgentFactory.create(tenant=TenantFactory.create(slug=tenant_slug))
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    alice = ActorFactory.create(connector=connector, display_name="Alice", external_id="U200")
    channel = public_channel(connector, project="atlas")
    for body in ("The atlas deploy runs on Thursdays.", "Alice reviews every atlas deploy."):
        message = message_ingest(
            conversation=channel,
            actor=alice,
            body=body,
            created_at=timezone.now(),
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        ).message
        memory_remember(
            agent=agent,
            belief=Belief(body=body, subject_id=alice.pk),
            provenance=Provenance(source_message_id=message.pk),
        )
    return recall(
        perspective=perspective_for_conversation(channel, requester_id=alice.pk),
        query=form_query(message="when is the atlas deploy?", requester_id=alice.pk, known_actors=[alice]),
        budget=task_budget(),
    )


def run(*args: str) -> str:
    out = StringIO()
    call_command("memory", *args, stdout=out)
    return out.getvalue()


def error_of(*args: str) -> str:
    with pytest.raises(CommandError) as raised:
        run(*args)
    return str(raised.value)


def test_trace_prints_the_trace_as_json_and_it_rerenders_to_the_recorded_bytes() -> None:
    """The owning tenant gets the trace as JSON: its rendered text and sha256, its items with ids,
    bands, scores, components and reasons, and ``rerender_matches`` true."""
    result = traced_recall("acme")

    report = json.loads(run("trace", str(result.trace_id), "--tenant", "acme"))

    assert report["id"] == result.trace_id
    assert report["rerender_matches"] is True
    assert report["rendered_sha256"] == result.rendered_sha256
    assert report["rendered_text"] == result.rendered
    assert report["query_text"] == "when is the atlas deploy?"
    assert report["destination_audience"] == {"kind": "workspace", "namespace": "slack:acme", "readers": []}
    assert report["returned_count"] == len(report["items"]) == len(result.items) == 2
    assert [(i["revision_id"], i["short_id"]) for i in report["items"]] == [
        (item.revision_id, item.id) for item in result.items
    ]
    first = report["items"][0]
    assert {"entry_id", "band", "score", "components", "reason", "carried", "blocked_reason", "conflicts"} <= set(first)
    assert first["components"] and first["reason"]
    for key in ("agent", "moment", "profile", "policy_version", "as_of", "arms", "candidate_ids", "dropped_ids"):
        assert key in report
    for key in ("considered_count", "blocked_count", "withheld_unknown_count", "degradation", "corrections"):
        assert key in report


def test_a_trace_of_another_tenant_looks_exactly_like_a_missing_one() -> None:
    """Another tenant's trace, a missing id and a malformed id all fail with ``trace <id> not found``
    and nothing else: the answer does not say whether the trace exists."""
    theirs = traced_recall("globex")
    TenantFactory.create(slug="acme")
    missing = RecallTrace.objects.order_by("-pk").values_list("pk", flat=True).first() + 1000  # type: ignore[operator]

    other_tenant = error_of("trace", str(theirs.trace_id), "--tenant", "acme")
    absent = error_of("trace", str(missing), "--tenant", "acme")
    unknown_tenant = error_of("trace", str(theirs.trace_id), "--tenant", "no-such-tenant")
    malformed = error_of("trace", "m:1", "--tenant", "acme")

    assert other_tenant == unknown_tenant == f"trace {theirs.trace_id} not found"
    assert absent == f"trace {missing} not found"
    assert malformed == "trace m:1 not found"
    assert other_tenant.replace(str(theirs.trace_id), "<id>") == absent.replace(str(missing), "<id>")
