"""Engram's SQL functions (config/database/sql) and the schema that builds on them.

- ``audience.sql``, ``search.sql`` and ``lineage.sql``: the disclosure rule, the search terms, and the
  lineage fold that the ``fold_lineage`` trigger (history/0001) stores on each reply.
- The sidecar's GIN index over ``engram_agent_lexemes`` (each agent its own posting lists).
- The sidecar's key to its message, cascading in the database (the model does not declare it: the
  sidecar is written by trigger and never through Django).
- Extended statistics on (agent, conversation): every conversation belongs to one agent, which the
  planner cannot know from per-column statistics; without them it expects a handful of rows for "this
  conversation of this agent" and sorts whole conversations where an index walk of two rows would do.

A later change to a function is an edit of its file plus a migration that re-applies it (docs/schema.md).
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

from config.database.sql import ApplySQL

SIDECAR_CASCADE = """
ALTER TABLE history_messagesearchdocument
    ADD CONSTRAINT message_search_document_message_fk
    FOREIGN KEY (message_id) REFERENCES history_message (id) ON DELETE CASCADE;
"""

DROP_SIDECAR_CASCADE = (
    "ALTER TABLE history_messagesearchdocument DROP CONSTRAINT IF EXISTS message_search_document_message_fk;"
)

STATISTICS = (
    "CREATE STATISTICS IF NOT EXISTS history_message_agent_conversation (dependencies, ndistinct)"
    " ON agent_id, conversation_id FROM history_message;"
)

DROP_STATISTICS = "DROP STATISTICS IF EXISTS history_message_agent_conversation;"


class Migration(migrations.Migration):
    # The chain this one squashed: a database migrated by it (before the squash) counts this one as
    # applied. Drop the list once no such database is left.
    replaces = [
        ("history", "0002_audience_rule_and_sidecar_cascade"),
        ("history", "0003_search_functions"),
        ("history", "0004_search_documents_keep_negation"),
        ("history", "0005_perspective_consistency_guards"),
        ("history", "0006_message_agent_conversation_statistics"),
        ("history", "0007_agent_qualified_search_terms"),
        ("history", "0008_message_actor_conversation_index"),
        ("history", "0009_search_any_of_several_agents"),
        ("history", "0010_reply_lineage_folded_at_delivery"),
        ("history", "0011_reply_lineage_trusts_folded_revision_audiences"),
        ("history", "0012_reply_lineage_folds_from_its_sources"),
        ("history", "0013_reply_revision_audiences_fold_from_sources"),
        ("history", "0014_search_events_count_blocked_results"),
    ]

    dependencies = [
        ("history", "0001_initial"),
        # lineage.sql reads memory's revisions and tombstones
        ("memory", "0001_initial"),
    ]

    operations = [
        ApplySQL("audience.sql", version=1),
        ApplySQL("search.sql", version=1),
        ApplySQL("lineage.sql", version=1),
        migrations.AddIndex(
            model_name="messagesearchdocument",
            index=django.contrib.postgres.indexes.GinIndex(
                models.Func(
                    models.F("agent_id"),
                    models.F("tsv"),
                    function="engram_agent_lexemes",
                    output_field=django.contrib.postgres.search.SearchVectorField(),
                ),
                name="message_search_agent_terms",
            ),
        ),
        migrations.RunSQL(SIDECAR_CASCADE, DROP_SIDECAR_CASCADE),
        migrations.RunSQL(STATISTICS, DROP_STATISTICS),
    ]
