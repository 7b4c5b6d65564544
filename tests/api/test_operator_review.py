"""Operators decide sharing requests in the admin; the decision goes through the sharing service."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from accounts.models import OperatorScope
from memory.models import SharingGrant, SharingRequest, SharingState
from tests.api.conftest import Runtime
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def requested(runtime: Runtime) -> tuple[SharingRequest, str]:
    turn = runtime.turn("dm-alice", "U200", "The offsite is in Porto; you can tell #general.")
    made = runtime.round(turn["turn_id"], {"verb": "remember", "body": "The offsite is in Porto."})
    memory_id = made.json()["results"][0]["result"]["id"]
    runtime.round(
        turn["turn_id"],
        {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": runtime.conversation("general").pk},
    )
    return SharingRequest.objects.get(), memory_id


def operator(tenant_id: int) -> Client:
    user = User.objects.create_user(username=f"op{tenant_id}", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_sharingrequest", "change_sharingrequest"]))
    OperatorScope.objects.create(user=user, tenant_id=tenant_id)
    client = Client()
    client.force_login(user)
    return client


def approve(client: Client, request: SharingRequest) -> int:
    response = client.post(
        "/admin/memory/sharingrequest/",
        {"action": "approve_requests", "_selected_action": [request.pk]},
    )
    return response.status_code


def test_an_operator_approves_a_request_and_the_memory_reaches_the_channel(runtime: Runtime) -> None:
    request, memory_id = requested(runtime)
    turn = runtime.turn("general", "U300", "Where is the offsite?")
    before = runtime.round(turn["turn_id"], {"verb": "recall", "query": "offsite Porto"}).json()
    assert memory_id not in [i["id"] for i in before["results"][0]["result"]["items"]]

    assert approve(operator(runtime.agent.tenant_id), request) == 302

    request.refresh_from_db()
    assert request.state == SharingState.APPROVED
    assert SharingGrant.objects.get(request=request).granted_by_user is not None
    after = runtime.round(turn["turn_id"], {"verb": "recall", "query": "offsite Porto"}).json()
    assert memory_id in [i["id"] for i in after["results"][0]["result"]["items"]]


def test_an_operator_of_another_tenant_cannot_decide(runtime: Runtime) -> None:
    request, _ = requested(runtime)
    approve(operator(TenantFactory.create().pk), request)
    request.refresh_from_db()
    assert request.state == SharingState.PENDING
    assert not SharingGrant.objects.exists()
