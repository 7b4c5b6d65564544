"""``manage.py erase_person <actor id> --yes``: erase a person's data, resumably, with progress."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from tqdm import tqdm

from accounts.models import Actor
from memory.erasure import DEFAULT_BATCH_SIZE, erasure_plan, person_actors, person_erase, person_seeds


class ProgressBars:
    """tqdm bars on stderr (shown on a terminal) and one line per step on stdout."""

    def __init__(self, command: BaseCommand, *, lines: OutputWrapper | None = None) -> None:
        self.lines = lines or command.stdout
        self.bars: list[tqdm[Any]] = []

    def __call__(self, step: str, total: int) -> Callable[[int], None]:
        self.lines.write(f"{step}: {total}")
        bar: tqdm[Any] = tqdm(total=total, desc=step, unit="row", disable=None, file=sys.stderr)
        self.bars.append(bar)

        def tick(done: int) -> None:
            bar.update(done)

        return tick

    def close(self) -> None:
        for bar in self.bars:
            bar.close()


class Command(BaseCommand):
    help = (
        "Erase a person (an actor, and the actors verified as the same person): their messages, their "
        "direct conversations, memories about or from them and everything built from those; replies "
        "that depended on them are withheld; a tombstone keeps the counts. Resumes an interrupted run. "
        "Without --yes, only says what would be erased."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("actor_id", type=int)
        parser.add_argument("--yes", action="store_true", help="really erase (it cannot be undone)")
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="messages per transaction")
        parser.add_argument("--requested-by", default="manage.py erase_person", help="recorded on the tombstone")
        # Fault tests only: stop inside the transaction of message batch N+1 and wait to be killed.
        parser.add_argument("--pause-after", type=int, default=None, help="(fault tests) wait after N batches")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = Actor.objects.filter(pk=options["actor_id"]).first()
        if actor is None:
            raise CommandError(f"actor {options['actor_id']} not found")
        people = ", ".join(f"#{a.pk}" for a in person_actors(actor))
        if not options["yes"]:
            plan = erasure_plan(person_seeds(actor))
            counts = ", ".join(f"{n} {what}" for what, n in plan.summary().items())
            raise CommandError(f"actor {actor.pk} (actors {people}): would erase {counts}; pass --yes")
        bars = ProgressBars(self)
        pause = None
        if options["pause_after"] is not None:

            def pause() -> None:
                self.stdout.write(f"paused after {options['pause_after']} batches")
                self.stdout.flush()
                while True:
                    signal.pause()

        try:
            event = person_erase(
                actor=actor,
                requested_by=options["requested_by"],
                batch_size=options["batch_size"],
                progress=bars,
                pause_after=options["pause_after"],
                pause=pause,
            )
        finally:
            bars.close()
        counts = ", ".join(f"{n} {what}" for what, n in sorted(event.counts.items()))
        self.stdout.write(
            self.style.SUCCESS(f"erased actor {actor.pk} (actors {people}); tombstone #{event.pk}: {counts}")
        )
