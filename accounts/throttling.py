"""Per-API-key request rate limit (``ENGRAM_API_RATE``, e.g. ``6000/minute``), through DRF throttling.

Each request of an authenticated agent counts against its API key in one statement on an UNLOGGED
PostgreSQL table (``accounts_apikeyratewindow``, migration accounts 0001): one row a key, holding the
hits of the current and of the previous window. A request is refused while the sliding estimate,
the previous window's hits weighted by how much of it still overlaps the last period plus the
current window's hits, exceeds the limit; unlike fixed windows, this does not let a client send
twice the limit across a window's edge. Refused requests count too, so a client that ignores
``Retry-After`` stays refused.

Why this store, rather than Django's cache: the embedded default has no shared cache server, and
gunicorn runs several workers (and a deployment several hosts) that must see one count; a
per-process cache would multiply the limit by the workers. Django's database cache is shared but
costs several statements and a synchronous commit per ``set``. The one upsert here is atomic (the
row lock orders one key's concurrent requests), shared by every worker and host that share the
database, and, the table being unlogged, commits without waiting for a WAL flush.

The limit answers ``429 rate_limited`` with ``Retry-After`` in the API's error shape
(config/api.py). Unauthenticated requests are not counted here: they fail authentication first.
"""

from __future__ import annotations

import math
import time
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from accounts.authentication import AgentPrincipal
from config.database.base import prepared_cursor

PERIODS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: One row a key; created UNLOGGED by migration accounts 0001 (no model: counters, not records).
TABLE = "accounts_apikeyratewindow"

#: Counts one request in the key's current window (rolling the row over when a new window began)
#: and returns the current and previous windows' hits.
HIT_SQL = (
    f"INSERT INTO {TABLE} AS w (api_key_id, period_s, window_no, hits, previous_hits)"
    " VALUES (%s, %s, %s, 1, 0)"
    " ON CONFLICT (api_key_id) DO UPDATE SET"
    " previous_hits = CASE"
    "  WHEN w.period_s <> EXCLUDED.period_s THEN 0"
    "  WHEN w.window_no = EXCLUDED.window_no THEN w.previous_hits"
    "  WHEN w.window_no = EXCLUDED.window_no - 1 THEN w.hits"
    "  ELSE 0 END,"
    " hits = CASE WHEN w.period_s = EXCLUDED.period_s AND w.window_no = EXCLUDED.window_no"
    "  THEN w.hits + 1 ELSE 1 END,"
    " window_no = EXCLUDED.window_no, period_s = EXCLUDED.period_s"
    " RETURNING hits, previous_hits"
)


@lru_cache(maxsize=8)
def parse_rate(rate: str) -> tuple[int, int] | None:
    """``"N/period"`` (period: second, minute, hour or day, or their first letter) as (N, seconds);
    ``None`` for no limit (``off`` or empty)."""
    rate = rate.strip().lower()
    if rate in {"", "off", "none"}:
        return None
    try:
        count, period = rate.split("/")
        limit = int(count)
        seconds = PERIODS_S[period.strip()[0]]
    except (ValueError, KeyError, IndexError) as error:
        raise ImproperlyConfigured(f"ENGRAM_API_RATE must look like 6000/minute or be off, not {rate!r}") from error
    if limit < 1:
        raise ImproperlyConfigured("ENGRAM_API_RATE needs at least 1 request a period (or off)")
    return limit, seconds


def retry_after_s(*, limit: int, period_s: int, elapsed_s: float, hits: int, previous_hits: int) -> int:
    """Whole seconds until the sliding estimate admits one more request again."""
    if hits < limit and previous_hits > 0:
        # Still in this window: once enough of the previous window has slid out of the period.
        until = period_s * (1 - (limit - hits) / previous_hits) - elapsed_s
    else:
        # This window alone is full: the next one, where these hits become the previous window's.
        until = (period_s - elapsed_s) + max(0.0, period_s * (1 - (limit - 1) / hits))
    return max(1, math.ceil(until))


class ApiKeyRateThrottle(BaseThrottle):
    def __init__(self) -> None:
        self.retry_after: int | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        rate = parse_rate(settings.ENGRAM_API_RATE)
        principal = request.user
        if rate is None or not isinstance(principal, AgentPrincipal):
            return True
        limit, period_s = rate
        now = time.time()
        window_no = int(now // period_s)
        with prepared_cursor() as cursor:
            cursor.execute(HIT_SQL, [principal.api_key_id, period_s, window_no])
            hits, previous_hits = cursor.fetchone()
        elapsed_s = now - window_no * period_s
        estimate = previous_hits * (1 - elapsed_s / period_s) + hits
        if estimate <= limit:
            return True
        self.retry_after = retry_after_s(
            limit=limit, period_s=period_s, elapsed_s=elapsed_s, hits=hits, previous_hits=previous_hits
        )
        return False

    def wait(self) -> float | None:
        return self.retry_after
