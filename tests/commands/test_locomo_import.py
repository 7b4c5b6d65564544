"""The LoCoMo reader and importer, on a tiny file in the upstream schema with its known defects."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from itertools import pairwise
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.models import Actor, Connector
from bench.locomo import canonical_dia_id, parse_locomo, parse_session_datetime
from history.audience import Audience
from history.models import Conversation, EvidenceMethod, Message, MessageSourceEvidence

SAMPLE = [
    {
        "sample_id": "conv-t1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben, I adopted a dog last week!"},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Congrats! What's his name?"},
                {
                    "speaker": "Ana",
                    "dia_id": "D1:3",
                    "text": "Look at him.",
                    "img_url": ["https://example.org/dog.jpg"],
                    "blip_caption": "a photo of a brown dog on a sofa",
                    "query": "brown dog",
                },
            ],
            "session_2_date_time": "12:09 am on 19 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "How is the dog doing?"},
                {"speaker": "Ana", "dia_id": "D2:2", "text": "Great, we hike every Sunday now."},
                {"speaker": "Ben", "dia_id": "D2:3", "text": "Nice."},
                {"speaker": "Ana", "dia_id": "D2:4", "text": "You should join us."},
                {"speaker": "Ben", "dia_id": "D2:5", "text": "Maybe in July."},
            ],
        },
        "observation": {
            "session_1_observation": {
                "Ana": [["Ana adopted a dog in early May 2023.", "D1:1"]],
                "Ben": [["Ben congratulated Ana.", ["D1:2", "D9:9"]]],
            },
            "session_2_observation": {"Ana": [["Ana hikes every Sunday.", "D2:2"]], "Ben": []},
        },
        "session_summary": {"session_1_summary": "Ana adopted a dog."},
        "event_summary": {},
        "qa": [
            {"question": "What did Ana adopt?", "answer": "a dog", "evidence": ["D1:1; D1:3"], "category": 4},
            {"question": "When do they hike?", "answer": "Sundays", "evidence": ["D:2:2"], "category": 1},
            {"question": "When might Ben join?", "answer": 2023, "evidence": ["D2:05", "D"], "category": 2},
            {
                "question": "What cat did Ana adopt?",
                "adversarial_answer": "a tabby",
                "evidence": ["D7:1"],
                "category": 5,
            },
        ],
    }
]


def test_session_dates_are_aware_and_read_both_meridiems():
    assert parse_session_datetime("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_session_datetime("12:09 am on 19 June, 2023") == datetime(2023, 6, 19, 0, 9, tzinfo=UTC)
    assert parse_session_datetime("12:30 pm on 1 Jan 2024") == datetime(2024, 1, 1, 12, 30, tzinfo=UTC)
    assert parse_session_datetime("someday") is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("D1:3", "D1:3"), ("D:11:26", "D11:26"), ("D30:05", "D30:5"), ("d4:7", "D4:7"), ("D", None), ("D3", None)],
)
def test_dia_ids_are_canonicalised(raw: str, expected: str | None):
    assert canonical_dia_id(raw) == expected


def test_parser_normalises_evidence_and_counts_it():
    """Combined ids are split, malformed ones repaired or dropped, missing turns dropped: all counted."""
    parsed = parse_locomo(SAMPLE)
    (conversation,) = parsed.conversations
    assert [q.evidence for q in conversation.questions] == [("D1:1", "D1:3"), ("D2:2",), ("D2:5",), ()]
    report = parsed.report
    assert report.evidence_split == 1  # "D1:1; D1:3"
    assert report.evidence_reformatted == 2  # "D:2:2", "D2:05"
    assert report.evidence_dropped_malformed == 1  # "D"
    assert report.evidence_dropped_missing == 1  # "D7:1"
    assert report.evidence_kept == 4
    assert "1 dropped as malformed" in report.summary()


def test_parser_reads_turns_questions_and_observations():
    (conversation,) = parse_locomo(SAMPLE).conversations
    assert (conversation.sample_id, conversation.speaker_a, conversation.speaker_b) == ("conv-t1", "Ana", "Ben")
    turns = list(conversation.turns)
    assert [t.dia_id for t in turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3", "D2:4", "D2:5"]
    assert turns[0].created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert turns[2].created_at - turns[0].created_at == timedelta(minutes=2)
    assert turns[3].created_at == datetime(2023, 6, 19, 0, 9, tzinfo=UTC)
    assert all(a.created_at < b.created_at for a, b in pairwise(turns))
    assert turns[2].text == "Look at him. [image: a photo of a brown dog on a sofa]"
    assert turns[2].session == 1 and turns[2].speaker == "Ana"

    questions = conversation.questions
    assert (questions[2].answer, questions[2].category) == ("2023", 2)
    assert (questions[3].answer, questions[3].adversarial, questions[3].category) == ("a tabby", True, 5)

    observations = [(o.speaker, o.fact, o.dia_id) for o in conversation.observations]
    assert observations == [
        ("Ana", "Ana adopted a dog in early May 2023.", "D1:1"),
        ("Ben", "Ben congratulated Ana.", "D1:2"),
        ("Ana", "Ana hikes every Sunday.", "D2:2"),
    ]


def test_parser_tolerates_gaps():
    """Missing dates, empty turns and duplicate ids do not stop a file from loading."""
    data = [
        {
            "sample_id": "conv-gaps",
            "conversation": {
                "speaker_a": "A",
                "speaker_b": "B",
                "session_1_date_time": "not a date",
                "session_1": [
                    {"speaker": "A", "dia_id": "D1:1", "text": "hello"},
                    {"speaker": "B", "dia_id": "D1:1", "text": "hi"},
                    {"speaker": "A", "dia_id": "D1:3", "text": "  "},
                ],
            },
        }
    ]
    parsed = parse_locomo(data)
    (conversation,) = parsed.conversations
    assert [t.dia_id for t in conversation.turns] == ["D1:1", "D1:2"]
    assert parsed.report.dates_unparsed == 1
    assert parsed.report.turns_skipped_empty == 1
    assert parsed.report.turn_ids_repaired == 1
    assert conversation.questions == () and conversation.observations == ()


@pytest.mark.django_db
def test_import_is_idempotent_and_readable_by_both_speakers(tmp_path: Path):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(SAMPLE))

    def run() -> str:
        out = StringIO()
        call_command("import_locomo", file=str(path), tenant="bench", verbosity=0, stdout=out)
        return out.getvalue()

    first = run()
    assert "8 messages created, 0 already present" in first
    assert "1 dropped as malformed" in first
    second = run()
    assert "0 messages created, 8 already present" in second

    connector = Connector.objects.get(type="locomo", name="conv-t1")
    assert connector.agent.tenant.slug == "bench"
    ana, ben = (Actor.objects.get(connector=connector, external_id=name) for name in ("Ana", "Ben"))
    conversation = Conversation.objects.get(connector=connector)
    assert conversation.audience == Audience.members("locomo:conv-t1", [ana.pk, ben.pk])
    messages = list(Message.objects.filter(conversation=conversation).order_by("created_at", "id"))
    assert [m.external_id for m in messages] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3", "D2:4", "D2:5"]
    assert messages[0].actor == ana and messages[1].actor == ben
    assert messages[0].created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert all(m.audience == conversation.audience for m in messages)
    assert MessageSourceEvidence.objects.filter(
        message__in=messages, method=EvidenceMethod.OPERATOR_IMPORT
    ).count() == len(messages)
