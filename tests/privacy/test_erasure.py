"""Erasing a person: nothing of theirs is left in any table or index, recall and history search never
return it, replies that depended on it are withheld, and a tombstone keeps counts, never content."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, transaction

from accounts.models import Actor, IdentityLink
from history.models import Message, Turn, TurnState
from memory.embeddings.index import vectors_stored
from memory.erasure import ERASED_NAME, REPLY_ERASED_CODE, erasure_plan, person_erase, person_seeds
from memory.models import ErasureEvent, ErasureKind, ErasureState, MessageEmbedding, RevisionEmbedding
from tests.privacy.demo_world import (
    GENERAL,
    MARKERS,
    PRIYA,
    SAM,
    build_demo_world,
    model_text_columns,
    rows_with_text,
    rows_with_vectors,
    scanned_columns,
    vector_values,
)

pytestmark = pytest.mark.django_db


def test_erasing_a_person_leaves_no_row_with_their_text_or_vectors_anywhere() -> None:
    """After ``erase_person``, every text and vector column of every table holds nothing of theirs:
    0 rows; recall and history search never return it; the reply built from it is withheld."""
    world = build_demo_world()
    # A server without pgvector has no embedding tables (docs/embeddings.md): then there are no vectors to find.
    with_vectors = vectors_stored()
    embedding_tables = {"memory_messageembedding", "memory_revisionembedding"}
    plan = erasure_plan(person_seeds(world.sam))
    vectors = []
    if with_vectors:
        call_command("embeddings", "rebuild", stdout=StringIO(), stderr=StringIO())
        vectors = vector_values(MessageEmbedding, message_id__in=plan.ids["messages"])
        vectors += vector_values(RevisionEmbedding, revision__entry_id__in=plan.ids["entries"])
    # The scanner reads the schema; every text or vector column any model declares is among what it scans.
    scanned = {(table, column) for table, column, _ in scanned_columns()}
    declared = {(t, c) for t, c in model_text_columns() if with_vectors or t not in embedding_tables}
    assert declared <= scanned, declared - scanned
    assert {table for table, _, _ in scanned_columns()} >= {
        "history_message",
        "history_messagesearchdocument",
        "memory_memoryrevision",
        "memory_revisionsearchdocument",
        "memory_recalltrace",
        "history_session",
    } | (embedding_tables if with_vectors else set())
    assert any("Pixel" in body for body in world.recalled_bodies("D04SAMLI", SAM, "What is my cat called?"))
    before = rows_with_text()
    assert before.get("history_message.body", 0) >= 5, before
    assert "memory_revisionsearchdocument.tsv" in before and "memory_recalltrace.rendered_text" in before, before
    if with_vectors:
        assert vectors and rows_with_vectors(vectors), "the embeddings of Sam's texts exist before the erasure"

    with pytest.raises(CommandError, match="pass --yes"):
        call_command("erase_person", str(world.sam.pk))
    assert rows_with_text() == before

    out = StringIO()
    call_command("erase_person", str(world.sam.pk), "--yes", "--batch-size", "2", stdout=out, stderr=StringIO())
    assert "messages:" in out.getvalue() and "tombstone" in out.getvalue()

    assert rows_with_text() == {}
    if with_vectors:
        assert rows_with_vectors(vectors) == {}
    assert not Message.objects.filter(actor=world.sam).exists()
    for thread, who in ((GENERAL, PRIYA), ("G02ATLASCORE", PRIYA), ("D03PRIYA", PRIYA)):
        for text in (
            "What is Sam's cat called? Pixel",
            "colour-blind deuteranopia charts",
            "Copenhagen office move",
            "Where are the Figma wireframes, Atlas v0 flows?",
        ):
            bodies = world.recalled_bodies(thread, who, text) + world.history_bodies(thread, who, text)
            assert not [b for b in bodies if any(m in b.lower() for m in MARKERS)], (thread, text, bodies)

    # Priya's reply in #general was built from Sam's message: it is gone and the turn says withheld.
    general_turn = Turn.objects.get(pk=world.general_turn)
    assert (general_turn.state, general_turn.reply_id, general_turn.failure_code) == (
        TurnState.WITHHELD,
        None,
        REPLY_ERASED_CODE,
    )
    assert not Turn.objects.filter(pk=world.dm_turn).exists()
    # Priya's own data is untouched.
    assert Message.objects.filter(actor=world.priya).count() > 10
    assert IdentityLink.objects.filter(revoked_at__isnull=True).count() == 1

    tombstone = ErasureEvent.objects.get(kind=ErasureKind.PERSON, actor_id=world.sam.pk)
    assert tombstone.state == ErasureState.COMPLETE and tombstone.pending == {}
    counts = tombstone.counts
    assert counts["messages"] + counts["messages (with conversations)"] >= 14, counts
    assert counts["memories"] + counts["memories (with conversations)"] >= 9, counts
    # Every reply the erasure removed left its turn withheld (the demo's own turns add some to #general's).
    withheld = Turn.objects.filter(state=TurnState.WITHHELD, failure_code=REPLY_ERASED_CODE).count()
    assert counts["replies withheld"] == withheld >= 1 and counts["conversations"] == 1, counts
    assert Actor.objects.get(pk=world.sam.pk).display_name == ERASED_NAME


def test_the_tombstone_is_final_and_never_deleted() -> None:
    """A completed erasure event refuses every change and deletion in the database."""
    world = build_demo_world()
    event = person_erase(actor=world.sam, requested_by="test")
    for statement in (
        lambda: ErasureEvent.objects.filter(pk=event.pk).update(counts={}),
        lambda: ErasureEvent.objects.filter(pk=event.pk).delete(),
    ):
        with pytest.raises(DatabaseError), transaction.atomic():
            statement()
    again = person_erase(actor=world.sam, requested_by="test")
    assert again.pk != event.pk and again.state == ErasureState.COMPLETE
    assert again.counts.get("messages", 0) == 0
