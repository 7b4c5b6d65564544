"""An (actor, conversation) index replaces the plain actor index: "did the requester speak in these
conversations" becomes one probe per conversation. The new index is built before the old one goes."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_perspective_consistency_guards"),
        ("history", "0007_agent_qualified_search_terms"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="message",
            index=models.Index(fields=["actor", "conversation"], name="message_actor_conversation"),
        ),
        migrations.AlterField(
            model_name="message",
            name="actor",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="messages",
                to="accounts.actor",
            ),
        ),
    ]
