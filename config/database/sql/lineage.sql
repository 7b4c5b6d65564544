-- version: 1
-- The destination-free half of the lineage rule (spec 003), folded into each reply as it is inserted.
--
-- The fold_lineage trigger on history_message stores on every outbound message:
--   lineage_audiences, lineage_conversation_ids, lineage_revision_ids: engram_lineage_fold, the
--     distinct audiences and conversations of the reply's ancestors and the revisions they used;
--   lineage_revision_audiences: engram_lineage_revision_audiences, the distinct audiences of those
--     revisions and the reply's own.
-- The read side (disclosure.sql, engram_reply_lineage_allows) judges these folds for a destination.
--
-- engram_lineage_fold judges only the reply's sources (present, this agent's, authenticated, at most
-- 500 history ids) and takes the rest from the sources' stored folds: an ancestor deeper than the
-- sources was judged when the reply citing it was folded, and messages and evidence are immutable. The
-- caps count distinct ancestors exactly (more than 5,000 ancestors, or ancestors plus used revisions
-- over 5,000, deny). Any missing, foreign or unauthenticated ancestor, any source of unknown lineage and
-- any overflow fold to the single audience "unknown", which no destination admits. A source reply with
-- sources but no fold (one stored before folds existed) is not trusted: the fold falls back to
-- engram_lineage_walk, the full walk over every ancestor.
--
-- Changing a function: edit this file, raise the version above, and add a migration that re-applies it
-- (docs/schema.md).

