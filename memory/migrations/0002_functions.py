"""Engram's lineage rule (config/database/sql/disclosure.sql) and the revision sidecar's index and key.

- ``disclosure.sql``: ``engram_revisions_disclosable`` and ``engram_reply_lineage_allows``.
- The sidecar's GIN index over ``engram_agent_lexemes`` (history/0002: each agent its own posting lists).
- The sidecar's key to its revision, cascading in the database (the model does not declare it: the
  sidecar is written by trigger and never through Django).

A later change to a function is an edit of its file plus a migration that re-applies it (docs/schema.md).
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

from config.database.sql import ApplySQL

SIDECAR_CASCADE = """
ALTER TABLE memory_revisionsearchdocument
    ADD CONSTRAINT revision_search_document_revision_fk
    FOREIGN KEY (revision_id) REFERENCES memory_memoryrevision (id) ON DELETE CASCADE;
"""

DROP_SIDECAR_CASCADE = (
    "ALTER TABLE memory_revisionsearchdocument DROP CONSTRAINT IF EXISTS revision_search_document_revision_fk;"
)


class Migration(migrations.Migration):
    # The chain this one squashed: a database migrated by it (before the squash) counts this one as
    # applied. Drop the list once no such database is left.
    replaces = [
        ("memory", "0002_vector_extension_and_sidecar_cascade"),
        ("memory", "0003_search_documents_keep_negation"),
        ("memory", "0004_trace_records_rendered_labels"),
        ("memory", "0005_perspective_consistency_guards"),
        ("memory", "0006_lineage_rule"),
        ("memory", "0008_grants_never_rescue_unknown_provenance"),
        ("memory", "0009_lineage_walk_visits_each_ancestor_once"),
        ("memory", "0010_recall_misses"),
        ("memory", "0011_agent_qualified_search_terms"),
        ("memory", "0012_reply_lineage_reads_the_fold"),
    ]

    dependencies = [
        ("history", "0002_functions"),
        ("memory", "0001_initial"),
    ]

    operations = [
        ApplySQL("disclosure.sql", version=1),
        migrations.AddIndex(
            model_name="revisionsearchdocument",
            index=django.contrib.postgres.indexes.GinIndex(
                models.Func(
                    models.F("agent_id"),
                    models.F("tsv"),
                    function="engram_agent_lexemes",
                    output_field=django.contrib.postgres.search.SearchVectorField(),
                ),
                name="revision_search_agent_terms",
            ),
        ),
        migrations.RunSQL(SIDECAR_CASCADE, DROP_SIDECAR_CASCADE),
    ]
