"""SQL text of ``engram_lineage_allows``, shared by the migrations that create and refine it."""

LINEAGE_ALLOWS_V1 = """
CREATE OR REPLACE FUNCTION engram_lineage_allows(
    p_agent bigint, p_message_ids bigint[], p_revision_ids bigint[],
    d_kind text, d_namespace text, d_readers bigint[], d_linked_readers bigint[] DEFAULT '{}'
) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    node_count integer;
    denied boolean;
    used_revisions bigint[];
BEGIN
    p_message_ids := coalesce(p_message_ids, '{}');
    p_revision_ids := coalesce(p_revision_ids, '{}');
    IF cardinality(p_message_ids) = 0 AND cardinality(p_revision_ids) = 0 THEN
        RETURN true;
    END IF;
    IF cardinality(p_message_ids) > 500 THEN
        RETURN false;
    END IF;

    WITH RECURSIVE walk(id, depth) AS (
        SELECT unnest(p_message_ids), 1
        UNION
        SELECT parent, w.depth + 1
        FROM walk w
        JOIN history_message m ON m.id = w.id
        CROSS JOIN LATERAL unnest(m.history_message_ids) AS parent
        WHERE w.depth < 64
    ),
    nodes AS (SELECT DISTINCT id FROM walk LIMIT 5001)
    SELECT count(DISTINCT n.id),
           coalesce(bool_or(
               m.id IS NULL
               OR m.agent_id <> p_agent
               OR cardinality(m.history_message_ids) > 500
               OR NOT EXISTS (SELECT 1 FROM history_messagesourceevidence e WHERE e.message_id = m.id)
               OR NOT engram_audience_allows(m.audience_kind, m.audience_namespace, m.audience_readers,
                                             d_kind, d_namespace, d_readers, d_linked_readers)), false),
           array_agg(DISTINCT r) FILTER (WHERE r IS NOT NULL)
      INTO node_count, denied, used_revisions
      FROM nodes n
      LEFT JOIN history_message m ON m.id = n.id
      LEFT JOIN LATERAL unnest(m.memory_revision_ids) AS r ON true;

    IF denied OR node_count > 5000 THEN
        RETURN false;
    END IF;
    used_revisions := coalesce(used_revisions, '{}') || p_revision_ids;
    IF node_count + cardinality(used_revisions) > 5000 THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (
        SELECT 1
        FROM unnest(used_revisions) AS rid
        LEFT JOIN memory_memoryrevision r ON r.id = rid AND r.agent_id = p_agent
        WHERE r.id IS NULL
           OR NOT (
               engram_audience_allows(r.audience_kind, r.audience_namespace, r.audience_readers,
                                      d_kind, d_namespace, d_readers, d_linked_readers)
               OR EXISTS (
                   SELECT 1 FROM memory_sharinggrant g
                   WHERE g.revision_id = r.id AND g.agent_id = p_agent AND g.revoked_at IS NULL
                     AND engram_audience_allows(g.audience_kind, g.audience_namespace, g.audience_readers,
                                                d_kind, d_namespace, d_readers, d_linked_readers))));
END
$$;
"""

#: Version 3: the walk visits each ancestor once. Messages reference only messages that existed before
#: them, so provenance is acyclic; keying the walk on the id alone (UNION drops repeats) bounds it by
#: the number of distinct ancestors, where (id, depth) pairs grew with every path through the history.
#: The node cap is read lazily: the walk stops once 5,001 ancestors have been pulled.
LINEAGE_WALK_V2 = """
    WITH RECURSIVE walk(id) AS (
        SELECT unnest(p_message_ids)
        UNION
        SELECT parent
        FROM walk w
        JOIN history_message m ON m.id = w.id
        CROSS JOIN LATERAL unnest(m.history_message_ids) AS parent
    ),
    nodes AS (SELECT id FROM walk LIMIT 5001)"""

#: Version 2: a grant never vouches for a revision of unknown or mixed ("nobody") provenance.
LINEAGE_ALLOWS_V2 = LINEAGE_ALLOWS_V1.replace(
    "WHERE g.revision_id = r.id AND g.agent_id = p_agent AND g.revoked_at IS NULL",
    "WHERE g.revision_id = r.id AND g.agent_id = p_agent AND g.revoked_at IS NULL"
    " AND r.audience_kind NOT IN ('unknown', 'nobody')",
)
assert LINEAGE_ALLOWS_V2 != LINEAGE_ALLOWS_V1

_WALK_V1 = """
    WITH RECURSIVE walk(id, depth) AS (
        SELECT unnest(p_message_ids), 1
        UNION
        SELECT parent, w.depth + 1
        FROM walk w
        JOIN history_message m ON m.id = w.id
        CROSS JOIN LATERAL unnest(m.history_message_ids) AS parent
        WHERE w.depth < 64
    ),
    nodes AS (SELECT DISTINCT id FROM walk LIMIT 5001)"""
assert _WALK_V1 in LINEAGE_ALLOWS_V2
LINEAGE_ALLOWS_V3 = LINEAGE_ALLOWS_V2.replace(_WALK_V1, LINEAGE_WALK_V2)
