"""The operator's amendment form: the fields of a new revision, prefilled from the current one."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import AdminSplitDateTime, ForeignKeyRawIdWidget

from accounts.models import Actor
from memory.models import BeliefType, MemoryEntry, MemoryRevision, Portability
from memory.services import KEEP


def _to_the_second(moment: datetime | None) -> datetime | None:
    return moment.replace(microsecond=0) if moment is not None else None


class AmendForm(forms.Form):
    """An operator's amendment: the fields of a belief an operator may restate. Initial values are
    the current revision's; only the fields that differ from it are passed to ``revision_amend``."""

    expected_revision = forms.IntegerField(widget=forms.HiddenInput)
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 90}), strip=True)
    subject = forms.ModelChoiceField(queryset=Actor.objects.none(), required=False, help_text="Empty: not resolved.")
    belief_type = forms.ChoiceField(choices=BeliefType.choices)
    portability = forms.ChoiceField(choices=Portability.choices)
    confidence = forms.FloatField(min_value=0, max_value=1)
    salience = forms.FloatField(min_value=0, max_value=1)
    always_on = forms.BooleanField(required=False, label="Always on")
    valid_from = forms.SplitDateTimeField(widget=AdminSplitDateTime, label="Valid from")
    valid_to = forms.SplitDateTimeField(widget=AdminSplitDateTime, required=False, label="Valid to")

    def __init__(self, *args: Any, entry: MemoryEntry, admin_site: admin.AdminSite, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        subject = self.fields["subject"]
        assert isinstance(subject, forms.ModelChoiceField)
        # The agent's own people only: a subject is never a person of another agent or tenant.
        subject.queryset = Actor.objects.filter(connector__agent_id=entry.agent_id)
        subject.widget = ForeignKeyRawIdWidget(MemoryRevision._meta.get_field("subject").remote_field, admin_site)

    @staticmethod
    def initial_for(revision: MemoryRevision) -> dict[str, Any]:
        return {
            "expected_revision": revision.pk,
            "body": revision.body,
            "subject": revision.subject_id,
            "belief_type": revision.belief_type,
            "portability": revision.portability,
            "confidence": revision.confidence,
            "salience": revision.salience,
            "always_on": revision.always_on,
            "valid_from": revision.valid_from,
            "valid_to": revision.valid_to,
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        valid_from, valid_to = cleaned.get("valid_from"), cleaned.get("valid_to")
        if valid_from and valid_to and valid_to <= valid_from:
            self.add_error("valid_to", "Must be after “valid from”.")
        return cleaned

    def amendment(self, current: MemoryRevision) -> dict[str, Any]:
        """``revision_amend`` keyword arguments for what the operator changed relative to ``current``."""
        data = self.cleaned_data
        subject = data["subject"]
        changes: dict[str, Any] = {
            name: data[name]
            for name in ("belief_type", "portability", "confidence", "salience", "always_on")
            if data[name] != getattr(current, name)
        }
        # The form shows times to the second: an untouched time keeps the revision's exact value.
        for name in ("valid_from", "valid_to"):
            if _to_the_second(data[name]) != _to_the_second(getattr(current, name)):
                changes[name] = data[name]
        subject_id = subject.pk if subject is not None else None
        return {
            "body": data["body"] if data["body"] != current.body else None,
            "subject_id": subject_id if subject_id != current.subject_id else KEEP,
            "changes": changes,
        }
