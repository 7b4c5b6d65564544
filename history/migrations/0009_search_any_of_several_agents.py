"""``engram_agents_search_query(agents, text)``: the agent-qualified query for any of several agents,
for operators who search every agent they may see through the same index."""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION engram_agents_search_query(agents bigint[], query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(string_agg(q::text, ' | '), '')::tsquery
    FROM unnest(agents) AS a, LATERAL engram_agent_search_query(a, query) AS q
    WHERE q IS NOT NULL
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0008_message_actor_conversation_index"),
    ]

    operations = [
        migrations.RunSQL(FUNCTION, "DROP FUNCTION IF EXISTS engram_agents_search_query(bigint[], text);"),
    ]
