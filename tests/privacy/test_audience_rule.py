"""The audience rule (ARCHITECTURE "Eligibility", spec/003) as a contract on both of its implementations.

``engram_audience_allows`` (SQL, created by ``history/migrations``) is the rule every reader applies;
``history.audience.audience_allows`` is its Python mirror, kept only as a test oracle. Each named case
below asserts the expected answer from both, then property tests check that they agree everywhere and
that ``most_restrictive`` never lets derived text reach a destination one of its sources may not.

The function is pure, so no rows are needed: it is called with literal arrays through one cursor.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from django.db import connection
from django.db.backends.utils import CursorWrapper
from hypothesis import given, settings
from hypothesis import strategies as st

from history.audience import Audience, audience_allows, most_restrictive

ALLOWS_SQL = "SELECT engram_audience_allows(%s, %s, %s::bigint[], %s, %s, %s::bigint[], %s::bigint[])"


def sql_allows(cursor: CursorWrapper, origin: Audience, destination: Audience, linked: Iterable[int] = ()) -> bool:
    # Readers go in reversed: the stored arrays carry no order guarantee and the SQL must not rely on one.
    cursor.execute(
        ALLOWS_SQL,
        [
            origin.kind,
            origin.namespace,
            list(reversed(origin.readers)),
            destination.kind,
            destination.namespace,
            list(reversed(destination.readers)),
            sorted(set(linked), reverse=True),
        ],
    )
    row = cursor.fetchone()
    assert row is not None
    assert isinstance(row[0], bool), f"the SQL rule answered {row[0]!r}, not a boolean"
    return row[0]


ACME, GLOBEX = "slack:acme", "slack:globex"
ALICE, BOB, CAROL = 1, 2, 3
ALICE_ELSEWHERE = 11  # Alice's actor on another connector, joined to her by a verified identity link

PUBLIC = Audience.public()
UNKNOWN = Audience.unknown()
NOBODY = Audience.nobody()


def workspace(ns: str = ACME) -> Audience:
    return Audience.workspace(ns)


def members(*readers: int, ns: str = ACME) -> Audience:
    return Audience.members(ns, readers)


def external(*readers: int, ns: str = ACME) -> Audience:
    return Audience.external(ns, readers)


def case(name: str, origin: Audience, destination: Audience, expected: bool, linked: tuple[int, ...] = ()) -> object:
    return pytest.param(origin, destination, linked, expected, id=name)


MATRIX = [
    # public text may go anywhere a conversation may be
    case("public -> public", PUBLIC, PUBLIC, True),
    case("public -> workspace", PUBLIC, workspace(), True),
    case("public -> members", PUBLIC, members(ALICE), True),
    case("public -> external", PUBLIC, external(BOB), True),
    case("public -> unknown destination", PUBLIC, UNKNOWN, False),
    case("public -> nobody destination", PUBLIC, NOBODY, False),
    # workspace text stays inside its workspace, never leaves to external parties
    case("workspace -> same workspace", workspace(), workspace(), True),
    case("workspace -> other namespace", workspace(), workspace(GLOBEX), False),
    case("workspace -> members of same namespace", workspace(), members(ALICE, BOB), True),
    case("workspace -> DM in same namespace", workspace(), members(ALICE), True),
    case("workspace -> members of other namespace", workspace(), members(ALICE, ns=GLOBEX), False),
    case("workspace -> external same namespace", workspace(), external(ALICE), False),
    case("workspace -> public", workspace(), PUBLIC, False),
    # members text reaches only a subset of its readers, in its namespace
    case("members -> subset", members(ALICE, BOB, CAROL), members(ALICE, BOB), True),
    case("members -> equal", members(ALICE, BOB), members(ALICE, BOB), True),
    case("members -> superset", members(ALICE, BOB), members(ALICE, BOB, CAROL), False),
    case("members -> disjoint readers", members(ALICE, BOB), members(CAROL), False),
    case("members -> other namespace", members(ALICE, BOB), members(ALICE, BOB, ns=GLOBEX), False),
    case("members -> workspace", members(ALICE, BOB), workspace(), False),
    case("members -> public", members(ALICE, BOB), PUBLIC, False),
    case("members -> external with same readers", members(ALICE, BOB), external(ALICE, BOB), False),
    case("DM -> another person's DM", members(ALICE), members(BOB), False),
    case("DM -> group containing its reader", members(ALICE), members(ALICE, BOB), False),
    # a verified identity link lets one person's DM evidence follow them into their other DM, only
    case("link: DM -> own DM elsewhere", members(ALICE), members(ALICE_ELSEWHERE, ns=GLOBEX), True, (ALICE,)),
    case("link: DM -> own DM same namespace", members(ALICE), members(ALICE_ELSEWHERE), True, (ALICE,)),
    case("no link: DM -> own DM elsewhere", members(ALICE), members(ALICE_ELSEWHERE, ns=GLOBEX), False),
    case("link of someone else: DM -> DM", members(ALICE), members(ALICE_ELSEWHERE, ns=GLOBEX), False, (BOB,)),
    case("link: DM -> group", members(ALICE), members(ALICE_ELSEWHERE, BOB, ns=GLOBEX), False, (ALICE,)),
    case("link: group -> DM", members(ALICE, BOB), members(ALICE_ELSEWHERE, ns=GLOBEX), False, (ALICE,)),
    case("link both: group -> DM", members(ALICE, BOB), members(ALICE_ELSEWHERE, ns=GLOBEX), False, (ALICE, BOB)),
    case("link: DM -> workspace", members(ALICE), workspace(GLOBEX), False, (ALICE,)),
    case("link: DM -> external DM", members(ALICE), external(ALICE_ELSEWHERE, ns=GLOBEX), False, (ALICE,)),
    case("link: external DM -> external DM", external(ALICE), external(ALICE_ELSEWHERE, ns=GLOBEX), False, (ALICE,)),
    # external text reaches only a subset of its readers, in its namespace, and only externally
    case("external -> same namespace subset", external(ALICE, BOB), external(ALICE), True),
    case("external -> same namespace equal", external(ALICE, BOB), external(ALICE, BOB), True),
    case("external -> superset", external(ALICE), external(ALICE, BOB), False),
    case("external -> other namespace", external(ALICE, BOB), external(ALICE, ns=GLOBEX), False),
    case("external -> workspace", external(ALICE, BOB), workspace(), False),
    case("external -> members with same readers", external(ALICE, BOB), members(ALICE, BOB), False),
    case("external -> public", external(ALICE), PUBLIC, False),
    # unknown provenance and sources with no common audience reach nothing at all
    case("unknown -> public", UNKNOWN, PUBLIC, False),
    case("unknown -> workspace", UNKNOWN, workspace(), False),
    case("unknown -> members", UNKNOWN, members(ALICE), False),
    case("unknown -> external", UNKNOWN, external(ALICE), False),
    case("unknown -> DM with link", UNKNOWN, members(ALICE_ELSEWHERE), False, (ALICE,)),
    case("nobody -> public", NOBODY, PUBLIC, False),
    case("nobody -> workspace", NOBODY, workspace(), False),
    case("nobody -> members", NOBODY, members(ALICE), False),
    case("nobody -> external", NOBODY, external(ALICE), False),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("origin", "destination", "linked", "expected"), MATRIX)
def test_audience_rule_matrix(origin: Audience, destination: Audience, linked: tuple[int, ...], expected: bool) -> None:
    """The SQL rule and the Python oracle both give the named case's expected answer."""
    with connection.cursor() as cursor:
        assert sql_allows(cursor, origin, destination, linked) is expected, "SQL rule"
    assert audience_allows(origin, destination, linked) is expected, "Python oracle"


