"""Timestamps read back exactly as written, aware in UTC, through the ORM, raw and server-side cursors alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from psycopg.postgres import types
from psycopg.pq import Format

from accounts.models import Tenant
from config.database.base import COMPILED_TIMESTAMPTZ_LOADER

pytestmark = pytest.mark.django_db

TIMESTAMPTZ_OID = types["timestamptz"].oid


def test_raw_cursors_read_timestamptz_with_psycopgs_loader_in_utc() -> None:
    written = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT) is COMPILED_TIMESTAMPTZ_LOADER
        cursor.execute("SELECT %s::timestamptz, '2026-11-30 23:59:59.999999-08'::timestamptz", [written])
        read, literal = cursor.fetchone()
    assert read == written
    assert read.tzinfo is UTC
    assert read.isoformat() == "2026-03-28T20:00:15.123456+00:00"
    assert literal == datetime(2026, 12, 1, 7, 59, 59, 999999, tzinfo=UTC)


def test_model_timestamps_round_trip_through_the_orm() -> None:
    tenant = Tenant.objects.create(slug="tz", name="Time zones")
    stored = Tenant.objects.values_list("created_at", flat=True).get(pk=tenant.pk)
    assert stored == tenant.created_at
    assert stored.tzinfo is UTC


def test_server_side_cursors_read_timestamps_in_utc_too() -> None:
    tenant = Tenant.objects.create(slug="tz-chunked", name="Read in chunks")
    (stored,) = Tenant.objects.filter(pk=tenant.pk).values_list("created_at", flat=True).iterator(chunk_size=10)
    assert stored == tenant.created_at
    assert stored.tzinfo is UTC
