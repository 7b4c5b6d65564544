"""The lexical arm matches a question about the people it names without their names (a name matches
every statement about that person, which the subject feature already rewards); a first-person
question keeps them, because there the name is what is asked about."""

from __future__ import annotations

from accounts.models import Actor
from memory.retrieval.query import form_query

CAROLINE = Actor(pk=1, display_name="Caroline", external_id="U1")
MELANIE = Actor(pk=2, display_name="Melanie", external_id="U2")


def test_a_question_about_a_named_person_matches_without_the_name() -> None:
    query = form_query(message="What did Caroline's friend research?", requester_id=2, known_actors=[CAROLINE, MELANIE])
    assert query.named_subject_ids == (1,) and query.text == "What did Caroline's friend research?"
    assert query.arm_text == "What did friend research?"


def test_a_first_person_question_keeps_the_names() -> None:
    query = form_query(message="Is my manager Caroline?", requester_id=2, known_actors=[CAROLINE, MELANIE])
    assert query.arm_text == "Is my manager Caroline?"


def test_a_question_that_is_only_a_name_keeps_it() -> None:
    assert form_query(message="Caroline?", requester_id=2, known_actors=[CAROLINE]).arm_text == "Caroline?"
