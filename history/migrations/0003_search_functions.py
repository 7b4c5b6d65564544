"""One definition of what a search document and a search query are, shared by every sidecar and reader.

``engram_search_document(body)`` is the English tsvector of the text plus its negation words
(``not``, ``no``, ``never``, ...), which the English configuration would drop as stopwords: "does
not like coffee" must not read the same as "likes coffee".

``engram_search_query(text)`` ORs the query's English terms (``plainto_tsquery`` with its top-level
``&`` rewritten to ``|``) and its negation words. Function words vanish, so a query of only function
words matches nothing. Input is never parsed as tsquery syntax, so metacharacters are inert.
"""

from django.db import migrations

NEGATIONS = "not|no|never|nor|without|cannot"

FUNCTIONS = rf"""
CREATE OR REPLACE FUNCTION engram_search_document(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('english', coalesce(body, ''))
        || to_tsvector('simple', coalesce((
            SELECT string_agg(m[1], ' ')
            FROM regexp_matches(lower(coalesce(body, '')), '\m({NEGATIONS})\M', 'g') AS m), ''))
$$;

CREATE OR REPLACE FUNCTION engram_search_query(query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(concat_ws(' | ',
        nullif(replace(plainto_tsquery('english', coalesce(query, ''))::text, ' & ', ' | '), ''),
        (SELECT string_agg(DISTINCT quote_literal(m[1]), ' | ')
         FROM regexp_matches(lower(coalesce(query, '')), '\m({NEGATIONS})\M', 'g') AS m)
    ), '')::tsquery
$$;
"""

DROP_FUNCTIONS = """
DROP FUNCTION IF EXISTS engram_search_query(text);
DROP FUNCTION IF EXISTS engram_search_document(text);
"""


class Migration(migrations.Migration):
    dependencies = [("history", "0002_audience_rule_and_sidecar_cascade")]

    operations = [migrations.RunSQL(FUNCTIONS, DROP_FUNCTIONS)]
