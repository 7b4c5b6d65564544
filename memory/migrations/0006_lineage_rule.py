"""The lineage rule as one SQL function: may text built from these sources reach a destination?

``engram_lineage_allows(agent, message_ids, revision_ids, destination...)`` walks an agent reply's
provenance: every history message it was built from (recursively, through earlier replies' own
``history_message_ids``) must exist in the agent's perspective, carry source evidence and be
admissible to the destination; every memory revision any of them used must be admissible by its
source audience or a live grant. Hard caps: 500 history ids per message, 5,000 lineage nodes, 64
levels; overflow denies the whole read rather than guessing.
"""

from django.db import migrations

from memory.migrations import _lineage_sql

LINEAGE_ALLOWS = _lineage_sql.LINEAGE_ALLOWS_V1

DROP = "DROP FUNCTION IF EXISTS engram_lineage_allows(bigint, bigint[], bigint[], text, text, bigint[], bigint[]);"


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_perspective_consistency_guards"), ("history", "0005_perspective_consistency_guards")]

    operations = [migrations.RunSQL(LINEAGE_ALLOWS, DROP)]
