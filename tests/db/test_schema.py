"""The schema in PostgreSQL is the one the models declare: triggers, functions, extensions, constraints."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pgtrigger
import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from history.audience import Audience
from history.models import Conversation
from memory.models import MemoryEntry, MemoryRevision
from tests.db.helpers import World, fetch_one

pytestmark = pytest.mark.django_db

#: The tables whose rows are immutable, by contract (ARCHITECTURE "Data model"; STYLE habit 8).
APPEND_ONLY_MODELS = {
    "history.Message",
    "history.MessageSourceEvidence",
    "history.ConversationSearchEvent",
    "memory.MemoryRevision",
    "memory.MemoryEvidence",
    "memory.RecallTraceItem",
    "memory.RetrievalEvent",
    "memory.MemoryOperation",
    "memory.Rejection",
    "memory.DeletedRevision",
    "memory.ManagementReadEvent",
}


def _installed_pgtriggers() -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE NOT t.tgisinternal AND t.tgname LIKE 'pgtrigger\\_%'"
        )
        return {(table, name) for table, name in cursor.fetchall()}


def test_every_declared_trigger_is_installed_enabled_and_current() -> None:
    """Each trigger in a model's ``Meta.triggers`` is in pg_trigger, enabled, and matches its declaration;
    pg_trigger holds no pgtrigger-managed trigger that the models do not declare."""
    registered = pgtrigger.registered()
    assert registered, "no triggers registered"

    statuses = {trigger.get_uri(model): trigger.get_installation_status(model) for model, trigger in registered}
    assert {uri: status for uri, status in statuses.items() if status != ("INSTALLED", True)} == {}
    declared = {(model._meta.db_table, trigger.get_pgid(model)) for model, trigger in registered}
    assert _installed_pgtriggers() == declared


def test_append_only_models_declare_a_protect_trigger_for_update_and_delete() -> None:
    """Every append-only model declares ``append_only``, a Protect trigger on both UPDATE and DELETE."""
    protected = {
        model._meta.label
        for model, trigger in pgtrigger.registered()
        if trigger.name == "append_only"
        and isinstance(trigger, pgtrigger.Protect)
        and str(trigger.operation) == str(pgtrigger.Update | pgtrigger.Delete)
        and trigger.condition is None
    }
    assert protected == APPEND_ONLY_MODELS


def test_models_and_migrations_agree() -> None:
    """``makemigrations --check --dry-run`` finds nothing to generate (triggers included)."""
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:  # pragma: no cover - the failure path
        pytest.fail(f"models have changes without a migration:\n{out.getvalue()}")


def test_the_audience_rule_function_exists_and_is_immutable() -> None:
    """``engram_audience_allows`` exists with its seven-argument signature and is IMMUTABLE (inlinable)."""
    row = fetch_one(
        "SELECT p.provolatile, p.prorettype::regtype::text FROM pg_proc p WHERE p.oid = "
        "to_regprocedure('engram_audience_allows(text, text, bigint[], text, text, bigint[], bigint[])')"
    )
    assert row == ("i", "boolean")


def test_the_vector_extension_is_installed_when_the_server_offers_it() -> None:
    """Where PostgreSQL offers pgvector, migrations installed it; where it does not, nothing pretends."""
    available = fetch_one("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
    installed = fetch_one("SELECT count(*) FROM pg_extension WHERE extname = 'vector'")
    assert installed == available


@pytest.mark.parametrize(
    ("table", "constraint"),
    [
        ("history_messagesearchdocument", "message_search_document_message_fk"),
        ("memory_revisionsearchdocument", "revision_search_document_revision_fk"),
    ],
)
def test_sidecar_foreign_keys_cascade_in_the_database(table: str, constraint: str) -> None:
    """Each sidecar has a real foreign key with ON DELETE CASCADE (Django cannot declare it)."""
    row = fetch_one(
        "SELECT confdeltype FROM pg_constraint WHERE conname = %s AND conrelid = %s::regclass", [constraint, table]
    )
    assert row == ("c",)


def _conversation_columns(world: World, kind: str, namespace: str, readers: list[int]) -> dict[str, Any]:
    return {
        "agent": world.agent,
        "connector": world.connector,
        "external_thread_id": f"{kind}-{namespace}-{readers}",
        "audience_kind": kind,
        "audience_namespace": namespace,
        "audience_readers": readers,
    }


MALFORMED_DESTINATIONS = [
    pytest.param("members", "slack:acme", [], id="members-without-readers"),
    pytest.param("members", "", [1], id="members-without-namespace"),
    pytest.param("external", "slack:acme", [], id="external-without-readers"),
    pytest.param("workspace", "", [], id="workspace-without-namespace"),
    pytest.param("workspace", "slack:acme", [1], id="workspace-with-readers"),
    pytest.param("public", "slack:acme", [], id="public-with-namespace"),
    pytest.param("public", "", [1], id="public-with-readers"),
    pytest.param("unknown", "", [], id="unknown-is-not-a-destination"),
    pytest.param("nobody", "", [], id="nobody-is-not-a-destination"),
    pytest.param("everyone", "", [], id="unheard-of-kind"),
]


@pytest.mark.parametrize(("kind", "namespace", "readers"), MALFORMED_DESTINATIONS)
def test_a_conversation_refuses_a_malformed_audience(
    world: World, kind: str, namespace: str, readers: list[int]
) -> None:
    """A conversation's audience columns must form a deliverable audience; anything else is refused."""
    with pytest.raises(IntegrityError, match="conversation_audience_shape"), transaction.atomic():
        Conversation.objects.create(**_conversation_columns(world, kind, namespace, readers))


@pytest.mark.parametrize(
    "audience",
    [
        Audience.public(),
        Audience.workspace("slack:acme"),
        Audience.members("slack:acme", [1]),
        Audience.external("x:y", [2]),
    ],
    ids=str,
)
def test_a_conversation_accepts_every_well_formed_destination(world: World, audience: Audience) -> None:
    """Each deliverable audience shape is accepted, so the constraint refuses only what it should."""
    Conversation.objects.create(
        **_conversation_columns(world, audience.kind, audience.namespace, list(audience.readers))
    )


@pytest.mark.parametrize(
    ("kind", "namespace", "readers", "accepted"),
    [
        pytest.param("unknown", "", [], True, id="unknown-source"),
        pytest.param("nobody", "", [], True, id="nobody-source"),
        pytest.param("unknown", "", [1], False, id="unknown-with-readers"),
        pytest.param("nobody", "slack:acme", [], False, id="nobody-with-namespace"),
        pytest.param("members", "slack:acme", [], False, id="members-without-readers"),
        pytest.param("secret", "", [], False, id="unheard-of-kind"),
    ],
)
def test_a_revision_source_audience_may_be_unknown_or_nobody_but_never_malformed(
    world: World, kind: str, namespace: str, readers: list[int], accepted: bool
) -> None:
    """Source audiences add ``unknown`` and ``nobody`` (bare), and are otherwise shaped like destinations."""
    entry = MemoryEntry.objects.create(agent=world.agent)

    def create() -> MemoryRevision:
        return MemoryRevision.objects.create(
            entry=entry,
            agent=world.agent,
            number=1,
            body="A statement.",
            belief_type="project_fact",
            created_by="remember",
            audience_kind=kind,
            audience_namespace=namespace,
            audience_readers=readers,
        )

    if accepted:
        create()
    else:
        with pytest.raises(IntegrityError, match="revision_audience_shape"), transaction.atomic():
            create()
