"""A sharing grant admits its revision only in the conversation it was approved for.

A grant used to be read as "wherever its audience class may be disclosed": a direct message shared
into one public channel was then recallable from every public, workspace and direct conversation of
the agent, and a reply built on it could be read in all of them. Consent was given for one named
conversation (spec 000: revision-scoped sharing grants, created only by the source actor's
confirmation or an operator's review; spec 003: the disclosure rule is never loosened), so a grant now
carries that conversation (``memory_sharinggrant.conversation_id``, backfilled from its request) and
admits the revision only when the destination is that conversation and its audience is still within
the one consented to (``engram_audience_allows(grant audience, destination)``). A grant without a
conversation admits nothing.

The two SQL functions that read grants for replies take the destination conversation as a new last
argument, with no default, so no caller can leave it out:

- ``engram_revisions_disclosable(agent, revision ids, destination..., d_conversation)``;
- ``engram_reply_lineage_allows(agent, folds..., destination..., d_conversation)``, which passes it on
  where a folded revision audience falls short (otherwise unchanged from memory/0015).

So a reply that used a granted revision is readable (history search, its neighbours, the pre-delivery
recheck) only in the conversation the grant covers, as the revision itself is.
"""

import importlib

import django.db.models.deletion
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models

# The functions these replace, restored when the migration is reversed.
reads_the_fold = importlib.import_module("memory.migrations.0012_reply_lineage_reads_the_fold")
trusts_the_fold = importlib.import_module("memory.migrations.0015_reply_lineage_trusts_folded_revision_audiences")

#: Every grant was made from a request, whose target is the conversation it was approved for. The
#: revoke-only guard is off for this one statement (it is dropped above and recreated below).
BACKFILL = """
UPDATE memory_sharinggrant g SET conversation_id = r.conversation_id
  FROM memory_sharingrequest r
 WHERE r.id = g.request_id AND g.conversation_id IS NULL
"""

DROP_PREVIOUS = """
DROP FUNCTION IF EXISTS engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], jsonb, text, text, bigint[], bigint[]);
DROP FUNCTION IF EXISTS engram_revisions_disclosable(bigint, bigint[], text, text, bigint[], bigint[]);
"""

REVISIONS_DISCLOSABLE = """
CREATE FUNCTION engram_revisions_disclosable(
    p_agent bigint, p_revision_ids bigint[],
    d_kind text, d_namespace text, d_readers bigint[], d_linked_readers bigint[], d_conversation bigint
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT NOT EXISTS (
        SELECT 1
        FROM unnest(coalesce(p_revision_ids, '{}')) AS rid
        LEFT JOIN memory_memoryrevision r ON r.id = rid AND r.agent_id = p_agent
        WHERE r.id IS NULL
           OR NOT (
               engram_audience_allows(r.audience_kind, r.audience_namespace, r.audience_readers,
                                      d_kind, d_namespace, d_readers, d_linked_readers)
               OR EXISTS (
                   SELECT 1 FROM memory_sharinggrant g
                   WHERE g.revision_id = r.id AND g.agent_id = p_agent AND g.revoked_at IS NULL
                     AND r.audience_kind NOT IN ('unknown', 'nobody')
                     -- the conversation it was approved for, and only while its audience stays within
                     -- the one consented to
                     AND g.conversation_id = d_conversation
                     AND engram_audience_allows(g.audience_kind, g.audience_namespace, g.audience_readers,
                                                d_kind, d_namespace, d_readers, d_linked_readers))))
$$;
COMMENT ON FUNCTION engram_revisions_disclosable(bigint, bigint[], text, text, bigint[], bigint[], bigint) IS
    'May text built on these memory revisions be disclosed in conversation d_conversation of audience d_*? (Engram disclosure rule)';
"""

#: memory/0015's function with the destination conversation passed on to the per-revision check.
REPLY_LINEAGE_ALLOWS = """
CREATE FUNCTION engram_reply_lineage_allows(
    p_agent bigint, p_audiences jsonb, p_conversation_ids bigint[], p_revision_ids bigint[],
    p_revision_audiences jsonb,
    d_kind text, d_namespace text, d_readers bigint[], d_linked_readers bigint[], d_conversation bigint
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
                -- ... and where an audience falls short, one by one, with the live grants into this conversation.
                RETURN engram_revisions_disclosable(
                    p_agent, p_revision_ids, d_kind, d_namespace, d_readers, d_linked_readers, d_conversation);
            END IF;
        END LOOP;
        RETURN true;
    END IF;
    RETURN engram_revisions_disclosable(
        p_agent, p_revision_ids, d_kind, d_namespace, d_readers, d_linked_readers, d_conversation);
END
$$;
COMMENT ON FUNCTION engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], jsonb, text, text, bigint[], bigint[], bigint) IS
    'May an agent reply with this folded lineage be disclosed in conversation d_conversation of audience d_*? (Engram lineage rule)';
"""

FUNCTIONS = DROP_PREVIOUS + REVISIONS_DISCLOSABLE + REPLY_LINEAGE_ALLOWS

RESTORE_FUNCTIONS = (
    "DROP FUNCTION IF EXISTS engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], jsonb, text, text, bigint[], bigint[], bigint);"
    "DROP FUNCTION IF EXISTS engram_revisions_disclosable(bigint, bigint[], text, text, bigint[], bigint[], bigint);"
    + reads_the_fold.REVISIONS_DISCLOSABLE
    + trusts_the_fold.REPLY_LINEAGE_ALLOWS
)


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0013_reply_revision_audiences_fold_from_sources"),
        ("memory", "0018_correction_authority"),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(
            model_name="sharinggrant",
            name="revoke_only",
        ),
        migrations.AddField(
            model_name="sharinggrant",
            name="conversation",
            field=models.ForeignKey(
                blank=True,
                help_text="The one conversation this grant admits the revision in (its request's target).",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="history.conversation",
            ),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        pgtrigger.migrations.AddTrigger(
            model_name="sharinggrant",
            trigger=pgtrigger.compiler.Trigger(
                name="revoke_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    condition="WHEN (OLD.revoked_at IS NOT NULL OR NEW.revoked_at IS NULL OR (OLD.id, OLD.agent_id, OLD.revision_id, OLD.request_id, OLD.conversation_id, OLD.granted_by_actor_id, OLD.granted_by_user_id, OLD.audience_kind, OLD.audience_namespace, OLD.audience_readers, OLD.created_at) IS DISTINCT FROM (NEW.id, NEW.agent_id, NEW.revision_id, NEW.request_id, NEW.conversation_id, NEW.granted_by_actor_id, NEW.granted_by_user_id, NEW.audience_kind, NEW.audience_namespace, NEW.audience_readers, NEW.created_at))",
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update rows from % table', TG_TABLE_NAME;",
                    hash="b60d640a7d114042628c79af8a94fa56e486e0c3",
                    operation="UPDATE",
                    pgid="pgtrigger_revoke_only_8e2a4",
                    table="memory_sharinggrant",
                    when="BEFORE",
                ),
            ),
        ),
        migrations.RunSQL(FUNCTIONS, RESTORE_FUNCTIONS),
    ]
