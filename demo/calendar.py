"""The demo's dates, counted from the Monday its transcript starts.

The transcript's three weeks end shortly before the demo loads, so the turns it drives at load time
(``demo.turns``, stamped by the API with the real clock like any turn) follow on from the conversation,
every memory is learned after the message it comes from and before the turns that use it, and the
dates people mention (the beta launch, leave, a summit) are still ahead. The start is always a Monday,
so the weekdays the messages name ("standup is every Tuesday", "Tuesday's incident") hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta


def offset(day: int, clock: str) -> timedelta:
    """Day ``day`` (0: the first Monday) at ``HH:MM``, from the calendar's start."""
    hours, minutes = (int(part) for part in clock.split(":"))
    return timedelta(days=day, hours=hours, minutes=minutes)


def day_text(day: date, *, year: bool = False) -> str:
    """``Monday 14 April`` (``Monday 14 April 2025`` with ``year``), in any locale."""
    return f"{day:%A} {day.day} {day:%B}" + (f" {day.year}" if year else "")


def span_text(first: date, last: date, *, year: bool = False) -> str:
    """``22-25 April``, ``29 April-2 May`` (with ``year``: ``22-25 April 2025``)."""
    end = f"{last.day} {last:%B}" + (f" {last.year}" if year else "")
    if (first.year, first.month) == (last.year, last.month):
        return f"{first.day}-{end}"
    return f"{first.day} {first:%B}" + (f" {first.year}" if year and first.year != last.year else "") + f"-{end}"


@dataclass(frozen=True)
class DemoCalendar:
    #: Midnight UTC of the Monday the transcript starts.
    start: datetime

    @classmethod
    def ending_before(cls, now: datetime, *, last: timedelta) -> DemoCalendar:
        """The latest calendar starting on a Monday, at least three weeks before ``now``'s week, whose
        transcript (``last``: its final message's offset from the start) ends before ``now``."""
        today = now.astimezone(UTC).date()
        start = datetime.combine(today - timedelta(days=today.weekday()), time(), UTC) - timedelta(weeks=3)
        while start + last >= now:
            start -= timedelta(weeks=1)
        return cls(start)

    def at(self, day: int, clock: str) -> datetime:
        """Day ``day`` of the transcript (0: the first Monday) at ``HH:MM`` UTC."""
        return self.start + offset(day, clock)

    def day(self, days: int) -> date:
        return (self.start + timedelta(days=days)).date()

    @staticmethod
    def midnight_after(day: date) -> datetime:
        """When ``day`` is over, in UTC: a belief that holds through ``day`` is valid until then."""
        return datetime.combine(day + timedelta(days=1), time(), UTC)

    # The dates the transcript mentions, all ahead of the load.

    @property
    def beta_launch(self) -> date:
        return self.day(42)  # the Monday six weeks in

    @property
    def beta_launch_moved(self) -> date:
        return self.day(56)  # two weeks later

    @property
    def priya_leave(self) -> tuple[date, date]:
        return self.day(50), self.day(53)  # Tuesday to Friday

    @property
    def sam_o_holiday(self) -> tuple[date, date]:
        return self.day(63), self.day(67)  # a working week

    @property
    def berlin_summit(self) -> tuple[date, date]:
        return self.day(64), self.day(66)

    @property
    def school_starts(self) -> date:
        """The first 1 September after the transcript."""
        end = self.day(21)
        return date(end.year + (end.month >= 9), 9, 1)

    def names(self) -> dict[str, str]:
        """The dates as the transcript and the memories write them (``str.format`` fields)."""
        return {
            "launch": day_text(self.beta_launch),
            "launch_y": day_text(self.beta_launch, year=True),
            "launch_moved": day_text(self.beta_launch_moved),
            "launch_moved_y": day_text(self.beta_launch_moved, year=True),
            "priya_leave": span_text(*self.priya_leave),
            "priya_leave_y": span_text(*self.priya_leave, year=True),
            "sam_o_holiday": span_text(*self.sam_o_holiday),
            "sam_o_holiday_y": span_text(*self.sam_o_holiday, year=True),
            "berlin": span_text(*self.berlin_summit),
            "berlin_y": span_text(*self.berlin_summit, year=True),
            "school": f"{self.school_starts:%B}",
            "school_y": f"{self.school_starts:%B %Y}",
        }