@pytest.mark.django_db
@pytest.mark.parametrize("argument", range(6))
def test_a_missing_argument_fails_closed(argument: int) -> None:
    """A NULL in any audience argument makes the rule answer false (never NULL), even for a case that
    would otherwise be allowed; a NULL link set only means "no links"."""
    allowed: list[str | list[int] | None] = ["members", ACME, [ALICE, BOB], "members", ACME, [ALICE], []]
    allowed[argument] = None
    with connection.cursor() as cursor:
        cursor.execute(ALLOWS_SQL, allowed)
        assert cursor.fetchone() == (False,)
        cursor.execute(ALLOWS_SQL, ["members", ACME, [ALICE], "members", GLOBEX, [ALICE_ELSEWHERE], None])
        assert cursor.fetchone() == (False,)


# --- properties ---------------------------------------------------------------------------------------

NAMESPACES = st.sampled_from([ACME, GLOBEX, "mail:initech"])
READER = st.integers(min_value=1, max_value=5)
# Single-reader audiences (DMs) get their own branch: the identity-link path only opens between them.
DM_READERS = st.builds(lambda reader: (reader,), READER)
GROUP_READERS = st.frozensets(READER, min_size=1, max_size=4)

DESTINATIONS = st.one_of(
    st.just(PUBLIC),
    st.builds(Audience.workspace, NAMESPACES),
    st.builds(Audience.members, NAMESPACES, DM_READERS),
    st.builds(Audience.members, NAMESPACES, GROUP_READERS),
    st.builds(Audience.external, NAMESPACES, DM_READERS),
    st.builds(Audience.external, NAMESPACES, GROUP_READERS),
)
AUDIENCES = st.one_of(DESTINATIONS, st.just(UNKNOWN), st.just(NOBODY))
LINKED = st.frozensets(st.integers(min_value=1, max_value=6), max_size=3)


