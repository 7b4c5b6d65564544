"""A session's snapshot trace is found by (session, moment), not among every trace of the session.

A turn start (its correction lines) and a reply (what the turn was shown) each look up the session's
snapshot trace; with only the session's own index they read every trace of the session, two a turn,
so the lookup grew with the session. The composite index is built first, without blocking writes to
the trace table, and then the session's single-column index (which it covers) is dropped.
"""

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("history", "0012_reply_lineage_folds_from_its_sources"),
        ("memory", "0015_reply_lineage_trusts_folded_revision_audiences"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="recalltrace",
            index=models.Index(fields=["session", "moment"], name="trace_session_moment"),
        ),
        migrations.AlterField(
            model_name="recalltrace",
            name="session",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="traces",
                to="history.session",
            ),
        ),
    ]
