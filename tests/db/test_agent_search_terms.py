"""Agent-qualified search terms match exactly what the plain sidecar match would, for that agent only.

The GIN index of each sidecar is built over ``engram_agent_lexemes(agent_id, tsv)`` and searched with
``engram_agent_search_query(agent, text)``; this checks, over seeded random documents and queries
full of quotes, backslashes, hyphens, negations and non-Latin text, that a document matches the
qualified query exactly when it matches the plain one and belongs to the asking agent.
"""

from __future__ import annotations

import random

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

WORDS = [
    "coffee", "Coffee's", "tea", "not", "never", "e-mail", "back\\slash", "it's", "''", "'", "\\", ":", "|", "&",
    "!", "(", "dog", "dogs", "running", "ran", "über", "naïve", "東京", "🙂", "a:b", "7:coffe", "x" * 40, "the",
    "and", "of", "without", "cannot", "Zürich", "O'Brien", "don't", "C:\\path", "*", "<->",
]  # fmt: skip


def _text(rng: random.Random, longest: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, longest)))


def test_qualified_terms_match_exactly_the_plain_match_of_the_same_agent() -> None:
    rng = random.Random(20261130)
    cases = [(rng.randint(1, 3), _text(rng, 12), rng.randint(1, 3), _text(rng, 5)) for _ in range(3_000)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE qualified IS DISTINCT FROM plain),"
            " count(*) FILTER (WHERE plain), count(*) FILTER (WHERE NOT plain AND doc_agent <> query_agent"
            "   AND engram_search_document(doc) @@ engram_search_query(query))"
            " FROM (SELECT doc_agent, query_agent, doc, query,"
            "   coalesce(engram_agent_lexemes(doc_agent, engram_search_document(doc))"
            "     @@ engram_agent_search_query(query_agent, query), false) AS qualified,"
            "   coalesce(doc_agent = query_agent AND engram_search_document(doc) @@ engram_search_query(query),"
            "     false) AS plain"
            "  FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::text[]) AS c(doc_agent, doc, query_agent, query)"
            " ) judged",
            [[c[0] for c in cases], [c[1] for c in cases], [c[2] for c in cases], [c[3] for c in cases]],
        )
        disagreements, plain_matches, other_agent_matches = cursor.fetchone()
    assert disagreements == 0
    # The cases exercise both sides: real matches, and words that match only in another agent's documents.
    assert plain_matches > 100
    assert other_agent_matches > 100


def test_a_query_of_function_words_or_punctuation_matches_nothing() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT engram_agent_search_query(1, %s), engram_agent_search_query(1, %s)", ["the and of", "|&!"]
        )
        assert cursor.fetchone() == (None, None)
