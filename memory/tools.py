"""The memory verbs and ``search_history`` as tool definitions for models, in the OpenAI and
Anthropic function-calling formats.

Each definition's parameters are generated from the verb's own request serializer (``memory.apis.verbs.VERBS``),
the one the rounds endpoint validates with, so a model that follows the schema is accepted and the
schema refuses what the API refuses (tests/clients/test_tool_schemas.py checks both directions).
No definition has an agent, audience or perspective parameter: those are bound from the API key and
the turn (spec 003, "The tool"); the ``verb`` is the tool's name. Bound to a turn, the list is empty
once the turn has no round left (spec 000, "Bounded tool rounds"): the model is not asked to stop
calling tools, it is unable to.
"""

from __future__ import annotations

from typing import Any, Literal

from rest_framework import serializers

from history.models import Turn
from memory.apis.verbs import VERBS, ParticipantRefField, VerbIn
from memory.models import PERSON_BELIEF_TYPES
from memory.turns import MAX_CALLS_PER_ROUND, MAX_ROUNDS, TOOLS, tools_offered

ToolFormat = Literal["openai", "anthropic"]
FORMATS: tuple[ToolFormat, ...] = ("openai", "anthropic")

#: Text that is not blank (DRF trims it and refuses an empty result) and holds no NUL character
#: (PostgreSQL cannot store one; the API refuses it). The same syntax in ECMA and Python regexes.
NOT_BLANK = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"
NO_NUL = "^[^\\u0000]*$"
#: Dates the API can hold in every time zone (Python's datetime ends at year 1 and 9999): 1000-2999.
DATE_TIME_YEARS = "^[12][0-9]{3}-"

IDS = (
    "Memory ids look like m:0000002a; the memory block in your prompt and recall show them in brackets, "
    "[m:0000002a]. Cite the ids of the memories your reply relies on, in that bracketed form."
)
ROUNDS = (
    f"You have at most {MAX_ROUNDS} rounds of tool calls in a turn, at most {MAX_CALLS_PER_ROUND} calls a "
    "round; every call of a round is checked before any runs, so one malformed call rejects the whole "
    "round. After the last round no tools are offered: answer with what you have."
)

DESCRIPTIONS: dict[str, str] = {
    "remember": (
        "Store one new memory: a fact, preference, decision or instruction, in natural prose without "
        'names. Every fact about a person names whom it is about in subject: "speaker" for the person '
        "you are answering, or another participant's external_id (the turn lists the participants); a "
        "preference, user_model_attr or relationship without a subject is refused. Project facts may "
        "stay subject-less. When the belief comes from someone else's message in front of you (the "
        "history you were given or a search_history hit), name it in source_message_ids: whoever wrote "
        "those messages is whose words it rests on. remember only creates: it never changes, replaces or "
        "supersedes an existing memory. To correct one, recall it and amend it by id; to retire one, "
        "forget it. Who may see it comes from the conversation, never from arguments."
    ),
    "recall": (
        "Search the memories you may use in this conversation; returns them ranked, with ids. Search "
        "before asking the user to repeat personal context (where they live, what they prefer, who they "
        "work with): a fact missing from the memory block in your prompt is not thereby unknown. Name the "
        "fact you need (e.g. 'home location'), even when the question is about another topic. An empty "
        "query lists the most relevant recent memories. subjects: whom the memories are about (as for "
        "remember's subject); memories about them rank higher, and nothing else is left out. type_hints: "
        "only these belief types. as_of: when a fact applied; known_at: what had been recorded by then. "
        + IDS
        + " "
        + ROUNDS
    ),
    "amend": (
        "Correct an existing memory by its id (from recall or the memory block): writes a new revision "
        "with the fields you give; the earlier revision stays in its history. Give at least one field to "
        "change. Change the subject (subject or subject_actor_id, as for remember) only to re-attribute "
        "the memory to someone else."
    ),
    "forget": (
        "Retire a memory by its id from live recall. Its history and any messages already delivered are "
        "kept. An unknown or already-forgotten id changes nothing, and you must not say it was forgotten."
    ),
    "request_memory_sharing": (
        "Ask the people a private memory rests on for permission to share that exact memory into another "
        "conversation (conversation_id): everyone who said it, and the person it is about. This only asks: "
        "nothing is shared unless every one of them confirms (or an operator approves), so never tell anyone "
        "it was shared."
    ),
    "search_history": (
        "Search earlier messages of the conversations you may see here, for what was said (wording, "
        "decisions, dates) rather than stored facts; each hit comes with up to two neighbouring messages "
        "and stable message ids. The message you are answering and the messages already in your context "
        "are excluded. Filters (actor: an id, a name or 'requester'; conversation; connector; since and "
        "until) only narrow the search. limit: hits to return, 8 by default, at most 20."
    ),
}

