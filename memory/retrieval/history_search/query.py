"""Query forming for history search: the query and its structural filters, the requester's identities,
and the people a query names (matched as authors, not words).

Filters are SQL that may only narrow (``AND ...``); a filter that does not resolve in the perspective
(an actor it does not know) answers None, and the search then returns nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q

from accounts.models import Actor
from accounts.selectors import actors_named_in
from config.errors import Unprocessable
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
