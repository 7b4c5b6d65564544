"""Celery tasks: thin, idempotent, retrying. They take no content and call services."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import DatabaseError
from django.db.models import Q

from accounts.models import Tenant
from memory.embeddings.index import drain_outbox, pending_count, record_failure
from memory.erasure import retention_enforce
from memory.retention import trace_operator_fields_expire

log = logging.getLogger(__name__)

#: Batches per task run before handing the rest to a fresh task (keeps one run short).
BATCHES_PER_RUN = 50


@shared_task(bind=True, name="memory.tasks.embed_pending", acks_late=True, max_retries=None, ignore_result=True)
def embed_pending(self) -> int:  # type: ignore[no-untyped-def]
    """Drain the index outbox: embed pending texts into every live or building generation."""
    total = 0
    try:
        for _ in range(BATCHES_PER_RUN):
            taken = drain_outbox()
            total += taken
            if taken == 0:
                return total
    except Exception as error:
        record_failure(error)
        log.exception("embedding batch failed; retrying")
        raise self.retry(exc=error, countdown=min(60, 2 ** min(self.request.retries, 6))) from error
    if pending_count():
        embed_pending.delay()
    return total


@shared_task(
    name="memory.tasks.expire_trace_operator_fields",
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=5,
    ignore_result=True,
)
def expire_trace_operator_fields() -> int:
    """Null the operator-only fields of traces past ``ENGRAM_TRACE_OPERATOR_RETENTION_DAYS`` (daily)."""
    return trace_operator_fields_expire()


@shared_task(
    name="memory.tasks.enforce_retention",
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=5,
    ignore_result=True,
)
def enforce_retention() -> dict[str, dict[str, int]]:
    """Erase every tenant's rows past its retention periods (daily); resumes an interrupted run.
    Returns the tombstone counts by tenant slug."""
    done: dict[str, dict[str, int]] = {}
    for tenant in Tenant.objects.filter(
        Q(message_retention_days__isnull=False) | Q(memory_retention_days__isnull=False)
    ).order_by("pk"):
        event = retention_enforce(tenant=tenant)
        if event is not None:
            done[tenant.slug] = dict(event.counts)
    return done
