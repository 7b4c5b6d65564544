"""The claim guard and the ledger instruction, on the phrasings that matter."""

from __future__ import annotations

import pytest

from memory.claims import ledger_instruction, unsupported_claims
from memory.models import MemoryOperation, Operation


def ops(*kinds: str, subject_changed: bool = False) -> list[MemoryOperation]:
    return [
        MemoryOperation(
            kind=kind,
            entry_id=n + 1,
            revision_id=n + 10,
            revision_number=1,
            subject_changed=subject_changed and kind == Operation.AMEND,
        )
        for n, kind in enumerate(kinds)
    ]


@pytest.mark.parametrize(
    ("reply", "ledger", "claims"),
    [
        (
            "I've re-attributed the earlier memory to Victor and marked the old entry as superseded.",
            ops("remember", "remember"),
            {"reattribution", "supersession"},
        ),
        ("I stored it anonymously because this is a shared workspace.", ops("remember"), {"anonymous_storage"}),
        ("I have deleted your old address.", ops(), {"deletion"}),
        ("I forgot that detail as you asked.", ops("amend"), {"deletion"}),
        ("I updated your preference.", ops("remember"), {"supersession"}),
        ("I updated your preference.", ops("amend"), set()),
        ("I've re-attributed it to Sam.", ops("amend"), {"reattribution"}),
        ("I've re-attributed it to Sam.", ops("amend", subject_changed=True), set()),
        ("I removed it from memory.", ops("forget"), set()),
        ("Noted: you prefer tabs.", ops("remember"), set()),
        ("Victor updated the doc yesterday.", ops(), set()),  # not first person
        ("Should I update the memory?", ops(), set()),  # not past tense
    ],
)
def test_the_claim_guard_flags_exactly_the_unlicensed_mutation_claims(
    reply: str, ledger: list[MemoryOperation], claims: set[str]
) -> None:
    assert {c.kind for c in unsupported_claims(reply, ledger)} == claims


def test_the_ledger_instruction_names_each_operation_and_the_prohibitions_that_apply() -> None:
    text = ledger_instruction(ops("remember", "remember"))
    assert text.count("- remember: created memory [m:") == 2
    assert "[m:0000000a]" in text and "[m:0000000b]" in text
    for prohibited in ("superseded", "re-attributed", "deleted or forgotten", "stored anonymously"):
        assert prohibited in text
    after_amend = ledger_instruction(ops("amend", subject_changed=True))
    assert "re-attributed to someone else" not in after_amend and "stored anonymously" in after_amend
    assert "none: no memory was created" in ledger_instruction([])
