"""``manage.py embeddings status|rebuild|drain``: the derived vector index, from the command line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memory.embeddings.index import drain_outbox, pending_count, semantic_enabled, vectors_stored
from memory.embeddings.rebuild import RebuildProgress, rebuild
from memory.models import EmbeddingGeneration, MessageEmbedding, RevisionEmbedding


class Command(BaseCommand):
    help = "Inspect, drain or rebuild the embedding index (a new model becomes a new generation)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("status", help="generations, vector counts and pending work")
        rebuild_parser = sub.add_parser("rebuild", help="build a new generation, then make it live")
        rebuild_parser.add_argument("--model", default=None, help="embedding model name (default: configured)")
        sub.add_parser("drain", help="embed everything pending now, in this process")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "status":
            self.stdout.write(f"semantic search: {'on' if semantic_enabled() else 'off (lexical only)'}")
            if not vectors_stored():
                self.stdout.write("no embedding tables: this database was migrated without pgvector")
            for generation in EmbeddingGeneration.objects.order_by("id") if vectors_stored() else ():
                revisions = RevisionEmbedding.objects.filter(generation=generation).count()
                messages = MessageEmbedding.objects.filter(generation=generation).count()
                self.stdout.write(
                    f"generation {generation.pk}: {generation.model_name} ({generation.dims} dims) {generation.state};"
                    f" {revisions} revisions, {messages} messages"
                )
            self.stdout.write(f"pending: {pending_count()}")
        elif action == "drain":
            bar = tqdm(total=pending_count(), unit="text", disable=None)
            while taken := drain_outbox():
                bar.update(taken)
            bar.close()
        else:
            if not vectors_stored():
                raise CommandError(
                    "no embedding tables: this database was migrated without pgvector (lexical-only); see"
                    " docs/embeddings.md for turning semantic search on"
                )
            bar = tqdm(unit="text", disable=None)

            def progress(step: RebuildProgress) -> None:
                bar.total = step.total
                bar.n = step.done
                bar.refresh()

            generation = rebuild(model_name=options["model"], on_progress=progress)
            bar.close()
            self.stdout.write(self.style.SUCCESS(f"generation {generation.pk} ({generation.model_name}) is live"))
