"""A memory's id in the admin: the ``m:`` id people and models see, and the search that finds a memory
by any id a person may paste (``memory.models.parse_memory_name``: ``m:`` and hex digits, or exactly 8
hex digits, is a revision id, any revision of the memory; otherwise a decimal number is an entry id;
anything else is searched as words)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from history.admin import fulltext_search
from memory.models import MemoryEntry, MemoryRevision, parse_memory_name

MEMORY_SEARCH_HELP = (
    "A memory's id: m:0000002b or 0000002b (the id of any of its revisions, as citations show it) or its "
    "entry id as a plain number (42). Anything else: full-text search of the text (any of the words)."
)


def entry_name_html(entry: MemoryEntry) -> SafeString:
    """The memory's ``m:`` id (its current revision's), with its entry id below it."""
    return format_html('{}<br><span class="engram-muted">entry {}</span>', entry.display_id, entry.pk)


def search_entries(
    request: HttpRequest, queryset: QuerySet[MemoryEntry], search_term: str
) -> tuple[QuerySet[MemoryEntry], bool]:
    """``m:`` ids find the entry owning that revision, old revisions included (an old citation still
    finds its memory); a decimal is the entry id; other text is full-text search of current revisions."""
    name = parse_memory_name(search_term)
    if name is None:
        return fulltext_search(request, queryset, search_term, "current_revision__search_document"), False
    if name.is_revision:
        return queryset.filter(revisions__pk=name.id), False
    return queryset.filter(pk=name.id), False


def search_revisions(
    request: HttpRequest, queryset: QuerySet[MemoryRevision], search_term: str
) -> tuple[QuerySet[MemoryRevision], bool]:
    """``m:`` ids find that revision; a decimal is an entry id and finds its revisions; other text is
    full-text search."""
    name = parse_memory_name(search_term)
    if name is None:
        return fulltext_search(request, queryset, search_term, "search_document"), False
    if name.is_revision:
        return queryset.filter(pk=name.id), False
    return queryset.filter(entry_id=name.id), False
