"""The admin stays fast over a large store: with 100,000 memory revisions (and as many messages,
evidence rows and sidecar documents), every changelist, its filters and full-text search, and a
change page of every model cost a bounded number of queries, the same for 100 rows as for 10.

The corpus is the ``bench_recall`` one (bulk SQL), loaded once for the module inside a transaction
that is rolled back at the end, so other test modules never see it. Wall-clock times are printed,
not asserted: they depend on the machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pgtrigger
import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.db.models import Model
from django.test import Client

from accounts.models import OperatorScope, Tenant
from bench.management.commands.bench_recall import TENANT_SLUG, Spec, ensure_corpus
from memory.models import MemoryEntry, MemoryRevision, RevisionConflict, SharingRequest
from tests.admin.test_admin_pages import (  # the autouse fixture skips embedding pages without pgvector
    ALL_MODELS,
    APPS,
    GLOBAL,
    World,
    _embedding_pages_need_pgvector,  # noqa: F401
    build_world,
    change_url,
    changelist_url,
)

REVISIONS = 100_000
#: The module's first test builds the 100,000-revision corpus in its setup; after the admin tests before
#: it, that load has taken over 300 s (the suite's per-test limit) on a slow 2-core machine.
pytestmark = pytest.mark.timeout(900)
#: Queries of any changelist: session, user, permissions, the filters' choices, one count, one page.
CHANGELIST_MAX = 10
#: Queries of any change page; the entry page loads its history, evidence, sharing, ledger and traces
#: in one query each, whatever their length.
DETAIL_MAX = 16


@dataclass
class Corpus:
    world: World
    operator: User
    superuser: User


@pytest.fixture(scope="module")
def corpus(request: pytest.FixtureRequest, django_db_setup: None, django_db_blocker: Any) -> Iterator[Corpus]:
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            with connection.cursor() as cursor:
                # A runaway statement fails the module instead of holding the corpus's locks (and
                # blocking every later test) after pytest-timeout has given up on it. The bulk load's
                # largest statements take tens of seconds on a slow or busy 2-core machine.
                cursor.execute("SET LOCAL statement_timeout = '240s'")
            started = time.perf_counter()
            # The per-row "current revision is its own" trigger dominates a bulk load (about 1 ms a
            # row on the loader's UPDATE); the same rule is checked below, once, over the whole set.
            with pgtrigger.ignore("memory.MemoryEntry:current_revision_stays_own"):
                ensure_corpus(Spec(revisions=REVISIONS, agents=20, seed=11))
            loaded = time.perf_counter() - started
            existing = set(connection.introspection.table_names())
            with connection.cursor() as cursor:
                # Statistics first (ANALYZE samples this transaction's own rows): without them the
                # planner may join 100,000 rows by nested loops.
                for model in ALL_MODELS:
                    if model._meta.db_table in existing:  # no embedding tables without pgvector
                        cursor.execute(f"ANALYZE {model._meta.db_table}")
                cursor.execute(
                    "SELECT count(*) FROM memory_memoryentry e"
                    " LEFT JOIN memory_memoryrevision r ON r.id = e.current_revision_id"
                    " WHERE r.id IS NULL OR r.entry_id <> e.id OR r.agent_id <> e.agent_id"
                )
                assert cursor.fetchone() == (0,)
            phases = {"load": loaded}
            mark = time.perf_counter()
            world = build_world("inspect")
            operator = User.objects.create_user("operator", is_staff=True)
            operator.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
            for tenant in Tenant.objects.filter(slug__in=[TENANT_SLUG, "inspect"]):
                OperatorScope.objects.create(user=operator, tenant=tenant)
            superuser = User.objects.create_superuser("root")
            # A few queue items inside the big corpus, so the queue filters have something to find.
            some = list(MemoryEntry.objects.filter(agent__tenant__slug=TENANT_SLUG).order_by("pk")[:300:3])
            MemoryEntry.objects.filter(pk__in=[e.pk for e in some]).update(flagged_for_review=True)
            phases["world"] = time.perf_counter() - mark
            mark = time.perf_counter()
            with connection.cursor() as cursor:
                # Check the corpus's deferred foreign keys once, now: otherwise every test's teardown
                # (which sets constraints immediate) would re-check 100,000 rows of pending events.
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
                phases["foreign keys"] = time.perf_counter() - mark
                mark = time.perf_counter()
                for model in ALL_MODELS:
                    if model._meta.db_table in existing:  # no embedding tables without pgvector
                        cursor.execute(f"ANALYZE {model._meta.db_table}")
            phases["analyze"] = time.perf_counter() - mark
            timings = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in phases.items())
            with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
                print(f"\ncorpus of {MemoryRevision.objects.count()} revisions: {timings}")
            yield Corpus(world=world, operator=operator, superuser=superuser)
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            # The rollback removes the rows, not ANALYZE's estimates: re-analyse, or later tests get
            # plans made for 100,000 revisions over a handful of rows.
            existing = set(connection.introspection.table_names())
            with connection.cursor() as cursor:
                for model in ALL_MODELS:
                    if model._meta.db_table in existing:  # no embedding tables without pgvector
                        cursor.execute(f"ANALYZE {model._meta.db_table}")


def client_for(corpus: Corpus, model: type[Model]) -> Client:
    client = Client()
    # Installation-wide rows are a superuser's; everything else is read as a tenant-scoped operator.
    client.force_login(corpus.superuser if model in GLOBAL else corpus.operator)
    return client


def timed_get(client: Client, url: str, params: dict[str, Any] | None = None) -> tuple[Any, float]:
    started = time.perf_counter()
    response = client.get(url, params or {})
    return response, (time.perf_counter() - started) * 1000


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(line)


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m._meta.label)
def test_changelist_queries_are_bounded_for_10_and_100_rows(
    corpus: Corpus, db: None, model: type[Model], monkeypatch, django_assert_max_num_queries, capsys
):
    client = client_for(corpus, model)
    model_admin = admin.site._registry[model]
    counts, timings = {}, {}
    for per_page in (10, 100):
        monkeypatch.setattr(model_admin, "list_per_page", per_page)
        client.get(changelist_url(model))  # warm caches (content types, templates)
        with django_assert_max_num_queries(CHANGELIST_MAX) as captured:
            response, timings[per_page] = timed_get(client, changelist_url(model))
        assert response.status_code == 200
        counts[per_page] = len(captured.captured_queries)
        shown = len(response.context["cl"].result_list)
        assert shown <= per_page
    assert counts[10] == counts[100]
    report(
        capsys,
        f"  {model._meta.label:32} changelist: {counts[100]} queries, "
        f"{timings[10]:7.1f} ms (10 rows) {timings[100]:7.1f} ms (100 rows, {shown} shown)",
    )


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m._meta.label)
def test_change_page_queries_are_bounded(
    corpus: Corpus, db: None, model: type[Model], django_assert_max_num_queries, capsys
):
    client = client_for(corpus, model)
    url = change_url(corpus.world.rows[model])
    client.get(url)
    with django_assert_max_num_queries(DETAIL_MAX) as captured:
        response, ms = timed_get(client, url)
    assert response.status_code == 200
    report(capsys, f"  {model._meta.label:32} change page: {len(captured.captured_queries)} queries, {ms:7.1f} ms")


FILTERED = [
    (MemoryEntry, {"flagged_for_review__exact": "1", "status__exact": "live"}),
    (
        MemoryEntry,
        {"current_revision__belief_type__exact": "preference", "current_revision__audience_kind__exact": "members"},
    ),
    (MemoryEntry, {"q": "tennis"}),
    (MemoryEntry, {"q": "volcano"}),
    (MemoryEntry, {"q": "Lisbon sushi", "status__exact": "live"}),
    (MemoryRevision, {"q": "kombucha"}),
    (MemoryRevision, {"lifecycle__exact": "provisional", "belief_type__exact": "event"}),
    (RevisionConflict, {"resolved_at__isempty": "1"}),
    (SharingRequest, {"state__exact": "pending"}),
]


@pytest.mark.parametrize(("model", "params"), FILTERED, ids=lambda v: str(v) if isinstance(v, dict) else v._meta.label)
def test_filters_and_full_text_search_are_bounded(
    corpus: Corpus, db: None, model: type[Model], params: dict[str, str], django_assert_max_num_queries, capsys
):
    client = client_for(corpus, model)
    client.get(changelist_url(model), params)
    with django_assert_max_num_queries(CHANGELIST_MAX) as captured:
        response, ms = timed_get(client, changelist_url(model), params)
    assert response.status_code == 200
    report(
        capsys,
        f"  {model._meta.label:32} {params}: {len(captured.captured_queries)} queries, {ms:7.1f} ms, "
        f"{len(response.context['cl'].result_list)} shown",
    )


def test_agent_filter_over_the_corpus(corpus: Corpus, db: None, django_assert_max_num_queries, capsys):
    agent_id = MemoryEntry.objects.filter(agent__tenant__slug=TENANT_SLUG).values_list("agent_id", flat=True).first()
    client = client_for(corpus, MemoryEntry)
    for model in (MemoryEntry, MemoryRevision, apps.get_model("history", "Message")):
        with django_assert_max_num_queries(CHANGELIST_MAX):
            response, ms = timed_get(client, changelist_url(model), {"agent": agent_id})
        assert response.status_code == 200 and response.context["cl"].result_list
        report(capsys, f"  {model._meta.label:32} agent filter: {ms:7.1f} ms")
