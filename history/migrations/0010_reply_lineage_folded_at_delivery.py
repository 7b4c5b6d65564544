"""A reply's lineage is walked once, when the reply is inserted, and stored with it.

``engram_lineage_fold(agent, history_message_ids, memory_revision_ids)`` is the destination-free half
of the lineage rule (spec 003; it was the first half of ``engram_lineage_allows``): the recursive walk
over the reply's provenance, each ancestor visited once, with the same hard caps (more than 500 history
ids on any node, more than 5,000 ancestors, or ancestors plus used revisions over 5,000 deny). It
returns the distinct audiences of the ancestors, their conversations and the revisions they used; any
missing, foreign or unauthenticated ancestor, and any overflow, folds to the single audience
``unknown``, which no destination admits. The ``fold_lineage`` trigger stores the result on every
outbound message (whatever the writer sent is replaced). Replies already stored are folded here, by
the same function, on the one sanctioned path past the append-only guard.
"""

import django.contrib.postgres.fields
import pgtrigger.compiler
import pgtrigger.migrations
import pgtrigger
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

LINEAGE_FOLD = """
CREATE OR REPLACE FUNCTION engram_lineage_fold(
    p_agent bigint, p_message_ids bigint[], p_revision_ids bigint[],
    OUT audiences jsonb, OUT conversation_ids bigint[], OUT revision_ids bigint[]
)
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    node_count integer;
    denied boolean;
BEGIN
    p_message_ids := coalesce(p_message_ids, '{}');
    p_revision_ids := coalesce(p_revision_ids, '{}');
    IF cardinality(p_message_ids) > 500 THEN
        audiences := '[["unknown", "", []]]';
        conversation_ids := '{}';
        revision_ids := '{}';
        RETURN;
    END IF;

    -- Keyed on the id alone: provenance points only at earlier messages, so it is acyclic and each
    -- ancestor is visited once; the walk stops as soon as 5,001 ancestors have been pulled.
    WITH RECURSIVE walk(id) AS (
        SELECT unnest(p_message_ids)
        UNION
        SELECT parent
        FROM walk w
        JOIN history_message m ON m.id = w.id
        CROSS JOIN LATERAL unnest(m.history_message_ids) AS parent
    ),
    nodes AS (SELECT id FROM walk LIMIT 5001),
    -- One index probe per ancestor (OFFSET 0 keeps the lookup a parameterised probe): the walk's
    -- row estimate is a guess, and a guess of thousands would otherwise plan a scan of the table.
    found AS MATERIALIZED (
        SELECT n.id AS node_id, m.*
        FROM nodes n
        LEFT JOIN LATERAL (
            SELECT h.id, h.agent_id, h.conversation_id, h.history_message_ids, h.memory_revision_ids,
                   h.audience_kind, h.audience_namespace, h.audience_readers,
                   EXISTS (SELECT 1 FROM history_messagesourceevidence e WHERE e.message_id = h.id) AS evidenced
            FROM history_message h
            WHERE h.id = n.id
            OFFSET 0
        ) m ON true
    )
    SELECT count(*),
           coalesce(bool_or(
               f.id IS NULL
               OR f.agent_id <> p_agent
               OR cardinality(f.history_message_ids) > 500
               OR NOT f.evidenced), false),
           coalesce(jsonb_agg(DISTINCT jsonb_build_array(f.audience_kind, f.audience_namespace, f.audience_readers))
                    FILTER (WHERE f.id IS NOT NULL), '[]'),
           coalesce(array_agg(DISTINCT f.conversation_id ORDER BY f.conversation_id)
                    FILTER (WHERE f.id IS NOT NULL), '{}'),
           coalesce((SELECT array_agg(DISTINCT r ORDER BY r)
                     FROM found u
                     CROSS JOIN LATERAL unnest(u.memory_revision_ids) AS r), '{}')
      INTO node_count, denied, audiences, conversation_ids, revision_ids
      FROM found f;

    IF denied OR node_count > 5000 OR node_count + cardinality(revision_ids) + cardinality(p_revision_ids) > 5000 THEN
        audiences := '[["unknown", "", []]]';
        conversation_ids := '{}';
        revision_ids := '{}';
    END IF;
END
$$;
COMMENT ON FUNCTION engram_lineage_fold(bigint, bigint[], bigint[]) IS
    'The destination-free half of the lineage rule, stored on each reply by the fold_lineage trigger (Engram)';
"""

DROP_LINEAGE_FOLD = "DROP FUNCTION IF EXISTS engram_lineage_fold(bigint, bigint[], bigint[]);"

FOLD_STORED_REPLIES = """
UPDATE history_message m
   SET (lineage_audiences, lineage_conversation_ids, lineage_revision_ids) =
       (SELECT f.audiences, f.conversation_ids, f.revision_ids
          FROM engram_lineage_fold(m.agent_id, m.history_message_ids, m.memory_revision_ids) f)
 WHERE m.direction = 'outbound'
"""


def fold_stored_replies(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    with pgtrigger.ignore("history.Message:append_only"), schema_editor.connection.cursor() as cursor:
        cursor.execute(FOLD_STORED_REPLIES)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_perspective_consistency_guards"),
        ("history", "0009_search_any_of_several_agents"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="lineage_audiences",
            field=models.JSONField(
                blank=True,
                default=list,
                editable=False,
                help_text='Distinct [kind, namespace, readers] of every message this reply was built from, transitively; ["unknown", "", []] when a source was missing, foreign, unauthenticated or past the caps.',
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="lineage_conversation_ids",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.BigIntegerField(),
                blank=True,
                default=list,
                editable=False,
                help_text="Conversations those messages belong to: deleting one withholds this reply everywhere.",
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="lineage_revision_ids",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.BigIntegerField(),
                blank=True,
                default=list,
                editable=False,
                help_text="Memory revisions those messages were built from, checked (with live grants) at every read.",
                size=None,
            ),
        ),
        migrations.RunSQL(LINEAGE_FOLD, DROP_LINEAGE_FOLD),
        pgtrigger.migrations.AddTrigger(
            model_name="message",
            trigger=pgtrigger.compiler.Trigger(
                name="fold_lineage",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="IF NEW.direction = 'outbound' THEN SELECT f.audiences, f.conversation_ids, f.revision_ids INTO NEW.lineage_audiences, NEW.lineage_conversation_ids, NEW.lineage_revision_ids FROM engram_lineage_fold(NEW.agent_id, NEW.history_message_ids, NEW.memory_revision_ids) f; ELSE NEW.lineage_audiences := '[]'; NEW.lineage_conversation_ids := '{}'; NEW.lineage_revision_ids := '{}'; END IF; RETURN NEW;",
                    hash="3ccd3c5afeb45d48d24a353f0e1df55eaf049b04",
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
                        ("lineage_revision_ids__len", 0),
                    ),
                    _connector="OR",
                ),
                name="message_only_replies_carry_lineage",
            ),
        ),
    ]
