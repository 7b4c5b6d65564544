"""Audiences: who may read a piece of text, as structured columns, never parsed from prose.

An audience is ``public`` | ``workspace(namespace)`` | ``members(namespace, readers)`` |
``external(namespace, readers)``; a direct message is ``members`` with one reader. Readers are stable
``Actor`` ids. Two further kinds exist only for *source* audiences of derived text: ``unknown``
(provenance missing: admissible nowhere) and ``nobody`` (sources whose audiences have no common
destination: admissible nowhere, but not a provenance gap).

The disclosure rule itself lives in SQL (the ``engram_audience_allows`` function in
``config/database/sql/audience.sql``) so that every reader applies it before ranking.
``audience_allows`` below is its Python mirror and exists only as a test oracle; no production read
path calls it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.postgres.fields import ArrayField
from django.db import models


class AudienceKind(models.TextChoices):
    PUBLIC = "public", "Public"
    WORKSPACE = "workspace", "Workspace"
    MEMBERS = "members", "Members"
    EXTERNAL = "external", "External (shared outside the workspace)"
    UNKNOWN = "unknown", "Unknown provenance"
    NOBODY = "nobody", "No common audience"


#: Every kind, as plain strings: an audience is built for every message and source a write or a
#: search judges, and ``AudienceKind.values`` builds a new list on each read.
AUDIENCE_KINDS = frozenset(AudienceKind.values)
#: Kinds that name a workspace, and kinds that name readers.
_NAMESPACED_KINDS = frozenset((AudienceKind.WORKSPACE, AudienceKind.MEMBERS, AudienceKind.EXTERNAL))
_READER_KINDS = frozenset((AudienceKind.MEMBERS, AudienceKind.EXTERNAL))

#: Kinds a live conversation (a destination) may have.
DESTINATION_KINDS = (AudienceKind.PUBLIC, AudienceKind.WORKSPACE, AudienceKind.MEMBERS, AudienceKind.EXTERNAL)


@dataclass(frozen=True, order=True)
class Audience:
    kind: str
    namespace: str = ""
    readers: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "readers", tuple(sorted(set(self.readers))))
        if self.kind not in AUDIENCE_KINDS:
            raise ValueError(f"unknown audience kind {self.kind!r}")
        needs_namespace = self.kind in _NAMESPACED_KINDS
        needs_readers = self.kind in _READER_KINDS
        if needs_namespace != bool(self.namespace):
            raise ValueError(f"{self.kind} audience {'needs' if needs_namespace else 'takes no'} namespace")
        if needs_readers != bool(self.readers):
            raise ValueError(f"{self.kind} audience {'needs' if needs_readers else 'takes no'} readers")

    @classmethod
    def public(cls) -> Audience:
        return cls(AudienceKind.PUBLIC)

    @classmethod
    def workspace(cls, namespace: str) -> Audience:
        return cls(AudienceKind.WORKSPACE, namespace)

    @classmethod
    def members(cls, namespace: str, readers: Iterable[int]) -> Audience:
        return cls(AudienceKind.MEMBERS, namespace, tuple(readers))

    @classmethod
    def external(cls, namespace: str, readers: Iterable[int]) -> Audience:
        return cls(AudienceKind.EXTERNAL, namespace, tuple(readers))

    @classmethod
    def unknown(cls) -> Audience:
        return cls(AudienceKind.UNKNOWN)

    @classmethod
    def nobody(cls) -> Audience:
        return cls(AudienceKind.NOBODY)

    @property
    def is_direct(self) -> bool:
        return self.kind == AudienceKind.MEMBERS and len(self.readers) == 1

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "namespace": self.namespace, "readers": list(self.readers)}

    def __str__(self) -> str:
        if self.kind in (AudienceKind.PUBLIC, AudienceKind.UNKNOWN, AudienceKind.NOBODY):
            return str(self.kind)
        if self.kind == AudienceKind.WORKSPACE:
            return f"workspace({self.namespace})"
        return f"{self.kind}({self.namespace}, {list(self.readers)})"


def audience_allows(origin: Audience, destination: Audience, linked_readers: Iterable[int] = ()) -> bool:
    """Test oracle for ``engram_audience_allows``: may text from ``origin`` be shown to ``destination``?

    ``linked_readers`` are the actors joined to the destination's single reader by a verified,
    unrevoked identity link in the current perspective.
    """
    d = destination
    if d.kind not in DESTINATION_KINDS:
        return False
    if origin.kind == AudienceKind.PUBLIC:
        return True
    if origin.kind == AudienceKind.WORKSPACE:
        return d.kind in (AudienceKind.WORKSPACE, AudienceKind.MEMBERS) and d.namespace == origin.namespace
    if origin.kind == AudienceKind.MEMBERS:
        if d.kind != AudienceKind.MEMBERS:
            return False
        if d.namespace == origin.namespace and set(d.readers) <= set(origin.readers):
            return True
        return len(origin.readers) == 1 and len(d.readers) == 1 and origin.readers[0] in set(linked_readers)
    if origin.kind == AudienceKind.EXTERNAL:
        return (
            d.kind == AudienceKind.EXTERNAL
            and d.namespace == origin.namespace
            and set(d.readers) <= set(origin.readers)
        )
    return False  # unknown and nobody reach nothing


def most_restrictive(audiences: Iterable[Audience]) -> Audience:
    """The source audience of text derived from several sources: every source must admit a destination.

    Where the sources' common destinations cannot be written as one audience (different namespaces,
    disjoint readers), the result is ``nobody``: the derived text is withheld everywhere rather than
    disclosed somewhere one of its sources may not go. Any unknown source makes the result unknown.
    """
    result: Audience | None = None
    for audience in audiences:
        result = audience if result is None else _meet(result, audience)
    return result if result is not None else Audience.unknown()


def _meet(a: Audience, b: Audience) -> Audience:
    if AudienceKind.UNKNOWN in (a.kind, b.kind):
        return Audience.unknown()
    if AudienceKind.NOBODY in (a.kind, b.kind):
        return Audience.nobody()
    if a.kind == AudienceKind.PUBLIC:
        return b
    if b.kind == AudienceKind.PUBLIC:
        return a
    if a.namespace != b.namespace:
        return Audience.nobody()
    kinds = {a.kind, b.kind}
    if kinds == {AudienceKind.WORKSPACE}:
        return a
    if AudienceKind.EXTERNAL in kinds and kinds != {AudienceKind.EXTERNAL}:
        return Audience.nobody()
    if kinds == {AudienceKind.WORKSPACE, AudienceKind.MEMBERS}:
        return a if a.kind == AudienceKind.MEMBERS else b
    common = set(a.readers) & set(b.readers)
    if not common:
        return Audience.nobody()
    return Audience(a.kind, a.namespace, tuple(common))


class AudienceColumns(models.Model):
    """Three structured columns holding one audience, checked by a constraint on each concrete model."""

    audience_kind = models.CharField(max_length=16, choices=AudienceKind.choices)
    audience_namespace = models.CharField(max_length=200, blank=True, default="")
    audience_readers = ArrayField(models.BigIntegerField(), blank=True, default=list)

    class Meta:
        abstract = True

    @property
    def audience(self) -> Audience:
        return Audience(self.audience_kind, self.audience_namespace, tuple(self.audience_readers))

    def set_audience(self, audience: Audience) -> None:
        self.audience_kind = audience.kind
        self.audience_namespace = audience.namespace
        self.audience_readers = list(audience.readers)


def audience_shape_constraint(model_name: str, *, destination_only: bool = False) -> models.CheckConstraint:
    """A CheckConstraint keeping the three columns a well-formed audience (and, optionally, deliverable)."""
    q = models.Q
    shapes = (
        q(audience_kind=AudienceKind.PUBLIC, audience_namespace="", audience_readers__len=0)
        | q(audience_kind=AudienceKind.WORKSPACE, audience_readers__len=0) & ~q(audience_namespace="")
        | q(audience_kind__in=[AudienceKind.MEMBERS, AudienceKind.EXTERNAL], audience_readers__len__gt=0)
        & ~q(audience_namespace="")
    )
    if not destination_only:
        shapes |= q(
            audience_kind__in=[AudienceKind.UNKNOWN, AudienceKind.NOBODY],
            audience_namespace="",
            audience_readers__len=0,
        )
    return models.CheckConstraint(condition=shapes, name=f"{model_name}_audience_shape")
