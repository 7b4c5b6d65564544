"""``manage.py export_person <actor id> [--output FILE]``: a person's data as one JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Actor
from memory.export import person_export_for_operator
from memory.management.commands.erase_person import ProgressBars


class Command(BaseCommand):
    help = (
        "Export a person (an actor, and the actors verified as the same person): their messages, memories "
        "about or from them with revision histories, their rejections and the grants they approved, as JSON."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("actor_id", type=int)
        parser.add_argument("--output", help="write the document here instead of standard output")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = Actor.objects.filter(pk=options["actor_id"]).first()
        if actor is None:
            raise CommandError(f"actor {options['actor_id']} not found")
        output = options["output"]
        # Step lines go to stderr when the document itself goes to stdout.
        bars = ProgressBars(self, lines=self.stderr if output is None else self.stdout)
        try:
            document = person_export_for_operator(actor, progress=bars)
        finally:
            bars.close()
        text = json.dumps(document, indent=2, ensure_ascii=False)
        if output is None:
            self.stdout.write(text)
        else:
            Path(output).write_text(text + "\n", encoding="utf-8")
            counts = ", ".join(f"{n} {what}" for what, n in document["counts"].items())
            self.stdout.write(self.style.SUCCESS(f"wrote {output}: {counts}"))
