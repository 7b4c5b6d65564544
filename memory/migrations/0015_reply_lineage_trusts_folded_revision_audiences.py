"""A reply's lineage check trusts the folded audiences of its revisions while none was deleted.

Judging a reply read every revision it and its ancestors used (``engram_revisions_disclosable``): one
probe, audience check and possibly grant lookup per revision, hundreds to thousands for a reply late
in a long conversation, at every read of that reply. Revisions never change, so their audiences are
now folded with the reply when it is stored (``engram_revision_audiences``, history/0011), and the
lineage rule (``engram_reply_lineage_allows``) reads that fold:

- when every folded revision audience admits the destination, and none of the reply's revisions has
  been deleted since (``memory_deletedrevision``, written by the revisions' ``record_deletion``
  trigger in the deleting transaction), the revisions are disclosable without looking at each; a
  fold that is empty for a reply that has revisions is never trusted;
- otherwise each revision is judged as before, with its live grants.

Both paths agree: a folded audience is the audience of that very revision (immutable, and ``unknown``
for one that was missing or another agent's when the reply was stored), so every revision admitted by
the fold would be admitted by the per-revision check, which is the only one that can also admit a
revision by grant or deny one that is gone.

``engram_reply_lineage_allows`` is rewritten in PL/pgSQL with that fast path. Judging the 210 replies
of a ``bench_turn`` corpus for three destinations, the previous SQL function took 149-220 µs a reply
and this one 49-56 µs, with the same verdicts. The same rule written into each statement instead was
about as fast per reply, but it added planning wherever the eligible set appears in a statement.
"""

import pgtrigger.compiler
import pgtrigger.migrations
import importlib

import django.db.models.deletion
from django.db import migrations, models

# The function this one replaces, restored when the migration is reversed.
reads_the_fold = importlib.import_module("memory.migrations.0012_reply_lineage_reads_the_fold")


REVISION_AUDIENCES = """
CREATE OR REPLACE FUNCTION engram_revision_audiences(p_agent bigint, p_revision_ids bigint[]) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_agg(DISTINCT CASE
               WHEN r.id IS NULL THEN '["unknown", "", []]'::jsonb
               ELSE jsonb_build_array(r.audience_kind, r.audience_namespace, r.audience_readers)
           END), '[]')
    FROM unnest(coalesce(p_revision_ids, '{}')) AS rid
    LEFT JOIN memory_memoryrevision r ON r.id = rid AND r.agent_id = p_agent
$$;
COMMENT ON FUNCTION engram_revision_audiences(bigint, bigint[]) IS
    'Distinct [kind, namespace, readers] of these revisions; unknown for a missing or foreign one (Engram lineage fold)';
"""

#: One call per judged reply. PL/pgSQL rather than SQL: a SQL function with subqueries cannot be
#: inlined, and running its body as a query at every call cost about three times as much. The audience
#: checks are plain expressions (a fold's readers are a JSON array of integers, read as ``bigint[]``
#: by turning its brackets into braces), so only the existence checks are queries.
REPLY_LINEAGE_ALLOWS = """
DROP FUNCTION IF EXISTS engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], text, text, bigint[], bigint[]);
CREATE FUNCTION engram_reply_lineage_allows(
    p_agent bigint, p_audiences jsonb, p_conversation_ids bigint[], p_revision_ids bigint[],
    p_revision_audiences jsonb,
    d_kind text, d_namespace text, d_readers bigint[], d_linked_readers bigint[] DEFAULT '{}'
) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    audience jsonb;
BEGIN
    IF p_audiences IS NULL OR p_conversation_ids IS NULL OR p_revision_ids IS NULL THEN
        RETURN false;
    END IF;
    -- Every audience the reply's ancestors were posted under admits the destination.
    FOR i IN 0 .. jsonb_array_length(p_audiences) - 1 LOOP
        audience := p_audiences->i;
        IF NOT engram_audience_allows(audience->>0, audience->>1, translate(audience->>2, '[]', '{}')::bigint[],
                                      d_kind, d_namespace, d_readers, d_linked_readers) THEN
            RETURN false;
        END IF;
    END LOOP;
    -- Every conversation they came from still exists.
    IF (SELECT count(*) FROM history_conversation c WHERE c.id = ANY (p_conversation_ids))
       <> cardinality(p_conversation_ids) THEN
        RETURN false;
    END IF;
    IF cardinality(p_revision_ids) = 0 THEN
        RETURN true;
    END IF;
    -- Every revision used is admitted: by the folded audiences while none of the revisions was deleted
    -- since (an empty fold beside revision ids is never trusted) ...
    IF jsonb_array_length(coalesce(p_revision_audiences, '[]')) > 0
       AND NOT EXISTS (SELECT 1 FROM memory_deletedrevision t
                       WHERE t.agent_id = p_agent AND t.revision_id = ANY (p_revision_ids)) THEN
        FOR i IN 0 .. jsonb_array_length(p_revision_audiences) - 1 LOOP
            audience := p_revision_audiences->i;
            IF NOT engram_audience_allows(audience->>0, audience->>1, translate(audience->>2, '[]', '{}')::bigint[],
                                          d_kind, d_namespace, d_readers, d_linked_readers) THEN
                -- ... and where an audience falls short, one by one, with their live grants.
                RETURN engram_revisions_disclosable(p_agent, p_revision_ids, d_kind, d_namespace, d_readers, d_linked_readers);
            END IF;
        END LOOP;
        RETURN true;
    END IF;
    RETURN engram_revisions_disclosable(p_agent, p_revision_ids, d_kind, d_namespace, d_readers, d_linked_readers);
END
$$;
COMMENT ON FUNCTION engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], jsonb, text, text, bigint[], bigint[]) IS
    'May an agent reply with this folded lineage be disclosed to destination d_*? (Engram lineage rule)';
"""

RESTORE_REPLY_LINEAGE_ALLOWS = (
    "DROP FUNCTION IF EXISTS engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], jsonb, text, text, bigint[], bigint[]);"
    + reads_the_fold.REPLY_LINEAGE_ALLOWS
)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_perspective_consistency_guards"),
        ("memory", "0014_revisions_of_unknown_audience_indexed"),
    ]

    operations = [
        migrations.CreateModel(
            name="DeletedRevision",
            fields=[
                ("revision_id", models.BigIntegerField(primary_key=True, serialize=False)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="+", to="accounts.runtimeagent"
                    ),
                ),
                ("deleted_at", models.DateTimeField()),
            ],
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="memoryrevision",
            trigger=pgtrigger.compiler.Trigger(
                name="record_deletion",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="INSERT INTO memory_deletedrevision (revision_id, agent_id, deleted_at) VALUES (OLD.id, OLD.agent_id, now()) ON CONFLICT DO NOTHING; RETURN NULL;",
                    hash="c2ca28cbf8477f61c15661f05ec3dfea06cde2ba",
                    operation="DELETE",
                    pgid="pgtrigger_record_deletion_a9bc0",
                    table="memory_memoryrevision",
                    when="AFTER",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="deletedrevision",
            trigger=pgtrigger.compiler.Trigger(
                name="append_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;",
                    hash="3c6b69fbbcfddfccfd4ab72255251286cd57b9c1",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_append_only_39205",
                    table="memory_deletedrevision",
                    when="BEFORE",
                ),
            ),
        ),
        migrations.RunSQL(REVISION_AUDIENCES, "DROP FUNCTION IF EXISTS engram_revision_audiences(bigint, bigint[]);"),
        migrations.RunSQL(REPLY_LINEAGE_ALLOWS, RESTORE_REPLY_LINEAGE_ALLOWS),
    ]
