"""Whether a request wrote anything: a fingerprint of every table's rows, compared before and after."""

from __future__ import annotations

from django.db import connection

#: Bookkeeping any authenticated request may touch, refused or not: the API key's last use (refreshed
#: at most once a minute) and the per-key rate counters.
BOOKKEEPING = frozenset({"accounts_apikey", "accounts_apikeyratewindow"})

Fingerprint = dict[str, tuple[int, int]]


def database_fingerprint() -> Fingerprint:
    """Per table, its row count and the sum of its rows' hashes: an INSERT, UPDATE or DELETE changes it."""
    with connection.cursor() as cursor:
        tables = sorted(set(connection.introspection.table_names(cursor)) - BOOKKEEPING)
        sql = " UNION ALL ".join(
            f"SELECT %s, count(*), coalesce(sum(hashtext(t::text)), 0) FROM {connection.ops.quote_name(name)} t"
            for name in tables
        )
        cursor.execute(sql, tables)
        return {name: (count, digest) for name, count, digest in cursor.fetchall()}


def tables_changed(before: Fingerprint, after: Fingerprint) -> list[str]:
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


class WriteWatch:
    """The tables each request of a sequence changed, at one fingerprint a request: what one request
    left is what the next one starts from (nothing else may write in between)."""

    def __init__(self) -> None:
        self.last = database_fingerprint()

    def changed(self) -> list[str]:
        """The tables changed since the previous call (or since the watch began)."""
        after = database_fingerprint()
        changed, self.last = tables_changed(self.last, after), after
        return changed
