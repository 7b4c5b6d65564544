"""Each reply stores the distinct audiences of the revisions it and its sources used.

The ``fold_lineage`` trigger now also folds ``lineage_revision_audiences`` (``engram_revision_audiences``,
memory/0015), which the lineage rule trusts while none of those revisions was deleted.
Replies already stored are folded here, on the one sanctioned path past the append-only guard, in the
migration that adds the column, so no reply is ever read with a fold it did not get.
"""

import pgtrigger
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FOLD_STORED_REPLIES = """
UPDATE history_message
   SET lineage_revision_audiences = engram_revision_audiences(agent_id, lineage_revision_ids || memory_revision_ids)
 WHERE direction = 'outbound'
"""


def fold_stored_replies(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    with pgtrigger.ignore("history.Message:append_only"), schema_editor.connection.cursor() as cursor:
        cursor.execute(FOLD_STORED_REPLIES)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_perspective_consistency_guards"),
        ("history", "0010_reply_lineage_folded_at_delivery"),
        ("memory", "0015_reply_lineage_trusts_folded_revision_audiences"),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(
            model_name="message",
            name="fold_lineage",
        ),
        migrations.RemoveConstraint(
            model_name="message",
            name="message_only_replies_carry_lineage",
        ),
        migrations.AddField(
            model_name="message",
            name="lineage_revision_audiences",
            field=models.JSONField(
                blank=True,
                default=list,
                editable=False,
                help_text='Distinct [kind, namespace, readers] of the revisions this reply and its sources were built from (lineage and its own); ["unknown", "", []] for a revision that was missing or not this agent\'s.',
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="message",
            trigger=pgtrigger.compiler.Trigger(
                name="fold_lineage",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="IF NEW.direction = 'outbound' THEN SELECT f.audiences, f.conversation_ids, f.revision_ids INTO NEW.lineage_audiences, NEW.lineage_conversation_ids, NEW.lineage_revision_ids FROM engram_lineage_fold(NEW.agent_id, NEW.history_message_ids, NEW.memory_revision_ids) f; NEW.lineage_revision_audiences := engram_revision_audiences(NEW.agent_id, NEW.lineage_revision_ids || NEW.memory_revision_ids); ELSE NEW.lineage_audiences := '[]'; NEW.lineage_conversation_ids := '{}'; NEW.lineage_revision_ids := '{}'; NEW.lineage_revision_audiences := '[]'; END IF; RETURN NEW;",
                    hash="152b8edb0c2bdd51f3ec05c02bef06da22b4c576",
                    operation="INSERT",
                    pgid="pgtrigger_fold_lineage_c45c6",
                    table="history_message",
                    when="BEFORE",
                ),
            ),
        ),
        migrations.RunPython(fold_stored_replies, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("direction", "outbound"),
                    models.Q(
                        ("lineage_audiences", []),
                        ("lineage_conversation_ids__len", 0),
                        ("lineage_revision_audiences", []),
                        ("lineage_revision_ids__len", 0),
                    ),
                    _connector="OR",
                ),
                name="message_only_replies_carry_lineage",
            ),
        ),
    ]
