"""Query forming for history search: the query and its structural filters, the requester's identities,
the people a query names (matched as authors, not words) and the dates it names (matched against when a
message was written).

Filters are SQL that may only narrow (``AND ...``); a filter that does not resolve in the perspective
(an actor it does not know) answers None, and the search then returns nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q

from accounts.models import Actor
from accounts.selectors import actors_named_in
from config.errors import Unprocessable
from memory.retrieval.dates import MONTH_PATTERNS, MONTHS, YEAR
from memory.retrieval.eligibility import Perspective, linked_actors
from memory.retrieval.query import FUNCTION_WORDS, WORD, content_terms, named_actor_ids

DEFAULT_LIMIT, MAX_LIMIT = 8, 20


@dataclass(frozen=True)
class HistoryQuery:
    text: str
    actor: str | None = None
    conversation_id: int | None = None
    connector: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_LIMIT:
            raise Unprocessable(f"limit must lie in [1, {MAX_LIMIT}]", code="invalid_limit")
        if self.since and self.until and self.until <= self.since:
            raise Unprocessable("until must be after since", code="invalid_time_range")


@dataclass(frozen=True)
class Filters:
    """Structural filters as SQL that may only narrow (``AND ...``), their parameters, and how the
    audit describes them."""

    sql: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    described: dict[str, Any] = field(default_factory=dict)


def requester_identities(perspective: Perspective) -> set[int]:
    """The requester and every actor a verified, unrevoked identity link joins them to."""
    if perspective.requester_id is None:
        return set()
    return {perspective.requester_id, *linked_actors(perspective.agent_id, perspective.requester_id)}


def resolve_filters(perspective: Perspective, query: HistoryQuery, requester_ids: set[int]) -> Filters | None:
    """Structural filters as SQL that only narrows. None when a filter does not resolve: no results."""
    sql: list[str] = []
    params: dict[str, Any] = {}
    described: dict[str, Any] = {}
    if query.actor:
        if query.actor == "requester":
            actor_ids = sorted(requester_ids)
        else:
            # Resolved through the perspective's own actors, never an id the caller invented.
            candidates = Actor.objects.filter(connector__agent_id=perspective.agent_id)
            text = query.actor.strip()
            actor_ids = sorted(
                candidates.filter(Q(external_id=text) | Q(display_name__iexact=text)).values_list("pk", flat=True)
            )
            if text.isdigit():
                actor_ids = sorted({*actor_ids, *candidates.filter(pk=int(text)).values_list("pk", flat=True)})
        if not actor_ids:
            return None
        sql.append("m.actor_id = ANY(%(f_actors)s::bigint[])")
        params["f_actors"] = actor_ids
        described["actor_ids"] = actor_ids
    if query.conversation_id is not None:
        sql.append("m.conversation_id = %(f_conversation)s")
        params["f_conversation"] = query.conversation_id
        described["conversation_id"] = query.conversation_id
    if query.connector:
        kind, _, name = query.connector.partition(":")
        sql.append(
            "(SELECT cv.connector_id FROM history_conversation cv WHERE cv.id = m.conversation_id)"
            " IN (SELECT id FROM accounts_connector WHERE type = %(f_ctype)s AND name = %(f_cname)s)"
        )
        params.update(f_ctype=kind, f_cname=name)
        described["connector"] = query.connector
    if query.since:
        sql.append("m.created_at >= %(f_since)s")
        params["f_since"] = query.since
        described["since"] = query.since.isoformat()
    if query.until:
        sql.append("m.created_at < %(f_until)s")
        params["f_until"] = query.until
        described["until"] = query.until.isoformat()
    described["limit"] = query.limit
    return Filters(sql="".join(f" AND {s}" for s in sql), params=params, described=described)


def named_actors(perspective: Perspective, text: str) -> dict[int, tuple[str, ...]]:
    """Actors the query names by their current display name or external id (possessives included),
    resolved through the perspective's own actors (as the actor filter is), never invented: each id
    with the names it goes by. Of the actors whose name occurs in the query (the ones memory recall
    considers too), only those whose name is one to three of its words, and not a function word, count."""
    words = [word.removesuffix("'s") for word in WORD.findall(text.lower())]
    phrases = {" ".join(words[i : i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)}
    phrases -= FUNCTION_WORDS
    if not phrases:
        return {}
    actors = [
        actor
        for actor in actors_named_in(perspective.agent_id, text)
        if actor.display_name.lower() in phrases or actor.external_id.lower() in phrases
    ]
    named = set(named_actor_ids(text, actors))
    return {a.pk: tuple(n for n in (a.display_name, a.external_id) if n) for a in actors if a.pk in named}


def match_text(text: str, named: dict[int, tuple[str, ...]]) -> str:
    """The query as the relevance arms read it: people it names are matched as authors (``named``),
    not as words or meaning, so messages that merely address them ("thanks, Bob!") do not outrank
    what they said. A query made only of names keeps them."""
    names = sorted({name for aliases in named.values() for name in aliases}, key=len, reverse=True)
    if not names:
        return text
    pattern = "|".join(re.escape(name) for name in names)
    stripped = re.sub(rf"(?<![\w])(?:{pattern})(?:'s)?(?![\w])", " ", text, flags=re.IGNORECASE)
    return stripped if content_terms(stripped) else text


#: The calendar dates a query names, most specific first (shared with what a message's own words say
#: of time), then a bare year: in a question, "2023" is a year.
_DATE_PATTERNS = (*MONTH_PATTERNS, (re.compile(rf"\b{YEAR}\b"), ("year",)))
#: Relative times, resolved against the moment of the search: (days back the span starts, days back it ends).
_RELATIVE = {
    "today": (0, 0),
    "yesterday": (1, 1),
    "this week": (7, 0),
    "last week": (14, 7),
    "this month": (31, 0),
    "last month": (62, 31),
}
_RELATIVE_PATTERN = re.compile(r"\b(" + "|".join(_RELATIVE) + r"|this year|last year)\b", re.IGNORECASE)


@dataclass(frozen=True)
class NamedDate:
    """A date the query names: calendar fields (any may be absent: "in May" is May of any year), or a
    span of time for a relative one ("last week")."""

    year: int | None = None
    month: int | None = None
    day: int | None = None
    start: datetime | None = None
    end: datetime | None = None

    def covers(self, moment: datetime) -> bool:
        if self.start is not None and self.end is not None:
            return self.start <= moment < self.end
        when = moment.astimezone(UTC)
        return all(
            wanted is None or wanted == actual
            for wanted, actual in ((self.year, when.year), (self.month, when.month), (self.day, when.day))
        )


def named_dates(text: str, now: datetime) -> tuple[NamedDate, ...]:
    """The dates, months, years and relative times ("last week", against ``now``) a query names, matched
    later against when each message was written (its session's date). Nothing is inferred: a query that
    names no time names no date."""
    found: list[NamedDate] = []
    rest = text
    for pattern, fields in _DATE_PATTERNS:
        for match in pattern.finditer(rest):
            values = dict(zip(fields, match.groups(), strict=True))
            day = int(values["day"]) if "day" in values else None
            month = MONTHS[values["month"]] if "month" in values else None
            if day is not None and not 1 <= day <= 31:
                continue
            found.append(NamedDate(year=int(values["year"]) if "year" in values else None, month=month, day=day))
        rest = pattern.sub(" ", rest)
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    for match in _RELATIVE_PATTERN.finditer(rest):
        phrase = match[1].lower()
        if phrase.endswith("year"):
            year = today.year - (1 if phrase.startswith("last") else 0)
            found.append(NamedDate(year=year))
            continue
        back, until = _RELATIVE[phrase]
        found.append(NamedDate(start=today - timedelta(days=back), end=today - timedelta(days=until - 1)))
    return tuple(dict.fromkeys(found))
