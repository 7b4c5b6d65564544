"""Tenants, the agents that act in them, and the people those agents talk to.

A ``RuntimeAgent`` is a *perspective*: every memory, message and trace belongs to exactly one, and
every read starts from it. Agents authenticate with API keys stored only as SHA-256 digests.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q

from config.triggers import must_hold


class Tenant(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    # Retention: older rows are erased by the periodic task (memory.tasks.enforce_retention) with the
    # cascade of an erasure on request. Empty: kept until deleted on request.
    message_retention_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Erase messages older than this many days (and what was built from them)."
    )
    memory_retention_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Erase memories not revised for this many days (and what was built from them)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class RuntimeAgent(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="agents")
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="agent_unique_name_per_tenant")]

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant.slug})"


class ApiScope(models.TextChoices):
    """What a key may call (accounts.permissions); a key carries one or both."""

    RUNTIME = "runtime", "runtime: what an agent runtime calls (messages, sessions, turns, tools, traces)"
    MANAGE = "manage", "manage: the management reads of the agent's memories (list and detail)"


def default_api_key_scopes() -> list[str]:
    """A key issued without saying otherwise is a runtime key: the management reads are opted into."""
    return [ApiScope.RUNTIME.value]


class ApiKey(models.Model):
    """An agent's credential. Only the digest is kept; the secret is shown once, at creation."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.CASCADE, related_name="api_keys")
    label = models.CharField(max_length=200, blank=True, default="")
    prefix = models.CharField(max_length=16, help_text="The public start of the key, to tell keys apart.")
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the whole key, hex.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="From this moment the key no longer authenticates. Empty: never."
    )
    #: Refreshed at most once a minute (accounts.authentication), so it is not a write per request.
    last_used_at = models.DateTimeField(null=True, blank=True)
    scopes = ArrayField(
        models.CharField(max_length=16, choices=ApiScope.choices),
        default=default_api_key_scopes,
        help_text="What the key may call: runtime, manage or both.",
    )

    class Meta:
        constraints = [
            # Known scopes only, and at least one: a key that may call nothing is a mistake, not a key.
            models.CheckConstraint(
                condition=Q(scopes__contained_by=ApiScope.values) & ~Q(scopes=[]), name="api_key_scopes_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.agent.name})"


class Connector(models.Model):
    """Where an agent meets people (a Slack workspace, an email domain). Its namespace is ``type:name``."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="connectors")
    type = models.CharField(max_length=50)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "type", "name"], name="connector_unique_per_agent")]

    def __str__(self) -> str:
        return self.namespace

    @property
    def namespace(self) -> str:
        return f"{self.type}:{self.name}"


class Actor(models.Model):
    """A person (or bot) as one connector knows them. The id is stable; the display name may change."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="actors")
    connector = models.ForeignKey(Connector, on_delete=models.PROTECT, related_name="actors")
    external_id = models.CharField(max_length=200)
    display_name = models.CharField(max_length=200)
    is_agent = models.BooleanField(default=False, help_text="The agent's own identity on this connector.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["connector", "external_id"], name="actor_unique_external_id"),
        ]
        triggers = [
            must_hold(
                "tenant_is_connectors",
                "NEW.tenant_id = (SELECT a.tenant_id FROM accounts_connector c"
                " JOIN accounts_runtimeagent a ON a.id = c.agent_id WHERE c.id = NEW.connector_id)",
                "an actor belongs to the tenant of its connector",
            )
        ]

    def __str__(self) -> str:
        # The admin's name for the actor (links, choices, titles): the display name, which anyone may
        # choose, between FIRST STRONG ISOLATE and POP DIRECTIONAL ISOLATE, so that a right-to-left
        # override in it cannot reverse the id after it. ``label`` is what models read.
        return actor_label(f"\u2068{self.display_name}\u2069", self.external_id)

    @property
    def label(self) -> str:
        return actor_label(self.display_name, self.external_id)


def actor_label(display_name: str, external_id: str) -> str:
    """How an actor is rendered to a model: current display name plus the stable external id."""
    return f"{display_name} (id {external_id})"


class IdentityLink(models.Model):
    """A verified statement, in one perspective, that two actors are the same person.

    It opens one narrow path: single-reader (direct-message) evidence may follow that person into
    their other direct conversation with the agent. Revoking it separates them again.
    """

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.CASCADE, related_name="identity_links")
    actor_a = models.ForeignKey(Actor, on_delete=models.CASCADE, related_name="+")
    actor_b = models.ForeignKey(Actor, on_delete=models.CASCADE, related_name="+")
    proof = models.TextField(help_text="How the link was verified (e.g. a signed-in confirmation on both sides).")
    verified_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(actor_a__lt=F("actor_b")), name="identity_link_ordered_pair"),
            models.CheckConstraint(condition=~Q(proof=""), name="identity_link_has_proof"),
            models.UniqueConstraint(
                fields=["agent", "actor_a", "actor_b"],
                condition=Q(revoked_at__isnull=True),
                name="identity_link_one_live_per_pair",
            ),
        ]
        triggers = [
            must_hold(
                "actors_in_perspective",
                "(SELECT count(*) FROM accounts_actor x JOIN accounts_connector c ON c.id = x.connector_id"
                " WHERE x.id IN (NEW.actor_a_id, NEW.actor_b_id) AND c.agent_id = NEW.agent_id) = 2",
                "both linked actors belong to the link''s agent",
            )
        ]


class UserActor(models.Model):
    """Which actors a logged-in end user is: they may open turns of conversations those actors read."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="actor_links")
    actor = models.ForeignKey(Actor, on_delete=models.CASCADE, related_name="user_links")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "actor"], name="user_actor_unique")]


class OperatorScope(models.Model):
    """A staff user's tenant: operators see and edit only their tenants' agents in the admin."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="operator_scopes")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="operator_scopes")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="operator_scope_unique")]
