"""``manage.py retention [--tenant SLUG] [--dry-run]``: erase what is past each tenant's retention periods."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q

from accounts.models import Tenant
from memory.erasure import DEFAULT_BATCH_SIZE, retention_cutoffs, retention_enforce, retention_plan
from memory.management.commands.erase_person import ProgressBars


class Command(BaseCommand):
    help = (
        "Erase messages and memories older than each tenant's retention periods (Tenant.message_retention_days, "
        "memory_retention_days), with everything built from them, as the daily task does. --dry-run only "
        "reports what would be erased."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant (slug)")
        parser.add_argument("--dry-run", action="store_true", help="report what would be erased; change nothing")
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="messages per transaction")

    def handle(self, *args: Any, **options: Any) -> None:
        tenants = Tenant.objects.filter(
            Q(message_retention_days__isnull=False) | Q(memory_retention_days__isnull=False)
        ).order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
            if not Tenant.objects.filter(slug=options["tenant"]).exists():
                raise CommandError(f"tenant {options['tenant']!r} not found")
        if not tenants:
            self.stdout.write("No tenant has a retention period; nothing to do.")
        for tenant in tenants:
            cutoffs = retention_cutoffs(tenant)
            limits = (
                f"messages before {cutoffs.messages_before:%Y-%m-%d %H:%M} UTC"
                if cutoffs.messages_before
                else "messages kept",
                f"memories not revised since {cutoffs.memories_before:%Y-%m-%d %H:%M} UTC"
                if cutoffs.memories_before
                else "memories kept",
            )
            self.stdout.write(f"{tenant.slug}: {'; '.join(limits)}")
            if options["dry_run"]:
                plan = retention_plan(tenant)
                counts = ", ".join(f"{n} {what}" for what, n in plan.summary().items())
                self.stdout.write(f"  would erase: {counts} (dry run: nothing changed)")
                continue
            bars = ProgressBars(self)
            try:
                event = retention_enforce(tenant=tenant, batch_size=options["batch_size"], progress=bars)
            finally:
                bars.close()
            if event is None:
                self.stdout.write("  nothing past retention")
            else:
                counts = ", ".join(f"{n} {what}" for what, n in sorted(event.counts.items()))
                self.stdout.write(self.style.SUCCESS(f"  erased; tombstone #{event.pk}: {counts}"))
