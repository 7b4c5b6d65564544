"""Create the ``vector`` extension where the server has it, and the revision sidecar's cascading key.

Without pgvector (for example a stock PostgreSQL 15) the migration still succeeds: embeddings are
stored as ``real[]`` either way, and Engram runs lexical-only, saying so.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def create_vector_extension(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return
        cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")


SIDECAR_CASCADE = """
ALTER TABLE memory_revisionsearchdocument
    ADD CONSTRAINT revision_search_document_revision_fk
    FOREIGN KEY (revision_id) REFERENCES memory_memoryrevision (id) ON DELETE CASCADE;
"""

DROP_SIDECAR_CASCADE = (
    "ALTER TABLE memory_revisionsearchdocument DROP CONSTRAINT IF EXISTS revision_search_document_revision_fk;"
)


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [
        # The extension outlives a rollback of this app: other databases objects may depend on it.
        migrations.RunPython(create_vector_extension, migrations.RunPython.noop),
        migrations.RunSQL(SIDECAR_CASCADE, DROP_SIDECAR_CASCADE),
    ]
