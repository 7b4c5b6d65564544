"""The memory verbs' request schemas, one per verb and strict (remember has no entry id, revision or
supersede flag), and the validation of a whole round before any call executes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from config.api import MAX_ID, StrictSerializer
from memory.models import Authority, BeliefType, Portability
from memory.retrieval.render import MAX_ALLOWANCE, MIN_ALLOWANCE
from memory.turns import MAX_CALLS_PER_ROUND, VerbCall

#: A memory id as rendered: a revision's bigint id in hex, so at most 7fffffffffffffff (MAX_ID).
MEMORY_ID = r"^\[?m:(?:[0-9a-f]{8,15}|[0-7][0-9a-f]{15})\]?$"


def memory_id_field() -> serializers.RegexField:
    return serializers.RegexField(MEMORY_ID, help_text="A memory id as rendered, e.g. m:0000002a.")


def verb_field(name: str) -> serializers.ChoiceField:
    """Each verb's schema admits exactly its own name, so the documented oneOf is unambiguous."""
    return serializers.ChoiceField(choices=[name])


#: At most this many messages may be named as what one belief was learned from.
MAX_SOURCE_MESSAGES = 20


def subject_field() -> serializers.CharField:
    return serializers.CharField(
        max_length=200,
        required=False,
        help_text='Whom the belief is about: "speaker" (the author of the message being answered) or a '
        "participant's external_id, as the turn's start lists them. Required for preference, "
        "user_model_attr and relationship.",
    )


def subject_actor_id_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_ID,
        help_text="Whom the belief is about, as a participant's actor_id (instead of subject).",
    )


#: At most this many people one recall may name as whom the wanted memories are about.
MAX_RECALL_SUBJECTS = 10
#: The longest subject reference (as for remember's ``subject``).
MAX_SUBJECT_REFERENCE = 200


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "minLength": 1, "maxLength": MAX_SUBJECT_REFERENCE},
            {"type": "integer", "minimum": 1, "maximum": MAX_ID},
        ]
    }
)
class ParticipantRefField(serializers.Field[Any, str | int, Any, Any]):
    """One person named the way remember names its subject: text is ``"speaker"`` or a participant's
    external_id (even one made of digits), an integer is a participant's actor_id. The round resolves
    it among the turn's participants."""

    default_error_messages = {
        "invalid": "must be \"speaker\", a participant's external_id (text) or a participant's actor_id (integer)",
    }
    #: The bounds of each form: the text's length, the actor id's range.
    max_length = MAX_SUBJECT_REFERENCE
    min_value = 1
    max_value = MAX_ID

    def to_internal_value(self, data: Any) -> str | int:
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, int) and not isinstance(data, bool):
            if not self.min_value <= data <= self.max_value:
                self.fail("invalid")
            return data
        if not isinstance(data, str):
            self.fail("invalid")
        text = data.strip()
        if not text or len(text) > self.max_length or "\x00" in text:
            self.fail("invalid")
        return text

    def to_representation(self, value: Any) -> Any:
        return value


def one_subject(attrs: dict[str, Any]) -> dict[str, Any]:
    if "subject" in attrs and "subject_actor_id" in attrs:
        raise serializers.ValidationError({"subject": ["name the subject once: subject or subject_actor_id"]})
    return attrs


class VerbIn(StrictSerializer):
    """One memory verb call; each verb's ``verb`` field selects its schema."""


class RememberIn(VerbIn):
    verb = verb_field("remember")
    body = serializers.CharField(max_length=2_000, help_text="Natural prose; names belong in subject, not here.")
    belief_type = serializers.ChoiceField(choices=BeliefType.choices, default=BeliefType.PROJECT_FACT)
    subject = subject_field()
    subject_actor_id = subject_actor_id_field()
    source_message_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID),
        required=False,
        min_length=1,
        max_length=MAX_SOURCE_MESSAGES,
        help_text="The messages the belief was learned from, each in front of this turn (the inbound message, "
        "the loaded history, this turn's search results). Their authors are whose words it rests on. "
        "Default: the inbound message.",
    )
    portability = serializers.ChoiceField(choices=Portability.choices, default=Portability.PORTABLE)
    authority = serializers.ChoiceField(
        choices=[Authority.USER_STATED, Authority.INFERRED], default=Authority.USER_STATED
    )
    confidence = serializers.FloatField(min_value=0, max_value=1, default=0.8)
    salience = serializers.FloatField(min_value=0, max_value=1, default=0.5)
    always_on = serializers.BooleanField(default=False)
    valid_from = serializers.DateTimeField(required=False)
    valid_to = serializers.DateTimeField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return one_subject(attrs)


