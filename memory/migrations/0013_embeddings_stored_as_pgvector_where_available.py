"""The embedding tables, with pgvector's ``vector`` column and cosine HNSW indexes, where the server has pgvector.

On a server without the extension (a stock PostgreSQL 15) the tables are not created at all and
Engram runs lexical-only (``memory.embeddings.index.vectors_stored``): a ``vector`` column cannot be
declared there, and an array stand-in cost a conversion for every distance computed. The models are
in the migration state either way (:class:`memory.migrations._vector.WhereVectorExtension`).

The column has no fixed size (each generation's model has its own); the HNSW indexes are declared on
the models, over ``vector::vector(384)`` for the rows of 384 dimensions, which is exactly the
expression the searches order by. The tables are empty when they are created, so the indexes are
built at once, not concurrently. Keys to revisions, messages and generations cascade in the
database and are not declared to Django (see the models).
"""

import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.functions.comparison
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models

from memory.migrations._vector import WhereVectorExtension

CASCADING_KEYS = [
    ("memory_revisionembedding", "revision_id", "memory_memoryrevision"),
    ("memory_revisionembedding", "generation_id", "memory_embeddinggeneration"),
    ("memory_messageembedding", "message_id", "history_message"),
    ("memory_messageembedding", "generation_id", "memory_embeddinggeneration"),
]


def _key_name(table: str, column: str) -> str:
    return f"{table.removeprefix('memory_')}_{column}_fk"


CASCADE_SQL = "".join(
    f"ALTER TABLE {table} ADD CONSTRAINT {_key_name(table, column)}"
    f" FOREIGN KEY ({column}) REFERENCES {target} (id) ON DELETE CASCADE;"
    for table, column, target in CASCADING_KEYS
)
DROP_CASCADE_SQL = "".join(
    f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {_key_name(table, column)};"
    for table, column, _ in CASCADING_KEYS
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
    dependencies = [
        ("memory", "0012_reply_lineage_reads_the_fold"),
    ]

    operations = [
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
                migrations.RunSQL(CASCADE_SQL, DROP_CASCADE_SQL),
            ],
            probe_table="memory_revisionembedding",
        ),
    ]
