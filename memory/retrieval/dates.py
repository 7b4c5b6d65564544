"""The days a text's own words place what it tells, resolved against when it was written.

A line written on 8 May 2023 that says "I went to the support group yesterday" tells of 7 May 2023,
though it was written on the 8th; "last week" there is the calendar week of 1-7 May, "next month" is
June 2023, "in March" the March nearest the writing. These are rules of English, not of any one
conversation: a relative time is read against the moment its text was written (a message's
``created_at``, a question's own time), so the same words resolve alike wherever they are written.

Pure functions, no database: history search reads them over its pool, tests read them as a contract.
Times anchored on an event rather than on the writing ("two days before the trip", "the Friday
after") are not resolved: nothing here knows when the trip was.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

#: Month names as a text writes them, capitalised ("May" the month, not "may" the verb).
MONTHS = {name: number for number, name in enumerate(calendar.month_name) if name}
WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
#: The abbreviations chat uses ("last Fri", "last Tues").
WEEKDAY_ABBREVIATIONS = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4}
WEEKDAY_ABBREVIATIONS |= {"sat": 5, "sun": 6}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
NUMBERS |= {"eight": 8, "nine": 9, "ten": 10}


@dataclass(frozen=True, order=True)
class Span:
    """Whole days from ``start`` up to, not including, ``end``."""

    start: date
    end: date

    @classmethod
    def day(cls, day: date) -> Span:
        return cls(day, day + timedelta(days=1))

    @classmethod
    def month(cls, year: int, month: int) -> Span:
        last = calendar.monthrange(year, month)[1]
        return cls(date(year, month, 1), date(year, month, last) + timedelta(days=1))

    @classmethod
    def year(cls, year: int) -> Span:
        return cls(date(year, 1, 1), date(year + 1, 1, 1))

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end


def _week(day: date, weeks: int = 0) -> Span:
    """The calendar week (Monday to Sunday) ``weeks`` from the one holding ``day``."""
    monday = day - timedelta(days=day.weekday()) + timedelta(weeks=weeks)
    return Span(monday, monday + timedelta(days=7))


def _weekend(day: date, weeks: int = 0) -> Span:
    """The Saturday and Sunday that end the calendar week ``weeks`` from the one holding ``day``."""
    saturday = _week(day, weeks).start + timedelta(days=5)
    return Span(saturday, saturday + timedelta(days=2))


def _shift_month(year: int, month: int, months: int) -> tuple[int, int]:
    index = year * 12 + month - 1 + months
    return index // 12, index % 12 + 1


def _previous_weekday(day: date, weekday: int) -> date:
    """The latest ``weekday`` strictly before ``day`` ("last Friday" said on a Friday is a week ago)."""
    return day - timedelta(days=(day.weekday() - weekday - 1) % 7 + 1)


def _next_weekday(day: date, weekday: int) -> date:
    return day + timedelta(days=(weekday - day.weekday() - 1) % 7 + 1)


def _nearest_month(day: date, month: int) -> Span:
    """ "In March", said without a year: the March nearest the writing, before or after it."""
    candidates = [Span.month(day.year + shift, month) for shift in (-1, 0, 1)]
    return min(candidates, key=lambda span: abs((span.start - day).days + 15))


_NUMBER = r"(a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d{1,2}|a couple of|a few|few|couple of)"
_WEEKDAY = "(" + "|".join([*WEEKDAYS, *WEEKDAY_ABBREVIATIONS]) + r")\.?"
_MONTH = "(" + "|".join(MONTHS) + ")"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
#: A year as a text writes it (1900-2099), one group.
YEAR = r"((?:19|20)\d\d)"
_I = re.IGNORECASE

#: Calendar dates that name a month, most specific first, each with the fields its groups hold. Each
#: match is taken out of the text before the next pattern reads it, so that "8 May, 2023" names one
#: day, not also the month of May and the whole of 2023 (a query's dates read them too).
MONTH_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(rf"\b{_DAY} (?:of )?{_MONTH},? ?{YEAR}\b"), ("day", "month", "year")),
    (re.compile(rf"\b{_MONTH} {_DAY},? ?{YEAR}\b"), ("month", "day", "year")),
    (re.compile(rf"\b{_MONTH},? (?:of )?{YEAR}\b"), ("month", "year")),
    (re.compile(rf"\b{_DAY} (?:of )?{_MONTH}\b"), ("day", "month")),
    (re.compile(rf"\b{_MONTH} {_DAY}\b(?!:)"), ("month", "day")),
    # "May I ...", "May we ...": the verb, not the month.
    (re.compile(rf"\b{_MONTH}\b(?! (?:I|we|you|he|she|they|it)\b)"), ("month",)),
)
# In a message, a bare number such as "2000" is as often a count as a year: only one a preposition
# introduces is read as a year. As everywhere here, the relative times are read first ("the day before
# yesterday" is not also "yesterday").
_ABSOLUTE = (*MONTH_PATTERNS, (re.compile(rf"\b(?:in|since|of|from|back in|until) {YEAR}\b"), ("year",)))
_DAY_WORDS = {
    "the day before yesterday": -2,
    "the day after tomorrow": 2,
    "yesterday": -1,
    "last night": -1,
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
    "tomorrow": 1,
}
_DAY_WORD = re.compile(r"\b(" + "|".join(_DAY_WORDS) + r")\b", _I)
_AGO = re.compile(rf"\b{_NUMBER} (day|week|weekend|month|year)s? ago\b", _I)
_UNIT = re.compile(
    r"\b(last|this past|past|this|this coming|next) (week|weekend|month|year)\b",
    _I,
)
_NAMED_WEEKDAY = re.compile(rf"\b(last|this past|past|this|this coming|next|on) {_WEEKDAY}(?!\w)", _I)
_OTHER_DAY = re.compile(r"\bthe other day\b", _I)
_SHIFT = {"last": -1, "this past": -1, "past": -1, "this": 0, "this coming": 1, "next": 1}


def _count(word: str) -> tuple[int, int]:
    """How many a number word means, as a range: "a few" is three to five, "a couple of" two."""
    word = word.lower()
    if "few" in word:
        return 2, 5
    if "couple" in word:
        return 2, 3
    value = int(word) if word.isdigit() else NUMBERS[word]
    return value, value


def mentioned_spans(text: str, written: datetime) -> tuple[Span, ...]:
    """The days ``text`` tells of, each relative or partial time in it resolved against ``written``
    (the moment it was written, in that moment's own calendar): "yesterday" in a line written on 8 May
    2023 is 7 May 2023; "last week" the calendar week before the writing's; "last Friday" the latest
    Friday before it; "two weekends ago" the weekend a fortnight back; "next month" the month after;
    "in May" (no year) the May nearest the writing; a full date is itself. In the order found,
    without repeats; a text that names no time tells of no day."""
    today = written.date()
    found: list[Span] = []
    rest = text

    def take(pattern: re.Pattern[str]) -> list[re.Match[str]]:
        nonlocal rest
        matches = list(pattern.finditer(rest))
        rest = pattern.sub(" ", rest)
        return matches

    for match in take(_DAY_WORD):
        found.append(Span.day(today + timedelta(days=_DAY_WORDS[match[1].lower()])))
    for match in take(_AGO):
        low, high = _count(match[1])
        unit = match[2].lower()
        if unit == "day":
            found.append(Span(today - timedelta(days=high), today - timedelta(days=low - 1)))
        elif unit in ("week", "weekend"):
            at = _weekend if unit == "weekend" else _week
            found.append(Span(at(today, -high).start, at(today, -low).end))
        elif unit == "month":
            start = Span.month(*_shift_month(today.year, today.month, -high))
            found.append(Span(start.start, Span.month(*_shift_month(today.year, today.month, -low)).end))
        else:
            found.append(Span(date(today.year - high, 1, 1), date(today.year - low + 1, 1, 1)))
    for match in take(_UNIT):
        shift, unit = _SHIFT[match[1].lower()], match[2].lower()
        if unit == "week":
            found.append(_week(today, shift))
        elif unit == "weekend":
            # "This weekend" said on a Monday to Friday is the coming one, at a weekend the one under way.
            found.append(_weekend(today, shift))
        elif unit == "month":
            found.append(Span.month(*_shift_month(today.year, today.month, shift)))
        else:
            found.append(Span.year(today.year + shift))
    for match in take(_NAMED_WEEKDAY):
        word, name = match[1].lower(), match[2].lower()
        weekday = WEEKDAYS.get(name, WEEKDAY_ABBREVIATIONS.get(name, 0))
        if word == "on":
            # "On Friday" holds no tense a rule can read: the Friday before and the one after.
            found.append(Span.day(_previous_weekday(today, weekday)))
            found.append(Span.day(_next_weekday(today, weekday)))
        elif _SHIFT[word] < 0:
            found.append(Span.day(_previous_weekday(today, weekday)))
        elif word == "this":
            # "This Friday": the Friday of the writing's week (today, if it is Friday).
            found.append(Span.day(_week(today).start + timedelta(days=weekday)))
        else:
            found.append(Span.day(_next_weekday(today, weekday)))
    for _ in take(_OTHER_DAY):
        found.append(Span(today - timedelta(days=7), today))
    for pattern, fields in _ABSOLUTE:
        for match in take(pattern):
            values = dict(zip(fields, match.groups(), strict=True))
            year = int(values["year"]) if "year" in values else None
            if "month" not in values:
                if year is not None:
                    found.append(Span.year(year))
                continue
            month = MONTHS[values["month"]]
            if "day" in values:
                day = int(values["day"])
                if not 1 <= day <= calendar.monthrange(year or 2000, month)[1]:
                    continue
                if year is None:
                    # The nearest such day: "on 3 June", written in December, is the coming June's.
                    span = _nearest_month(today, month)
                    year = span.start.year
                found.append(Span.day(date(year, month, day)))
            elif year is not None:
                found.append(Span.month(year, month))
            else:
                found.append(_nearest_month(today, month))
    return tuple(dict.fromkeys(found))


#: A question asking for a time or a duration ("When did ...", "What year ...", "How long has ...").
_ASKS_WHEN = re.compile(
    r"^\W*(?:when|what (?:day|date|month|year|time|week)|which (?:day|date|month|year|week)|how long|"
    r"in what (?:month|year))\b",
    _I,
)
#: Times a line tells without naming a day: "recently", "since", "ago", "for three years".
_VAGUE_TIME = re.compile(
    r"\b(?:recently|lately|ago|since|for (?:a|an|\d+|one|two|three|four|five|six|seven|eight|nine|ten|a few|"
    r"a couple of|several|many) (?:days?|weeks?|months?|years?))\b",
    _I,
)


def asks_when(text: str) -> bool:
    """Whether a question asks when something happened, or for how long: its answer is a line that
    tells a time."""
    return _ASKS_WHEN.search(text) is not None


def tells_time(text: str, written: datetime) -> bool:
    """Whether a line tells a time: a day, week, month or year it resolves to (:func:`mentioned_spans`),
    or a vaguer one ("recently", "two years ago", "for three years", "since")."""
    return _VAGUE_TIME.search(text) is not None or bool(mentioned_spans(text, written))
