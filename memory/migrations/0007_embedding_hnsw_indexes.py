"""HNSW indexes for semantic search, where the server has pgvector.

Vectors are ``real[]``; the indexes are on the cast ``vector::vector(384)`` (the default model's
dimensions) and partial on ``dims = 384``, which is exactly the expression the search uses. Built
concurrently, so a large table stays writable. Without pgvector this migration does nothing.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

INDEXES = {
    "memory_revisionembedding_hnsw_384": "memory_revisionembedding",
    "memory_messageembedding_hnsw_384": "memory_messageembedding",
}


def _has_vector(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        return cursor.fetchone() is not None


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if not _has_vector(schema_editor):
        return
    for name, table in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} "
            "USING hnsw ((vector::vector(384)) vector_cosine_ops) WHERE dims = 384"
        )


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("memory", "0006_lineage_rule")]

    operations = [migrations.RunPython(create, drop)]