class RecallIn(VerbIn):
    verb = verb_field("recall")
    query = serializers.CharField(max_length=2_000, allow_blank=True)
    as_of = serializers.DateTimeField(required=False)
    known_at = serializers.DateTimeField(required=False)
    max_tokens = serializers.IntegerField(min_value=MIN_ALLOWANCE, max_value=MAX_ALLOWANCE, required=False)
    max_items = serializers.IntegerField(min_value=1, max_value=40, default=12)
    subjects = serializers.ListField(
        child=ParticipantRefField(),
        required=False,
        max_length=MAX_RECALL_SUBJECTS,
        help_text='Whom the memories you need are about, each named as for remember\'s subject: "speaker", a '
        "participant's external_id, or a participant's actor_id (an integer). Memories about them rank higher; "
        "no other memory ranks lower or is left out for it.",
    )
    type_hints = serializers.ListField(
        child=serializers.ChoiceField(choices=BeliefType.choices),
        required=False,
        max_length=len(BeliefType.choices),
        help_text="Only memories of these belief types are returned. Empty or absent: every type.",
    )


class AmendIn(VerbIn):
    verb = verb_field("amend")
    id = memory_id_field()
    body = serializers.CharField(max_length=2_000, required=False)
    subject = subject_field()
    subject_actor_id = subject_actor_id_field()
    belief_type = serializers.ChoiceField(choices=BeliefType.choices, required=False)
    portability = serializers.ChoiceField(choices=Portability.choices, required=False)
    confidence = serializers.FloatField(min_value=0, max_value=1, required=False)
    salience = serializers.FloatField(min_value=0, max_value=1, required=False)
    always_on = serializers.BooleanField(required=False)
    valid_from = serializers.DateTimeField(required=False)
    valid_to = serializers.DateTimeField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if set(attrs) <= {"verb", "id"}:
            raise serializers.ValidationError("an amend changes at least one field")
        return one_subject(attrs)


class ForgetIn(VerbIn):
    verb = verb_field("forget")
    id = memory_id_field()


class RequestSharingIn(VerbIn):
    verb = verb_field("request_memory_sharing")
    id = memory_id_field()
    conversation_id = serializers.IntegerField(
        min_value=1, max_value=MAX_ID, help_text="The conversation to share it into."
    )


class SearchHistoryIn(VerbIn):
    verb = verb_field("search_history")
    query = serializers.CharField(max_length=2_000)
    actor = serializers.CharField(max_length=200, required=False, help_text='An actor id, name, or "requester".')
    conversation_id = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False)
    connector = serializers.RegexField(r"^[a-z0-9_-]{1,50}:[A-Za-z0-9_.@-]{1,200}$", required=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    limit = serializers.IntegerField(min_value=1, max_value=20, default=8)


VERBS: dict[str, type[VerbIn]] = {
    "remember": RememberIn,
    "recall": RecallIn,
    "amend": AmendIn,
    "forget": ForgetIn,
    "request_memory_sharing": RequestSharingIn,
    "search_history": SearchHistoryIn,
}


class RoundIn(StrictSerializer):
    calls = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=MAX_CALLS_PER_ROUND)


class RoundDoc(StrictSerializer):
    """The documented shape of a round: each call is one verb's strict schema, chosen by ``verb``."""

    calls = serializers.ListField(
        child=PolymorphicProxySerializer(
            component_name="VerbCall",
            serializers={name: serializer for name, serializer in VERBS.items()},
            resource_type_field_name="verb",
        ),
        min_length=1,
        max_length=MAX_CALLS_PER_ROUND,
    )


def validate_round(data: Any) -> list[VerbCall]:
    """Validate every call before any executes; report each bad call by its position."""
    envelope = RoundIn(data=data)
    envelope.is_valid(raise_exception=True)
    calls, errors = [], {}
    for index, raw in enumerate(envelope.validated_data["calls"]):
        serializer_class = VERBS.get(str(raw.get("verb")))
        if serializer_class is None:
            errors[str(index)] = {"verb": [f"one of {sorted(VERBS)}"]}
            continue
        call = serializer_class(data=raw)
        if not call.is_valid():
            errors[str(index)] = call.errors
            continue
        args = dict(call.validated_data)
        calls.append(VerbCall(verb=args.pop("verb"), args=args))
    if errors:
        raise serializers.ValidationError({"calls": errors})
    return calls
