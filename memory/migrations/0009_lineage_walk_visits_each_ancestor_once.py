"""The lineage walk visits each ancestor once (see ``_lineage_sql.LINEAGE_ALLOWS_V3``)."""

from django.db import migrations

from memory.migrations import _lineage_sql


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_grants_never_rescue_unknown_provenance")]

    operations = [migrations.RunSQL(_lineage_sql.LINEAGE_ALLOWS_V3, _lineage_sql.LINEAGE_ALLOWS_V2)]
