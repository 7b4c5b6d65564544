-- version: 1
-- What a search document and a search query are, shared by every sidecar and reader.
--
-- engram_search_document(body): the English tsvector of the text plus its negation words (not, no,
-- never, ...), which the English configuration would drop as stopwords: "does not like coffee" must not
-- read the same as "likes coffee".
--
-- engram_search_query(text): the query's English terms OR'd (plainto_tsquery with its top-level & made
-- |) and its negation words. Function words vanish, so a query of only function words matches nothing.
-- Input is never parsed as tsquery syntax, so metacharacters are inert.
--
-- engram_agent_lexemes(agent, tsv) prefixes every lexeme with its agent ("7:coffe"); the sidecars' GIN
-- indexes are over it, so each agent has its own posting lists. engram_agent_search_query(agent, text)
-- is engram_search_query(text) with the same prefix on every operand (rewritten inside their quotes, so
-- tsquery escaping is kept), and engram_agents_search_query(agents, text) the same for any of several
-- agents. Lexemes over 2,000 bytes (room for the prefix under PostgreSQL's 2,047-byte limit) are left
-- out on both sides.
--
-- The sidecar indexes are built over engram_agent_lexemes: a change to it must rebuild them (REINDEX).
-- Changing a function: edit this file, raise the version above, and add a migration that re-applies it
-- (docs/schema.md).

CREATE OR REPLACE FUNCTION engram_search_document(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('english', coalesce(body, ''))
        || to_tsvector('simple', coalesce((
            SELECT string_agg(m[1], ' ')
            FROM regexp_matches(lower(coalesce(body, '')), '\m(not|no|never|nor|without|cannot)\M', 'g') AS m), ''))
$$;

CREATE OR REPLACE FUNCTION engram_search_query(query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(concat_ws(' | ',
        nullif(replace(plainto_tsquery('english', coalesce(query, ''))::text, ' & ', ' | '), ''),
        (SELECT string_agg(DISTINCT quote_literal(m[1]), ' | ')
         FROM regexp_matches(lower(coalesce(query, '')), '\m(not|no|never|nor|without|cannot)\M', 'g') AS m)
    ), '')::tsquery
$$;

CREATE OR REPLACE FUNCTION engram_agent_lexemes(agent bigint, doc tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT array_to_tsvector(coalesce(array_agg(agent::text || ':' || t.lexeme), '{}'))
    FROM unnest(doc) AS t
    WHERE octet_length(t.lexeme) <= 2000
$$;

CREATE OR REPLACE FUNCTION engram_agent_search_query(agent bigint, query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(string_agg('''' || agent::text || ':' || m[1] || '''', ' | '), '')::tsquery
    FROM regexp_matches(coalesce(engram_search_query(query)::text, ''), '''((?:[^'']|'''')*)''', 'g') AS m
    WHERE octet_length(m[1]) <= 2000
$$;

CREATE OR REPLACE FUNCTION engram_agents_search_query(agents bigint[], query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(string_agg(q::text, ' | '), '')::tsquery
    FROM unnest(agents) AS a, LATERAL engram_agent_search_query(a, query) AS q
    WHERE q IS NOT NULL
$$;
