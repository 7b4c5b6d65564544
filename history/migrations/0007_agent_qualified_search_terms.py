"""Agent-qualified search terms: each agent gets its own GIN posting lists.

``engram_agent_lexemes(agent, tsv)`` prefixes every lexeme of a sidecar's tsvector with its agent
(``"7:coffe"``); the GIN index over it replaces the plain index on ``tsv``, whose posting lists mixed
every agent's documents, so a common word cost a scan of every agent's matches before the agent
filter. ``engram_agent_search_query(agent, text)`` is ``engram_search_query(text)`` with the same
prefix on every operand: a document matches it exactly when its own terms match the plain query and
it belongs to that agent. Operands are rewritten inside their quotes, so tsquery escaping is kept.
Lexemes near the tsvector length limit are left out on both sides (consistently; they only narrow).
``ts_rank`` still reads the unqualified ``tsv``.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

#: Room for the agent prefix under PostgreSQL's 2,047-byte lexeme limit.
MAX_LEXEME_BYTES = 2000

FUNCTIONS = rf"""
CREATE OR REPLACE FUNCTION engram_agent_lexemes(agent bigint, doc tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT array_to_tsvector(coalesce(array_agg(agent::text || ':' || t.lexeme), '{{}}'))
    FROM unnest(doc) AS t
    WHERE octet_length(t.lexeme) <= {MAX_LEXEME_BYTES}
$$;

CREATE OR REPLACE FUNCTION engram_agent_search_query(agent bigint, query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(string_agg('''' || agent::text || ':' || m[1] || '''', ' | '), '')::tsquery
    FROM regexp_matches(coalesce(engram_search_query(query)::text, ''), '''((?:[^'']|'''')*)''', 'g') AS m
    WHERE octet_length(m[1]) <= {MAX_LEXEME_BYTES}
$$;
"""

DROP_FUNCTIONS = """
DROP FUNCTION IF EXISTS engram_agent_search_query(bigint, text);
DROP FUNCTION IF EXISTS engram_agent_lexemes(bigint, tsvector);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0006_message_agent_conversation_statistics"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, DROP_FUNCTIONS),
        migrations.RemoveIndex(
            model_name="messagesearchdocument",
            name="message_search_tsv",
        ),
        migrations.AddIndex(
            model_name="messagesearchdocument",
            index=django.contrib.postgres.indexes.GinIndex(
                models.Func(
                    models.F("agent_id"),
                    models.F("tsv"),
                    function="engram_agent_lexemes",
                    output_field=django.contrib.postgres.search.SearchVectorField(),
                ),
                name="message_search_agent_terms",
            ),
        ),
    ]
