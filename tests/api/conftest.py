"""An agent runtime talking HTTP to Engram: an API key (runtime scope; ``Runtime.manager()`` is the
same agent with a manage key, for the management reads), a Slack workspace with Victor, Alice and Bob,
their DMs and #general, all ingested through the API itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from accounts.models import Actor, ApiScope, RuntimeAgent, UserActor
from accounts.services import api_key_create
from history.models import Conversation
from tests.factories import AgentFactory


@dataclass
class Runtime:
    agent: RuntimeAgent
    client: APIClient
    counter: list[int] = field(default_factory=lambda: [0])

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(path, body, format="json")

    def get(self, path: str) -> Any:
        return self.client.get(path)

    def say(self, thread: str, who: str, body: str, *, audience: dict[str, Any] | None = None, **extra: Any) -> int:
        self.counter[0] += 1
        audience = audience or THREADS[thread]
        response = self.post(
            "/api/v1/messages",
            {
                "messages": [
                    {
                        "connector": {"type": "slack", "name": "acme"},
                        "thread": {"external_id": thread, "audience": audience, **extra},
                        "actor": {"external_id": who, "display_name": NAMES[who]},
                        "external_id": f"ts-{self.counter[0]}",
                        "body": body,
                        "created_at": f"2026-11-30T09:{self.counter[0] // 60:02d}:{self.counter[0] % 60:02d}Z",
                        "evidence": {"method": "connector_signed"},
                    }
                ]
            },
        )
        assert response.status_code == 201, response.json()
        return int(response.json()["messages"][0]["message_id"])

    def conversation(self, thread: str) -> Conversation:
        return Conversation.objects.get(agent=self.agent, external_thread_id=thread)

    def actor(self, external_id: str) -> Actor:
        return Actor.objects.get(connector__agent=self.agent, external_id=external_id)

    def session(self, thread: str, requester: str | None = None) -> int:
        body: dict[str, Any] = {"conversation_id": self.conversation(thread).pk}
        if requester:
            body["requester_actor_id"] = self.actor(requester).pk
        response = self.post("/api/v1/sessions", body)
        assert response.status_code == 201, response.json()
        return int(response.json()["session_id"])

    def turn(self, thread: str, who: str, text: str, **turn: Any) -> dict[str, Any]:
        message = self.say(thread, who, text)
        session = self.session(thread, who)
        response = self.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": message, **turn})
        assert response.status_code == 201, response.json()
        return dict(response.json())

    def round(self, turn_id: int, *calls: dict[str, Any]) -> Any:
        return self.post(f"/api/v1/turns/{turn_id}/rounds", {"calls": list(calls)})

    def reply(self, turn_id: int, body: str, **extra: Any) -> Any:
        return self.post(f"/api/v1/turns/{turn_id}/reply", {"body": body, **extra})

    def manager(self) -> Runtime:
        """The same agent through a new key with the manage scope only: the management reads
        (``/api/v1/memories``), which a runtime key may not call."""
        return runtime_for(self.agent, ApiScope.MANAGE)


NAMES = {"U100": "Victor", "U200": "Alice", "U300": "Bob"}
THREADS: dict[str, dict[str, Any]] = {
    "general": {"kind": "workspace"},
    "dm-alice": {"kind": "members", "readers": ["U200"]},
    "dm-bob": {"kind": "members", "readers": ["U300"]},
}


def runtime_for(agent: RuntimeAgent, *scopes: ApiScope) -> Runtime:
    """A client of ``agent`` with a new key of ``scopes`` (runtime only, as issued by default)."""
    client = APIClient()
    secret = api_key_create(agent=agent, scopes=scopes or [ApiScope.RUNTIME]).secret
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return Runtime(agent=agent, client=client)


@pytest.fixture
def runtime(db: None) -> Runtime:
    runtime = runtime_for(AgentFactory.create())
    for person in NAMES:
        runtime.say("general", person, "Morning all")
    return runtime


@pytest.fixture
def alice_browser(runtime: Runtime) -> APIClient:
    """Alice, logged in to Engram as herself (an end user, not an agent)."""
    runtime.say("dm-alice", "U200", "hi")
    user = User.objects.create_user(username="alice", password="pw")
    UserActor.objects.create(user=user, actor=runtime.actor("U200"))
    client = APIClient()
    client.force_login(user)
    return client
