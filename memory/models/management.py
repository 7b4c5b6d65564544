"""The audit of the management API's reads: which API key read which of its agent's memories, when;
append-only (the database refuses UPDATE and DELETE).
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from accounts.models import ApiKey, RuntimeAgent
from history.models import protect_rows
from memory.models.base import choices_constraint


class ManagementEndpoint(models.TextChoices):
    """The management reads, by their OpenAPI operation ids."""

    MEMORIES_LIST = "memories_list", "GET /api/v1/memories"
    MEMORIES_RETRIEVE = "memories_retrieve", "GET /api/v1/memories/<id>"


class ManagementReadEvent(models.Model):
    """One management read (``memory.apis.data``), written before its response is sent: a read whose
    audit row cannot be written fails. Ids and filters only, never memory text; the entry ids are
    plain numbers, so the row outlives an erasure of what it names without pointing at it."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    api_key = models.ForeignKey(ApiKey, on_delete=models.PROTECT, related_name="+")
    endpoint = models.CharField(max_length=32, choices=ManagementEndpoint.choices)
    #: The list's filters and page parameters as validated (``{}`` for the detail).
    filters = models.JSONField(default=dict, blank=True)
    #: The entries the response showed: the list's page, in order, or the one entry read.
    entry_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [choices_constraint("management_read_endpoint_valid", "endpoint", ManagementEndpoint)]
        indexes = [models.Index(fields=["agent", "created_at"], name="management_read_agent_time")]
        triggers = [protect_rows("append_only")]
