-- version: 1
-- The disclosure rule (spec 003): may text whose source audience is o_* be shown to destination d_*?
--
-- engram_audience_allows is the only implementation of the audience rule that production reads use;
-- history.audience.audience_allows mirrors it as a test oracle. It is a pure, IMMUTABLE SQL function so
-- that the planner can inline it into every eligibility query.
--
-- Changing it: edit this file, raise the version above, and add a migration that re-applies it
-- (docs/schema.md).

CREATE OR REPLACE FUNCTION engram_audience_allows(
    o_kind text, o_namespace text, o_readers bigint[],
    d_kind text, d_namespace text, d_readers bigint[],
    d_linked_readers bigint[] DEFAULT '{}'
) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(
        d_kind IN ('public', 'workspace', 'members', 'external')
        AND CASE o_kind
            WHEN 'public' THEN true
            WHEN 'workspace' THEN d_kind IN ('workspace', 'members') AND d_namespace = o_namespace
            WHEN 'members' THEN d_kind = 'members' AND cardinality(d_readers) > 0 AND (
                (d_namespace = o_namespace AND d_readers <@ o_readers)
                -- a verified identity link lets single-reader evidence follow the same person
                -- into their other direct conversation, and nowhere else
                OR (cardinality(o_readers) = 1 AND cardinality(d_readers) = 1
                    AND o_readers[1] = ANY (d_linked_readers)))
            WHEN 'external' THEN d_kind = 'external' AND d_namespace = o_namespace
                AND cardinality(d_readers) > 0 AND d_readers <@ o_readers
            ELSE false  -- unknown and nobody reach nothing
        END,
        false)
$$;
COMMENT ON FUNCTION engram_audience_allows(text, text, bigint[], text, text, bigint[], bigint[]) IS
    'May text whose source audience is o_* be disclosed to destination audience d_*? (Engram disclosure rule)';
