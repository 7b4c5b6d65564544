"""Operator commands on memories and their recall traces.

``memory trace <trace-id> --tenant <slug>`` prints one recall trace as JSON, with
``rerender_matches``: whether re-rendering the trace from its own rows reproduces the recorded
``rendered_sha256``. A trace of another tenant answers exactly like a missing one.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.models import RecallTrace, short_id
from memory.retrieval.trace import rerender, sha256_hex


class Command(BaseCommand):
    help = "Inspect memories and recall traces."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        trace = actions.add_parser("trace", help="Print one recall trace as JSON.")
        trace.add_argument("trace_id", help="The trace id (as returned by a recall).")
        trace.add_argument("--tenant", required=True, help="The slug of the tenant the trace belongs to.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "trace":
            self.stdout.write(json.dumps(trace_report(options["trace_id"], options["tenant"]), indent=2))


def trace_report(trace_id: str, tenant_slug: str) -> dict[str, Any]:
    """The trace as a JSON-ready dict, or ``CommandError`` if the tenant has no such trace."""
    not_found = CommandError(f"trace {trace_id} not found")
    try:
        pk = int(trace_id)
    except ValueError:
        raise not_found from None
    trace = RecallTrace.objects.select_related("agent").filter(pk=pk, agent__tenant__slug=tenant_slug).first()
    if trace is None:
        raise not_found
    items = list(trace.items.order_by("position"))
    return {
        "id": trace.pk,
        "agent": {"id": trace.agent_id, "name": trace.agent.name},
        "moment": trace.moment,
        "profile": trace.profile,
        "policy_version": trace.policy_version,
        "as_of": trace.as_of.isoformat(),
        "historical": trace.historical,
        "query_text": trace.query_text,
        "query_hints": trace.query_hints,
        "destination_audience": trace.audience.as_dict(),
        "arms": trace.arms,
        "candidate_ids": trace.candidate_ids,
        "dropped_ids": trace.dropped_ids,
        "considered_count": trace.considered_count,
        "returned_count": trace.returned_count,
        "blocked_count": trace.blocked_count,
        "withheld_unknown_count": trace.withheld_unknown_count,
        "token_estimate": trace.token_estimate,
        "degradation": trace.degradation,
        "rendered_sha256": trace.rendered_sha256,
        "rendered_text": trace.rendered_text,
        "corrections": trace.corrections,
        "items": [
            {
                "position": item.position,
                "revision_id": item.revision_id,
                "entry_id": item.entry_id,
                "short_id": short_id(item.revision_id),
                "band": item.band,
                "score": item.score,
                "components": item.components,
                "reason": item.reason,
                "carried": item.carried,
                "blocked_reason": item.blocked_reason,
                "conflicts": [short_id(revision_id) for revision_id in item.conflicts],
                "subject_label": item.subject_label,
                "source_label": item.source_label,
            }
            for item in items
        ],
        "rerender_matches": sha256_hex(rerender(trace)) == trace.rendered_sha256,
    }
