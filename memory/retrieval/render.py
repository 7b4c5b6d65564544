"""Packing and rendering: deterministic, trust-labelled, byte-stable.

Whole items are packed into a count cap and a token allowance, highest score first; an item that
does not fit is skipped whole, never truncated into a different claim. An unresolved conflict is
packed the same way, as one unit: its sides take consecutive places where the best of them ranks,
displacing the lowest-ranked items, and fit together or are skipped together, so the block never
shows one side of a conflict alone. The block has a total order (score descending, revision id
ascending, each conflict's other sides right after its best-ranked one), confidence bands instead of
floats, and no volatile field: the only timestamp is an explicit historical ``as_of``. Actor labels
are rendered from the current actor rows, so a rename changes the rendering and nothing stored. The
same belief set renders to the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.models import short_id
from memory.retrieval.candidates import Candidate
from memory.retrieval.safety import model_project

AUTHORITY_LABEL = {"user_stated": "user-stated", "affirmed": "affirmed", "inferred": "inferred"}
#: Fixed per-item overhead the estimate adds for attribution and JSON framing.
ITEM_OVERHEAD_TOKENS = 8
MIN_ALLOWANCE, MAX_ALLOWANCE = 256, 32_768


def estimate_tokens(text: str) -> int:
    """A conservative upper-bound estimate: one token per three UTF-8 bytes, and never fewer than
    the word count. Typical English runs near four characters per token, so this over-counts."""
    encoded = len(text.encode("utf-8"))
    return max(math.ceil(encoded / 3), len(text.split())) + ITEM_OVERHEAD_TOKENS


@dataclass(frozen=True)
class Labels:
    """Current display labels of actors, keyed by actor id."""

    by_actor: Mapping[int, str]

    def of(self, actor_id: int | None) -> str | None:
        return self.by_actor.get(actor_id) if actor_id is not None else None

    def said_by(self, source_actor_ids: Sequence[int], subject_id: int | None) -> str | None:
        """Whose words an item rests on ("Bob (id U2) and Alice (id U1)"); None when nobody is known, or
        when its only source is its subject (their own word needs no attribution)."""
        if list(source_actor_ids) == [subject_id]:
            return None
        names = [name for name in (self.by_actor.get(a) for a in source_actor_ids) if name]
        return " and ".join(names) or None


def render_line(item: Candidate, labels: Labels) -> str:
    ident = f"[{short_id(item.revision_id)}]"
    if item.blocked:
        return f"{ident} [BLOCKED] withheld: {item.blocked}."
    parts = [ident]
    if item.carried:
        parts.append(f"(learned in {model_project(item.origin_scope)})")
    subject = labels.of(item.subject_id)
    # Every line break (\r, \u2028, … as well as \n), so that no statement can start a line of its own.
    statement = " ".join(item.body.splitlines()).strip()
    parts.append(f"about {subject}: {statement}" if subject else statement)
    authority = AUTHORITY_LABEL.get(item.authority, item.authority)
    source = labels.said_by(item.source_actor_ids, item.subject_id)
    if source:
        authority = f"{authority} by {source}"
    parts.append(f"({authority}, {item.band})")
    if item.conflicts:
        parts.append("conflicts=[" + ", ".join(short_id(p) for p in item.conflicts) + "]")
    return " ".join(parts)


@dataclass(frozen=True)
class Packed:
    items: list[Candidate]
    lines: list[str]
    tokens: int
    dropped_for_budget: list[int]


def pack(
    ranked: Sequence[Candidate],
    labels: Labels,
    *,
    max_items: int,
    max_tokens: int,
    screen: Callable[[str], str] | None = None,
) -> Packed:
    """Fit whole units (:func:`conflict_units`), in order, into both caps. Skipped items are recorded,
    never cut; an item's ``conflicts`` marker names the partners packed with it.

    ``screen`` (the safety scan) sets each item's ``blocked`` reason before its line is rendered;
    units past the count cap are dropped without being rendered or screened.
    """
    items: list[Candidate] = []
    lines: list[str] = []
    used = 0
    dropped: list[int] = []
    for unit in conflict_units(ranked):
        if len(items) + len(unit) > max_items:
            dropped.extend(item.revision_id for item in unit)
            continue
        together = {item.revision_id for item in unit}
        unit_lines = []
        for item in unit:
            if screen is not None:
                item.blocked = screen(item.body)
            item.conflicts = [p for p in item.conflicts if p in together]
            unit_lines.append(render_line(item, labels))
        cost = sum(estimate_tokens(line) for line in unit_lines)
        if used + cost > max_tokens:
            dropped.extend(item.revision_id for item in unit)
            continue
        items.extend(unit)
        lines.extend(unit_lines)
        used += cost
    return Packed(items=items, lines=lines, tokens=used, dropped_for_budget=dropped)


def conflict_units(ranked: Sequence[Candidate]) -> list[list[Candidate]]:
    """``ranked`` in packing units: an item alone, or the sides of one conflict (every item linked to
    it through ``conflicts``, directly or through another side), in their ranked order, placed where
    the best of them ranks."""
    by_id = {item.revision_id: item for item in ranked}
    position = {item.revision_id: index for index, item in enumerate(ranked)}
    placed: set[int] = set()
    units: list[list[Candidate]] = []
    for item in ranked:
        if item.revision_id in placed:
            continue
        placed.add(item.revision_id)
        unit: list[Candidate] = []
        reached = [item]
        while reached:
            side = reached.pop()
            unit.append(side)
            for partner in side.conflicts:
                if partner in by_id and partner not in placed:
                    placed.add(partner)
                    reached.append(by_id[partner])
        units.append(sorted(unit, key=lambda side: position[side.revision_id]))
    return units


def render_block(
    lines: Sequence[str], *, policy: str, moment: str, as_of: datetime | None, corrections: Sequence[str] = ()
) -> str:
    """The memory block. ``as_of`` appears only for historical queries; nothing else varies by time."""
    attributes = f'policy="{policy}" moment="{moment}"'
    if as_of is not None:
        attributes += f' as_of="{as_of.strftime("%Y-%m-%dT%H:%M:%SZ")}"'
    body = "".join(f"{line}\n" for line in [*lines, *corrections])
    return f"<memory {attributes}>\n{body}</memory>\n"
