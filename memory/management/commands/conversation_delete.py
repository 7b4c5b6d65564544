"""``manage.py conversation_delete <id> --yes``: delete one conversation and everything derived from it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from history.models import Conversation
from memory.retention import conversation_delete, conversation_deletion_plan


class Command(BaseCommand):
    help = (
        "Delete a conversation on request: its messages, sessions, turns and traces, and every memory "
        "learned from it. Without --yes, only says what would be deleted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation_id", type=int)
        parser.add_argument("--yes", action="store_true", help="really delete (it cannot be undone)")

    def handle(self, *args: Any, **options: Any) -> None:
        conversation = Conversation.objects.filter(pk=options["conversation_id"]).first()
        if conversation is None:
            raise CommandError(f"conversation {options['conversation_id']} not found")
        plan = conversation_deletion_plan(conversation)
        counts = ", ".join(f"{n} {what}" for what, n in plan.summary().items())
        if not options["yes"]:
            raise CommandError(f"conversation {conversation.pk} ({conversation}): would delete {counts}; pass --yes")
        deleted = conversation_delete(conversation=conversation)
        counts = ", ".join(f"{n} {what}" for what, n in deleted.summary().items())
        self.stdout.write(self.style.SUCCESS(f"deleted conversation {deleted.conversation_id}: {counts}"))
