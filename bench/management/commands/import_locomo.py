"""Import LoCoMo conversations as Engram transcripts.

Each LoCoMo conversation becomes one conversation on its own connector ``locomo:<sample_id>``, read by
both speakers (``members(locomo:<sample_id>, [a, b])``); each turn becomes an inbound message whose
connector id is its ``dia_id``, so importing the same file again creates nothing. Questions and
observations are parsed and counted but not stored: they are evaluation data, not conversation.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from tqdm import tqdm

from accounts.models import Actor, Connector, RuntimeAgent, Tenant
from bench.locomo import LocomoConversation, load_locomo
from history.audience import Audience
from history.models import EvidenceMethod, Message
from history.services import conversation_upsert, message_ingest

CONNECTOR_TYPE = "locomo"


class Command(BaseCommand):
    help = "Import a LoCoMo-format JSON file: one conversation per sample, one message per turn. Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", required=True, help="Path to a JSON file in LoCoMo's schema.")
        parser.add_argument("--tenant", default="locomo", help="Tenant slug (created if missing).")
        parser.add_argument("--agent", default="locomo-reader", help="Agent name in that tenant (created if missing).")

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        try:
            parsed = load_locomo(options["file"])
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot read {options['file']}: {error}") from error
        if not parsed.conversations:
            raise CommandError(f"{options['file']} holds no conversations")

        tenant, _ = Tenant.objects.get_or_create(slug=options["tenant"], defaults={"name": options["tenant"]})
        agent, _ = RuntimeAgent.objects.get_or_create(tenant=tenant, name=options["agent"])

        total = sum(c.turn_count for c in parsed.conversations)
        created = existing = 0
        with tqdm(total=total, unit="turn", desc="LoCoMo", disable=options["verbosity"] < 1) as progress:
            for conversation in parsed.conversations:
                # One transaction per conversation: an interrupted import leaves whole conversations only.
                with transaction.atomic():
                    new, old = import_conversation(
                        agent=agent, tenant=tenant, conversation=conversation, progress=progress
                    )
                created += new
                existing += old

        elapsed = time.monotonic() - started
        questions = sum(len(c.questions) for c in parsed.conversations)
        observations = sum(len(c.observations) for c in parsed.conversations)
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {len(parsed.conversations)} conversation(s) into {tenant.slug}/{agent.name}: "
                f"{created} messages created, {existing} already present, in {elapsed:.1f}s."
            )
        )
        self.stdout.write(f"Parsed {questions} questions and {observations} observations (not stored).")
        self.stdout.write(f"Normalised {parsed.report.summary()}.")
        if options["verbosity"] > 1:
            for example in parsed.report.examples:
                self.stdout.write(f"  {example}")


def import_conversation(
    *, agent: RuntimeAgent, tenant: Tenant, conversation: LocomoConversation, progress: tqdm[Any] | None = None
) -> tuple[int, int]:
    """Ingest one conversation's turns; returns (messages created, messages already present)."""
    if conversation.turn_count == 0:
        return 0, 0
    connector, _ = Connector.objects.get_or_create(agent=agent, type=CONNECTOR_TYPE, name=conversation.sample_id)
    actors: dict[str, Actor] = {}
    for speaker in conversation.speakers:
        actors[speaker], _ = Actor.objects.get_or_create(
            connector=connector, external_id=speaker, defaults={"tenant": tenant, "display_name": speaker}
        )
    readers = [actors[s].pk for s in (conversation.speaker_a, conversation.speaker_b) if s in actors]
    thread = conversation_upsert(
        agent=agent,
        connector=connector,
        external_thread_id=conversation.sample_id,
        audience=Audience.members(connector.namespace, readers),
        title=f"LoCoMo {conversation.sample_id}: {conversation.speaker_a} and {conversation.speaker_b}",
    )
    # Known ids are skipped up front; message_ingest would find each of them itself, one query at a time.
    present = set(
        Message.objects.filter(conversation=thread, external_id__isnull=False).values_list("external_id", flat=True)
    )
    created = existing = 0
    for turn in conversation.turns:
        if turn.dia_id in present:
            existing += 1
        else:
            result = message_ingest(
                conversation=thread,
                actor=actors[turn.speaker],
                body=turn.text,
                created_at=turn.created_at,
                evidence_method=EvidenceMethod.OPERATOR_IMPORT,
                evidence_detail={"dataset": "locomo", "sample_id": conversation.sample_id},
                external_id=turn.dia_id,
            )
            created += result.created
            existing += not result.created
        if progress is not None:
            progress.update(1)
    return created, existing
