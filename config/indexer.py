"""Waking the embedding workers: the one call both the transcript's and memory's write services make.

Every immutable text insert queues its index work in the outbox (a trigger); after the writing
transaction commits, a worker is asked to drain it (``memory.tasks.embed_pending``, named here by its
Celery name). It lives beside the Celery application, below the apps, because history's ingest and
memory's writes both call it and history may not import memory.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection, transaction

_NOTIFY = "memory.tasks.embed_pending"


def notify_indexer() -> None:
    """Ask a worker to drain the outbox once the current transaction commits (at most once per
    transaction). If the broker is down the periodic drain still catches up: nothing depends on it."""
    if not settings.ENGRAM_NOTIFY_INDEXER:
        return
    if any(getattr(func, "__name__", "") == "_send_embed_pending" for _, func, *_ in connection.run_on_commit):
        return
    transaction.on_commit(_send_embed_pending, robust=True)


def _send_embed_pending() -> None:
    from config.celery import app

    app.send_task(_NOTIFY)