@st.composite
def rule_inputs(draw: st.DrawFn) -> tuple[Audience, Audience, frozenset[int]]:
    """An origin, a destination and linked readers; half the time a link reaches one of the origin's
    readers, so the identity-link path is exercised, not just reachable."""
    origin, destination, linked = draw(AUDIENCES), draw(AUDIENCES), draw(LINKED)
    if origin.readers and draw(st.booleans()):
        linked |= {draw(st.sampled_from(origin.readers))}
    return origin, destination, linked


PROPERTY_SETTINGS = settings(max_examples=500, deadline=None)


@pytest.mark.django_db
def test_sql_rule_equals_the_oracle_everywhere() -> None:
    """For any origin, any destination (deliverable or not) and any set of linked readers, the SQL rule
    and the Python oracle give the same answer."""
    with connection.cursor() as cursor:

        @PROPERTY_SETTINGS
        @given(rule_inputs())
        def check(inputs: tuple[Audience, Audience, frozenset[int]]) -> None:
            origin, destination, linked = inputs
            assert sql_allows(cursor, origin, destination, linked) == audience_allows(origin, destination, linked)

        check()


@st.composite
def members_with_links(draw: st.DrawFn) -> tuple[Audience, Audience, frozenset[int]]:
    """A members origin and destination (DMs or groups) and links that usually reach the origin's readers."""
    readers = st.one_of(DM_READERS, GROUP_READERS)
    origin = draw(st.builds(Audience.members, NAMESPACES, readers))
    destination = draw(st.builds(Audience.members, NAMESPACES, readers))
    linked = draw(st.frozensets(st.sampled_from(origin.readers))) | draw(LINKED)
    return origin, destination, linked


@pytest.mark.django_db
def test_identity_links_agree_with_the_oracle_between_members_audiences() -> None:
    """Where identity links matter (members to members), SQL and oracle agree on every combination of
    DMs, groups, namespaces and links: a link opens DM to DM and nothing else."""
    with connection.cursor() as cursor:

        @PROPERTY_SETTINGS
        @given(members_with_links())
        def check(inputs: tuple[Audience, Audience, frozenset[int]]) -> None:
            origin, destination, linked = inputs
            assert sql_allows(cursor, origin, destination, linked) == audience_allows(origin, destination, linked)

        check()


@PROPERTY_SETTINGS
@given(a=AUDIENCES, b=AUDIENCES, destination=DESTINATIONS)
def test_most_restrictive_is_sound(a: Audience, b: Audience, destination: Audience) -> None:
    """If text derived from sources ``a`` and ``b`` may reach a destination, each source may reach it."""
    combined = most_restrictive([a, b])
    if audience_allows(combined, destination):
        assert audience_allows(a, destination)
        assert audience_allows(b, destination)


@PROPERTY_SETTINGS
@given(sources=st.lists(AUDIENCES, min_size=1, max_size=4), destination=DESTINATIONS)
def test_most_restrictive_is_exact(sources: list[Audience], destination: Audience) -> None:
    """The combined audience reaches exactly the destinations every source reaches (no link involved):
    sound, and no stricter than it must be, whatever the order of the sources."""
    combined = most_restrictive(sources)
    assert audience_allows(combined, destination) == all(audience_allows(s, destination) for s in sources)
    assert most_restrictive(reversed(sources)) == combined


@PROPERTY_SETTINGS
@given(x=AUDIENCES)
def test_most_restrictive_of_one_source_is_that_source(x: Audience) -> None:
    """A single source's audience is passed through unchanged."""
    assert most_restrictive([x]) == x


def test_most_restrictive_of_no_sources_is_unknown() -> None:
    """Text with no recorded source has unknown provenance, and so reaches nothing."""
    assert most_restrictive([]) == UNKNOWN