CREATE OR REPLACE FUNCTION engram_lineage_walk(
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
COMMENT ON FUNCTION engram_lineage_walk(bigint, bigint[], bigint[]) IS
    'The lineage walk over every ancestor; engram_lineage_fold falls back to it for an unfolded source (Engram)';

CREATE OR REPLACE FUNCTION engram_lineage_fold(
    p_agent bigint, p_message_ids bigint[], p_revision_ids bigint[],
    OUT audiences jsonb, OUT conversation_ids bigint[], OUT revision_ids bigint[]
)
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    source_count integer;
    denied boolean;
    unfolded boolean;
    source_ids bigint[];
    ancestors bigint[];
    frontier bigint[];
BEGIN
    p_message_ids := coalesce(p_message_ids, '{}');
    p_revision_ids := coalesce(p_revision_ids, '{}');
    IF cardinality(p_message_ids) > 500 OR array_position(p_message_ids, NULL) IS NOT NULL THEN
        audiences := '[["unknown", "", []]]';
        conversation_ids := '{}';
        revision_ids := '{}';
        RETURN;
    END IF;

    source_ids := ARRAY(SELECT DISTINCT unnest(p_message_ids));
    -- The sources, each judged; a source reply adds its stored fold (its own ancestors).
    WITH source AS MATERIALIZED (
        SELECT h.id, h.agent_id, h.conversation_id, h.history_message_ids, h.memory_revision_ids,
               h.audience_kind, h.audience_namespace, h.audience_readers,
               h.lineage_audiences, h.lineage_conversation_ids, h.lineage_revision_ids,
               EXISTS (SELECT 1 FROM history_messagesourceevidence e WHERE e.message_id = h.id) AS evidenced
        FROM history_message h
        WHERE h.id = ANY (source_ids)
    )
    SELECT count(*),
           coalesce(bool_or(
               s.agent_id <> p_agent
               OR cardinality(s.history_message_ids) > 500
               OR NOT s.evidenced
               OR s.lineage_audiences @> '[["unknown", "", []]]'), false),
           coalesce(bool_or(cardinality(s.history_message_ids) > 0 AND s.lineage_audiences = '[]'), false),
           (SELECT coalesce(jsonb_agg(DISTINCT a.audience), '[]') FROM (
                SELECT jsonb_build_array(o.audience_kind, o.audience_namespace, o.audience_readers) FROM source o
                UNION ALL
                SELECT f FROM source o CROSS JOIN LATERAL jsonb_array_elements(o.lineage_audiences) f
            ) a(audience)),
           ARRAY(SELECT o.conversation_id FROM source o
                 UNION SELECT c FROM source o CROSS JOIN LATERAL unnest(o.lineage_conversation_ids) c ORDER BY 1),
           ARRAY(SELECT r FROM source o CROSS JOIN LATERAL unnest(o.memory_revision_ids) r
                 UNION SELECT r FROM source o CROSS JOIN LATERAL unnest(o.lineage_revision_ids) r ORDER BY 1)
      INTO source_count, denied, unfolded, audiences, conversation_ids, revision_ids
      FROM source s;

    IF unfolded THEN
        SELECT w.audiences, w.conversation_ids, w.revision_ids INTO audiences, conversation_ids, revision_ids
          FROM engram_lineage_walk(p_agent, p_message_ids, p_revision_ids) w;
        RETURN;
    END IF;

    -- The distinct ancestors, counted for the caps: every source, and the sources of each reply among
    -- them, level by level through the index of replies (inbound messages have no sources).
    ancestors := source_ids;
    frontier := source_ids;
    WHILE NOT denied AND cardinality(frontier) > 0 AND cardinality(ancestors) <= 5000 LOOP
        frontier := ARRAY(
            SELECT parent FROM history_message h CROSS JOIN LATERAL unnest(h.history_message_ids) AS parent
            WHERE h.id = ANY (frontier) AND h.direction = 'outbound'
            EXCEPT
            SELECT unnest(ancestors));
        ancestors := ancestors || frontier;
    END LOOP;

    IF denied
       OR source_count <> cardinality(source_ids)
       OR cardinality(ancestors) > 5000
       OR cardinality(ancestors) + cardinality(revision_ids) + cardinality(p_revision_ids) > 5000 THEN
        audiences := '[["unknown", "", []]]';
        conversation_ids := '{}';
        revision_ids := '{}';
    END IF;
END
$$;
COMMENT ON FUNCTION engram_lineage_fold(bigint, bigint[], bigint[]) IS
    'The destination-free half of the lineage rule, folded from the sources and their stored folds (Engram)';

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

CREATE OR REPLACE FUNCTION engram_lineage_revision_audiences(
    p_agent bigint, p_message_ids bigint[], p_lineage_revision_ids bigint[], p_revision_ids bigint[]
) RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    -- No ancestor's revision was folded (none used one, or the fold is unknown): the reply's own
    -- revisions are all there is.
    IF cardinality(coalesce(p_lineage_revision_ids, '{}')) = 0 THEN
        RETURN engram_revision_audiences(p_agent, p_revision_ids);
    END IF;
    -- A source reply without a fold, or one that used revisions and folded no audiences for them, is
    -- not trusted for them: every revision is read.
    IF EXISTS (
        SELECT 1 FROM history_message s
        WHERE s.id = ANY (p_message_ids) AND s.direction = 'outbound'
          -- (the small folds are compared first: a long lineage's arrays are read only when they must be)
          AND (s.agent_id <> p_agent
               OR (s.lineage_audiences = '[]' AND cardinality(s.history_message_ids) > 0)
               OR (s.lineage_revision_audiences = '[]'
                   AND cardinality(s.memory_revision_ids) + cardinality(s.lineage_revision_ids) > 0))) THEN
        RETURN engram_revision_audiences(p_agent, p_lineage_revision_ids || p_revision_ids);
    END IF;
    RETURN (
        SELECT coalesce(jsonb_agg(DISTINCT a.audience), '[]') FROM (
            SELECT f FROM history_message s CROSS JOIN LATERAL jsonb_array_elements(s.lineage_revision_audiences) f
            WHERE s.id = ANY (p_message_ids) AND s.direction = 'outbound'
            UNION ALL
            SELECT f FROM jsonb_array_elements(engram_revision_audiences(p_agent, p_revision_ids)) f
        ) a(audience));
END
$$;
COMMENT ON FUNCTION engram_lineage_revision_audiences(bigint, bigint[], bigint[], bigint[]) IS
    'Distinct audiences of the revisions a reply and its ancestors used, from its sources'' folds (Engram lineage fold)';
