"""The fingerprint of a belief: what a rejection remembers so that the belief can never come back.

One function computes it for both sides, the rejection that records it and every write path that
must refuse a rejected belief (``memory.services``), so the two can never disagree about what
"the same belief" means. Two statements are the same belief when they say the same thing about the
same subject after normalisation: Unicode compatibility forms folded, case folded, whitespace
collapsed, surrounding quotes and final punctuation dropped.

A rewording of a rejected belief is held back too (:func:`is_rewording`): about the same subject, with
nearly the same content words (Jaccard of at least :data:`REWORDING_JACCARD`) and the same polarity
(a denial of the rejected statement, or the same said of the past, is not a restatement). The threshold was
chosen on the labelled pairs in ``tests/retrieval/test_rejected_rewordings.py``, which assert its
precision and recall.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from memory.models import MemoryRevision, Rejection, RejectionKind
from memory.retrieval.query import FUNCTION_WORDS

_SPACE = re.compile(r"\s+")
#: Quotes (straight and curly) and sentence punctuation around a statement carry no meaning.
_EDGES = "\"'`\u201c\u201d\u2018\u2019 .!?;:,"

#: Kinds that say the statement itself is false (now): only these refuse a re-learned copy. "Not here"
#: and "something's wrong" leave the belief true somewhere, so they never block a write.
REPLAYED_KINDS = (RejectionKind.NOT_TRUE, RejectionKind.CHANGED)

#: Content-word Jaccard at or above which a statement is a rewording of a rejected one.
REWORDING_JACCARD = 0.65
_WORD = re.compile(r"[a-z0-9']+")
#: Words that turn a statement into its denial or into the past: "does not live in Lisbon" and "used to
#: work at Acme" are not restatements of "lives in Lisbon" and "works at Acme".
REVERSALS = frozenset(
    {"not", "no", "never", "nor", "none", "nobody", "nothing", "neither", "without", "longer", "anymore"}
    | {"used", "formerly", "previously", "former", "ex"}
)


def normalise_statement(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", folded).strip(_EDGES)


def belief_fingerprint(body: str, subject_id: int | None) -> str:
    """sha256 (hex) of the normalised statement and its subject actor id ("" when unresolved)."""
    key = f"{normalise_statement(body)}\x1f{subject_id if subject_id is not None else ''}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def revision_fingerprint(revision: MemoryRevision) -> str:
    return belief_fingerprint(revision.body, revision.subject_id)


def content_words(text: str) -> frozenset[str]:
    """The statement's words without function words, each stemmed, and any "n't" read as "not"
    (negations are content)."""
    words = set()
    for word in _WORD.findall(normalise_statement(text).replace("\u2019", "'")):
        if word.endswith("n't"):
            words.add("not")
            continue
        word = word.strip("'")
        if not word or word in FUNCTION_WORDS:
            continue
        words.add(_stem(word))
    return frozenset(words)


def _stem(word: str) -> str:
    """A crude stem, the same on both sides: "lives", "lived", "living" and "live" all read "liv",
    "fluently" reads "fluent"."""
    for suffix in ("ing", "ly", "ed", "es", "s"):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def is_rewording(statement: str, rejected: str) -> bool:
    """Does ``statement`` say what ``rejected`` said, in other words? (Both about the same subject.)"""
    words, rejected_words = content_words(statement), content_words(rejected)
    if not words or not rejected_words or bool(words & REVERSALS) != bool(rejected_words & REVERSALS):
        return False
    return len(words & rejected_words) >= REWORDING_JACCARD * len(words | rejected_words)


def is_rejected(*, agent_id: int, body: str, subject_id: int | None) -> bool:
    """Has an end user rejected this statement, or a rewording of it, in this agent's memory, within
    the rejection's reach? Only the kinds that say the statement is false count (:data:`REPLAYED_KINDS`).

    The reach: a belief about a subject is held back by a rejection of the same statement about the
    same subject; a belief about nobody in particular by a rejection of the same statement about
    anyone, because leaving out the subject must not be the way a rejected belief comes back ("Alice
    lives in Lisbon." rejected about Alice returns neither with her as subject nor with none).
    """
    rejections = Rejection.objects.filter(agent_id=agent_id, kind__in=REPLAYED_KINDS)
    if subject_id is not None:
        if rejections.filter(fingerprint=belief_fingerprint(body, subject_id)).exists():
            return True
        rejected = rejections.filter(revision__subject_id=subject_id)
    else:
        rejected = rejections
    statement = normalise_statement(body)
    return any(
        normalise_statement(text) == statement or is_rewording(body, text)
        for text in rejected.values_list("revision__body", flat=True)
    )