#: What a model should know about all the tools at once (the endpoint's ``instructions``).
INSTRUCTIONS = IDS + " " + ROUNDS

#: Parameters of the round that are the tool itself, not an argument.
BOUND = {"verb"}


def field_schema(field: serializers.Field[Any, Any, Any, Any]) -> dict[str, Any]:
    """The JSON Schema of one serializer field: its type, bounds, choices, pattern and default."""
    schema: dict[str, Any]
    if isinstance(field, serializers.BooleanField):
        schema = {"type": "boolean"}
    elif isinstance(field, serializers.IntegerField):
        schema = {"type": "integer"}
        if field.min_value is not None:
            schema["minimum"] = field.min_value
        if field.max_value is not None:
            schema["maximum"] = field.max_value
    elif isinstance(field, serializers.FloatField):
        schema = {"type": "number"}
        if field.min_value is not None:
            schema["minimum"] = field.min_value
        if field.max_value is not None:
            schema["maximum"] = field.max_value
    elif isinstance(field, serializers.DateTimeField):
        schema = {"type": "string", "format": "date-time", "pattern": DATE_TIME_YEARS}
    elif isinstance(field, serializers.ChoiceField):
        schema = {"type": "string", "enum": [str(choice) for choice in field.choices]}
    elif isinstance(field, serializers.RegexField):
        regex = next(v.regex for v in field.validators if hasattr(v, "regex"))
        schema = {"type": "string", "pattern": regex.pattern}
        if field.max_length is not None:
            schema["maxLength"] = field.max_length
    elif isinstance(field, serializers.CharField):
        schema = {"type": "string", "pattern": NO_NUL if field.allow_blank else NOT_BLANK}
        if field.max_length is not None:
            schema["maxLength"] = field.max_length
    elif isinstance(field, ParticipantRefField):
        # Text names a participant by "speaker" or external_id, an integer by actor_id; each keyword
        # applies to its own type only.
        schema = {
            "type": ["string", "integer"],
            "pattern": NOT_BLANK,
            "maxLength": field.max_length,
            "minimum": field.min_value,
            "maximum": field.max_value,
        }
    elif isinstance(field, serializers.ListField):
        schema = {"type": "array", "items": field_schema(field.child)}
        if field.min_length is not None:
            schema["minItems"] = field.min_length
        if field.max_length is not None:
            schema["maxItems"] = field.max_length
    else:  # pragma: no cover - a verb gained a field kind this mapping does not know
        raise TypeError(f"no JSON Schema for {type(field).__name__}")
    if field.allow_null:
        schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
    if field.help_text:
        schema["description"] = str(field.help_text)
    default = field.default
    if default is not serializers.empty and not callable(default):
        schema["default"] = default
    return schema


def parameters(serializer_class: type[VerbIn]) -> dict[str, Any]:
    """A verb's arguments as one JSON Schema object: its fields but the bound ones, nothing else."""
    fields = {name: field for name, field in serializer_class().fields.items() if name not in BOUND}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: field_schema(field) for name, field in fields.items()},
        "required": [name for name, field in fields.items() if field.required],
        "additionalProperties": False,
    }
    if serializer_class.__name__ == "AmendIn":
        # AmendIn.validate: an amend changes at least one field besides the id.
        schema["minProperties"] = 2
    if "subject" in fields:
        # one_subject: the subject is named once, as a reference or as an actor id.
        schema["not"] = {"required": ["subject", "subject_actor_id"]}
    if serializer_class.__name__ == "RememberIn":
        # The round refuses a belief about a person without a subject (subject_required).
        person = {"belief_type": {"enum": sorted(PERSON_BELIEF_TYPES)}}
        schema["if"] = {"properties": person, "required": ["belief_type"]}
        schema["then"] = {
            "anyOf": [
                {"required": ["subject"]},
                {"required": ["subject_actor_id"], "properties": {"subject_actor_id": {"type": "integer"}}},
            ]
        }
    return schema


def definitions(format: ToolFormat, names: list[str] | tuple[str, ...] = TOOLS) -> list[dict[str, Any]]:
    """The tools ``names`` in ``format``, in the order of ``TOOLS``."""
    tools = []
    for name in TOOLS:
        if name not in names:
            continue
        description, schema = DESCRIPTIONS[name], parameters(VERBS[name])
        if format == "openai":
            tools.append(
                {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
            )
        else:
            tools.append({"name": name, "description": description, "input_schema": schema})
    return tools


def definitions_for_turn(turn: Turn, format: ToolFormat) -> list[dict[str, Any]]:
    """The tools still offered in ``turn``: none once it has used its last round or is closed."""
    return definitions(format, tools_offered(turn))
