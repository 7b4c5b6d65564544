"""The lineage rule reads the fold stored with each reply instead of walking its provenance.

``engram_reply_lineage_allows(agent, audiences, conversation_ids, revision_ids, destination...)`` is
the destination half of the lineage rule; the walk itself ran when the reply was inserted
(``engram_lineage_fold``, history/0010). A reply may be disclosed to a destination only if every
audience its ancestors were posted under admits the destination (``unknown`` admits none), every
conversation they came from still exists (a conversation deleted on request withholds every reply
built on it, as a missing ancestor did in the walk), and every revision the reply or its ancestors
used is still this agent's and admitted, by its own audience or by a live grant that is not vouching
for unknown or mixed provenance (``engram_revisions_disclosable``).

It replaces ``engram_lineage_allows``, whose walk ran at every read of every reply.
"""

from django.db import migrations

from memory.migrations import _lineage_sql

REVISIONS_DISCLOSABLE = """
CREATE OR REPLACE FUNCTION engram_revisions_disclosable(
    p_agent bigint, p_revision_ids bigint[],
    d_kind text, d_namespace text, d_readers bigint[], d_linked_readers bigint[] DEFAULT '{}'
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
                     AND engram_audience_allows(g.audience_kind, g.audience_namespace, g.audience_readers,
                                                d_kind, d_namespace, d_readers, d_linked_readers))))
$$;
COMMENT ON FUNCTION engram_revisions_disclosable(bigint, bigint[], text, text, bigint[], bigint[]) IS
    'May text built on these memory revisions be disclosed to destination d_*? (Engram disclosure rule)';
"""

REPLY_LINEAGE_ALLOWS = """
CREATE OR REPLACE FUNCTION engram_reply_lineage_allows(
    p_agent bigint, p_audiences jsonb, p_conversation_ids bigint[], p_revision_ids bigint[],
    d_kind text, d_namespace text, d_readers bigint[], d_linked_readers bigint[] DEFAULT '{}'
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT NOT EXISTS (
               SELECT 1 FROM jsonb_array_elements(coalesce(p_audiences, '[]')) AS a
               WHERE NOT engram_audience_allows(
                   a->>0, a->>1, ARRAY(SELECT jsonb_array_elements_text(a->2)::bigint),
                   d_kind, d_namespace, d_readers, d_linked_readers))
       AND (SELECT count(*) FROM history_conversation c WHERE c.id = ANY (p_conversation_ids))
           = cardinality(coalesce(p_conversation_ids, '{}'))
       AND engram_revisions_disclosable(p_agent, p_revision_ids, d_kind, d_namespace, d_readers, d_linked_readers)
$$;
COMMENT ON FUNCTION engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], text, text, bigint[], bigint[]) IS
    'May an agent reply with this folded lineage be disclosed to destination d_*? (Engram lineage rule)';
"""

DROP_NEW = """
DROP FUNCTION IF EXISTS engram_reply_lineage_allows(bigint, jsonb, bigint[], bigint[], text, text, bigint[], bigint[]);
DROP FUNCTION IF EXISTS engram_revisions_disclosable(bigint, bigint[], text, text, bigint[], bigint[]);
"""

DROP_WALK = (
    "DROP FUNCTION IF EXISTS engram_lineage_allows(bigint, bigint[], bigint[], text, text, bigint[], bigint[]);"
)


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0011_agent_qualified_search_terms"),
        ("history", "0010_reply_lineage_folded_at_delivery"),
    ]

    operations = [
        migrations.RunSQL(REVISIONS_DISCLOSABLE + REPLY_LINEAGE_ALLOWS, DROP_NEW),
        migrations.RunSQL(DROP_WALK, _lineage_sql.LINEAGE_ALLOWS_V3),
    ]
