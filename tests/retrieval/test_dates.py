"""A text's relative and partial times are resolved against when it was written."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memory.retrieval.dates import Span, asks_when, mentioned_spans

#: A Monday.
MAY_8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
#: A Friday.
JUNE_9 = datetime(2023, 6, 9, 19, 55, tzinfo=UTC)


def day(year: int, month: int, number: int) -> Span:
    return Span.day(date(year, month, number))


@pytest.mark.parametrize(
    ("text", "written", "expected"),
    [
        ("I went to a support group yesterday and it was so powerful.", MAY_8, (day(2023, 5, 7),)),
        ("Last night was amazing!", MAY_8, (day(2023, 5, 7),)),
        ("We're celebrating tonight", MAY_8, (day(2023, 5, 8),)),
        ("The opening night is tomorrow.", MAY_8, (day(2023, 5, 9),)),
        ("the day before yesterday", MAY_8, (day(2023, 5, 6),)),
        ("I went to an LGBTQ conference two days ago", MAY_8, (day(2023, 5, 6),)),
        ("I ran a charity race last Saturday", MAY_8, (day(2023, 5, 6),)),
        ("Last Fri I finally took my kids to a pottery workshop.", MAY_8, (day(2023, 5, 5),)),
        ("I joined a new activist group last Tues.", MAY_8, (day(2023, 5, 2),)),
        ("I'm flying out next Friday", MAY_8, (day(2023, 5, 12),)),
    ],
)
def test_days_resolve_against_the_moment_of_writing(text: str, written: datetime, expected: tuple[Span, ...]) -> None:
    """ "Yesterday" in a message written on 8 May 2023 means 7 May 2023, "last Saturday" the 6th."""
    assert mentioned_spans(text, written) == expected


def test_last_friday_said_on_a_friday_is_the_week_before() -> None:
    assert mentioned_spans("Last Friday I went to a council meeting", JUNE_9) == (day(2023, 6, 2),)


def test_weeks_and_weekends_are_calendar_weeks() -> None:
    """ "Last week" said on Friday 9 June 2023 is Monday 29 May to Sunday 4 June; "last weekend" said on
    Monday 8 May is the 6th and 7th; "this weekend" said on a weekday is the coming one."""
    assert mentioned_spans("my school event last week", JUNE_9) == (Span(date(2023, 5, 29), date(2023, 6, 5)),)
    assert mentioned_spans("Last weekend I joined a mentorship program", MAY_8) == (
        Span(date(2023, 5, 6), date(2023, 5, 8)),
    )
    assert mentioned_spans("this weekend we're off to the lake", JUNE_9) == (
        Span(date(2023, 6, 10), date(2023, 6, 12)),
    )
    assert mentioned_spans("we went camping two weekends ago", MAY_8) == (Span(date(2023, 4, 29), date(2023, 5, 1)),)


def test_months_and_years_resolve_to_the_calendar_ones() -> None:
    assert mentioned_spans("a talent show next month", MAY_8) == (Span.month(2023, 6),)
    assert mentioned_spans("Last month I got hurt", datetime(2023, 1, 13, tzinfo=UTC)) == (Span.month(2022, 12),)
    assert mentioned_spans("We had a blast last year at the Pride fest.", MAY_8) == (Span.year(2022),)
    assert mentioned_spans("a friend made it for my 18th birthday ten years ago", MAY_8) == (Span.year(2013),)


def test_a_month_without_a_year_is_the_one_nearest_the_writing() -> None:
    """ "In March" written in May 2023 is March 2023; "in January" written in November is the coming one."""
    assert mentioned_spans("We moved in March", MAY_8) == (Span.month(2023, 3),)
    assert mentioned_spans("the wedding is in January", datetime(2023, 11, 20, tzinfo=UTC)) == (Span.month(2024, 1),)


def test_full_dates_are_themselves_and_words_that_name_no_time_tell_of_no_day() -> None:
    assert mentioned_spans("It opened on 8 May, 2023.", JUNE_9) == (day(2023, 5, 8),)
    assert mentioned_spans("I've been painting since 2016", JUNE_9) == (Span.year(2016),)
    assert mentioned_spans("May I ask how the garden is?", JUNE_9) == ()
    assert mentioned_spans("Thanks, that was a great idea!", JUNE_9) == ()
    assert mentioned_spans("I was on the sunny side this month", JUNE_9) == (Span.month(2023, 6),)


def test_times_anchored_on_an_event_are_not_resolved() -> None:
    """Nothing knows when "the trip" was: only a time anchored on the writing resolves."""
    assert mentioned_spans("two days before the trip", JUNE_9) == ()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("When did Caroline go to the LGBTQ support group?", True),
        ("What year did Nate win his first tournament?", True),
        ("How long ago was Caroline's 18th birthday?", True),
        ("In what month did Jon open his studio?", True),
        ("What did Caroline do on 7 May 2023?", False),
        ("Where did Joanna travel to?", False),
    ],
)
def test_a_question_asking_when(question: str, expected: bool) -> None:
    assert asks_when(question) is expected
