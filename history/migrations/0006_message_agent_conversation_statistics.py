"""Extended statistics on (agent, conversation): every conversation belongs to one agent, which the
planner cannot know from per-column statistics. Without them it expects a handful of rows for
"this conversation of this agent" and sorts whole conversations where an index walk of two rows
would do (the neighbour lookup of history search)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("history", "0005_perspective_consistency_guards")]

    operations = [
        migrations.RunSQL(
            "CREATE STATISTICS IF NOT EXISTS history_message_agent_conversation (dependencies, ndistinct)"
            " ON agent_id, conversation_id FROM history_message; ANALYZE history_message;",
            "DROP STATISTICS IF EXISTS history_message_agent_conversation;",
        )
    ]
