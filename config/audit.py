"""Audit rows of reads: keyed digests, and the transaction they are written in.

Audit rows never hold query text: recall queries are a few words about a person, and a plain hash
of them is reversed by hashing guesses, so the digest is an HMAC-SHA256 under a subkey derived from
the service's audit key. Without a key, no digest."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection, transaction

from config.replica import on_primary, replica_configured

_SUBKEY_LABEL = b"engram/audit-digest/v1"


def audit_digest(text: str) -> str:
    key: str = settings.ENGRAM_AUDIT_KEY
    if not key:
        return ""
    subkey = hmac.new(key.encode(), _SUBKEY_LABEL, hashlib.sha256).digest()
    return hmac.new(subkey, text.encode(), hashlib.sha256).hexdigest()


@contextmanager
def read_audit_transaction() -> Iterator[None]:
    """An atomic block for the rows a read writes about itself (a recall's trace, a history
    search's event and the turn evidence it adds); in a transaction of its own, COMMIT does not wait
    for the WAL flush.

    If a write fails, the block fails and so does the read: nothing reaches a model unaudited. Not
    waiting is safe for these rows: whatever later acts on the read (a reply's provenance, the
    turn's ledger, a correction) commits synchronously, and PostgreSQL flushes WAL in order, so that
    commit makes them durable too. A crash within the WAL writer's delay (200 ms by default) can
    lose only the audit of a read nothing has acted on yet. Inside a caller's transaction the
    setting is left alone, so the caller's other writes keep their durability, and the block takes
    no savepoint (two round trips): a failed audit write fails the read and, with it, the caller's
    transaction; no caller catches that failure and goes on in the same transaction.

    With a read replica configured the commit waits for the flush after all: a routed read waits for
    the replica to replay the primary's WAL position, and WAL left unflushed by an asynchronous commit
    reaches the replica only when the WAL writer flushes it, so the next routed read would wait up to
    that delay (``config.replica``).
    """
    # A read served by the replica writes its audit on the primary (config.replica).
    with on_primary():
        outermost = not connection.in_atomic_block
        with transaction.atomic(savepoint=False):
            if outermost and not replica_configured():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit TO OFF")
            yield
