"""The audit of the management API's reads (``memory.apis.data``): the one service that writes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from config.replica import on_primary
from memory.models import ManagementEndpoint, ManagementReadEvent


def management_read_record(
    *,
    agent_id: int,
    api_key_id: int,
    endpoint: ManagementEndpoint,
    entry_ids: Sequence[int],
    filters: dict[str, Any] | None = None,
) -> ManagementReadEvent:
    """Record that ``api_key_id`` read ``entry_ids`` of ``agent_id`` through ``endpoint`` (with the list's
    ``filters``). Called before the response is sent: if the row cannot be written, the read fails, so
    nothing leaves the management API unaudited.

    Unlike a recall's audit (``config.audit.read_audit_transaction``), the commit waits for the WAL
    flush: what was read leaves with the response, and nothing committed later would make the row
    durable."""
    with on_primary(), transaction.atomic():
        return ManagementReadEvent.objects.create(
            agent_id=agent_id,
            api_key_id=api_key_id,
            endpoint=endpoint,
            entry_ids=list(entry_ids),
            filters=filters or {},
        )
