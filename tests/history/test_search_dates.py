"""History search's query forming reads the dates a query names, and ranking lifts what was written then
and, for a question asking when, what tells a time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.retrieval.history_search.query import NamedDate, named_dates
from memory.retrieval.history_search.ranking import Candidate, score_candidates
from tests.factories import ranking_signals

NOW = datetime(2026, 12, 5, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did Tim read on 8th December, 2023?", (NamedDate(year=2023, month=12, day=8),)),
        ("Which photo did John share on December 1,2023?", (NamedDate(year=2023, month=12, day=1),)),
        ("What did Nate share in August 2022?", (NamedDate(year=2022, month=8),)),
        ("When did John get injured in 2023?", (NamedDate(year=2023),)),
        ("Where was Tim in the second week of November?", (NamedDate(month=11),)),
        ("How is the garden?", ()),
        ("May I ask how the garden is?", ()),
    ],
)
def test_a_query_names_days_months_and_years_and_nothing_else(text: str, expected: tuple[NamedDate, ...]) -> None:
    """The most specific reading wins: "8th December, 2023" names that day, not also December and 2023."""
    assert named_dates(text, NOW) == expected


def test_relative_times_are_read_against_the_moment_of_the_search() -> None:
    (yesterday,) = named_dates("what did we decide yesterday?", NOW)
    assert yesterday.covers(datetime(2026, 12, 4, 23, 0, tzinfo=UTC))
    assert not yesterday.covers(datetime(2026, 12, 5, 9, 0, tzinfo=UTC))
    (last_year,) = named_dates("the trip last year", NOW)
    assert last_year == NamedDate(year=2025)


def test_a_named_date_reorders_the_pool_and_adds_nothing() -> None:
    """Of two equal matches, the one written on the named day comes first; the pool is unchanged."""
    then = Candidate(
        message_id=1, conversation_id=1, actor_id=None, created_at=datetime(2023, 5, 8, 13, tzinfo=UTC), match=0.5
    )
    other = Candidate(
        message_id=2, conversation_id=1, actor_id=None, created_at=datetime(2023, 6, 8, 13, tzinfo=UTC), match=0.6
    )
    signals = ranking_signals(NOW, dates=named_dates("What did Caroline do on 8 May, 2023?", NOW))
    scored = score_candidates([other, then], signals)
    assert [message_id for _, message_id, _ in scored] == [1, 2]
    assert scored[0][2]["date"] == 1.0 and scored[1][2]["date"] == 0.0


MAY_8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def candidate(message_id: int, match: float, created_at: datetime = MAY_8) -> Candidate:
    return Candidate(message_id=message_id, conversation_id=1, actor_id=None, created_at=created_at, match=match)


def test_a_question_asking_when_lifts_a_line_that_tells_a_time() -> None:
    """ "When did Caroline go to the support group?" is answered by the line that says "yesterday": of two
    close matches, the one that tells a time comes first; a question that does not ask when is unmoved."""
    timed, plain = candidate(1, 0.45), candidate(2, 0.55)
    asking = ranking_signals(NOW, asks_when=True, timed=frozenset({1}))
    assert [message_id for _, message_id, _ in score_candidates([plain, timed], asking)] == [1, 2]
    not_asking = ranking_signals(NOW, asks_when=False, timed=frozenset({1}))
    assert [message_id for _, message_id, _ in score_candidates([plain, timed], not_asking)] == [2, 1]
