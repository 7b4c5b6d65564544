-- version: 1
-- The lineage rule's read side and the disclosure of revisions through sharing grants (spec 003).
--
-- engram_revisions_disclosable(agent, revisions, destination..., d_conversation): every revision is
-- this agent's and either its audience may be disclosed to the destination or a live grant admits it,
-- and a grant admits its revision only in the conversation it was approved for and only while that
-- conversation's audience stays within the one consented to. Revisions of unknown or nobody's audience
-- are never rescued by a grant.
--
-- engram_reply_lineage_allows(agent, folds..., destination..., d_conversation): may a reply, judged by
-- the lineage folded into it (lineage.sql), be read at the destination? Every ancestor's audience must
-- admit it, every ancestor's conversation must still exist, and every revision the lineage used must be
-- disclosable there (from the folded revision audiences where they admit it and no revision was deleted
-- since, otherwise revision by revision with the live grants into this conversation).
--
-- Changing a function: edit this file, raise the version above, and add a migration that re-applies it
-- (docs/schema.md).

CREATE OR REPLACE FUNCTION engram_revisions_disclosable(
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

CREATE OR REPLACE FUNCTION engram_reply_lineage_allows(
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
