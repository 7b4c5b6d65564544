"""Grants never disclose a revision of unknown or mixed ("nobody") provenance in the lineage walk
either, matching the eligibility rule: no one person can consent for sources nobody vouches for."""

from django.db import migrations

from memory.migrations import _lineage_sql

OLD = _lineage_sql.LINEAGE_ALLOWS_V1
NEW = _lineage_sql.LINEAGE_ALLOWS_V2


class Migration(migrations.Migration):
    dependencies = [("memory", "0006_lineage_rule")]

    operations = [migrations.RunSQL(NEW, OLD)]
