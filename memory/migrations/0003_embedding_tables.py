"""The embedding tables, with pgvector's ``vector`` column and cosine HNSW indexes, where the server has
pgvector.

- The ``vector`` extension is created where the server has it. Without pgvector (for example a stock
  PostgreSQL 15) the migration still succeeds, creates no table, and Engram runs lexical-only, saying so
  (``memory.embeddings.index.vectors_stored``).
- The tables are created only where the extension is installed
  (:class:`memory.migrations._vector.WhereVectorExtension`): a ``vector`` column cannot be declared
  elsewhere. Their models are in the migration state either way, so the code can name them and
  ``makemigrations`` stays exact. To add them to a database migrated without pgvector, install the
  extension and migrate ``memory`` back to ``0002_functions`` and forward again (docs/embeddings.md).
- The column has no fixed size (each generation's model has its own); the HNSW indexes are over
  ``vector::vector(384)`` for the rows of 384 dimensions, exactly the expression the searches order by.
  Keys to revisions, messages and generations cascade in the database and are not declared to Django
  (see the models).
"""

import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.functions.comparison
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from memory.migrations._vector import WhereVectorExtension


def create_vector_extension(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            return
        cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")


CASCADING_KEYS = [
    ("memory_revisionembedding", "revision_id", "memory_memoryrevision"),
    ("memory_revisionembedding", "generation_id", "memory_embeddinggeneration"),
    ("memory_messageembedding", "message_id", "history_message"),
    ("memory_messageembedding", "generation_id", "memory_embeddinggeneration"),
]


def _key_name(table: str, column: str) -> str:
    return f"{table.removeprefix('memory_')}_{column}_fk"


EMBEDDING_CASCADE = "".join(
    f"ALTER TABLE {table} ADD CONSTRAINT {_key_name(table, column)}"
    f" FOREIGN KEY ({column}) REFERENCES {target} (id) ON DELETE CASCADE;"
    for table, column, target in CASCADING_KEYS
)
DROP_EMBEDDING_CASCADE = "".join(
    f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {_key_name(table, column)};" for table, column, _ in CASCADING_KEYS
)


def _hnsw(name: str) -> pgvector.django.indexes.HnswIndex:
    return pgvector.django.indexes.HnswIndex(
        django.contrib.postgres.indexes.OpClass(
            django.db.models.functions.comparison.Cast(
                "vector", output_field=pgvector.django.vector.VectorField(dimensions=384)
            ),
            name="vector_cosine_ops",
        ),
        condition=models.Q(("dims", 384)),
        ef_construction=64,
        m=16,
        name=name,
    )


def _dims_check(name: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=models.Q(("dims", models.Func("vector", function="vector_dims", output_field=models.IntegerField()))),
        name=name,
    )


def _common_fields() -> list[tuple[str, models.Field]]:  # type: ignore[type-arg]
    return [
        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
        ("agent_id", models.BigIntegerField()),
        ("model_name", models.CharField(max_length=200)),
        ("dims", models.PositiveIntegerField()),
        ("vector", pgvector.django.vector.VectorField()),
        ("created_at", models.DateTimeField(auto_now_add=True)),
        (
            "generation",
            models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="memory.embeddinggeneration",
            ),
        ),
    ]


class Migration(migrations.Migration):
    # The chain this one squashed: a database migrated by it (before the squash) counts this one as
    # applied. Drop the list once no such database is left.
    replaces = [
        ("memory", "0013_embeddings_stored_as_pgvector_where_available"),
        ("memory", "0014_revisions_of_unknown_audience_indexed"),
        ("memory", "0015_reply_lineage_trusts_folded_revision_audiences"),
        ("memory", "0016_recall_trace_session_moment_index"),
        ("memory", "0017_entry_current_revision_rule_on_update_only"),
        ("memory", "0018_correction_authority"),
        ("memory", "0019_grants_admit_only_their_conversation"),
        ("memory", "0020_erasure_events"),
    ]

    dependencies = [
        ("memory", "0002_functions"),
    ]

    operations = [
        # The extension outlives a rollback of this app: other databases' objects may depend on it.
        migrations.RunPython(create_vector_extension, migrations.RunPython.noop),
        WhereVectorExtension(
            [
                migrations.CreateModel(
                    name="RevisionEmbedding",
                    fields=[
                        *_common_fields(),
                        (
                            "revision",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="embeddings",
                                to="memory.memoryrevision",
                            ),
                        ),
                    ],
                    options={
                        "indexes": [
                            models.Index(fields=["generation", "agent_id"], name="revision_embedding_agent"),
                            _hnsw("revision_embedding_hnsw_384"),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("revision", "generation"), name="revision_embedding_unique"
                            ),
                            _dims_check("revision_embedding_dims"),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="MessageEmbedding",
                    fields=[
                        *_common_fields(),
                        (
                            "message",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="embeddings",
                                to="history.message",
                            ),
                        ),
                    ],
                    options={
                        "indexes": [
                            models.Index(fields=["generation", "agent_id"], name="message_embedding_agent"),
                            _hnsw("message_embedding_hnsw_384"),
                        ],
                        "constraints": [
                            models.UniqueConstraint(fields=("message", "generation"), name="message_embedding_unique"),
                            _dims_check("message_embedding_dims"),
                        ],
                    },
                ),
                migrations.RunSQL(EMBEDDING_CASCADE, DROP_EMBEDDING_CASCADE),
            ],
            probe_table="memory_revisionembedding",
        ),
    ]
