"""The safety pass: memory is data, never instructions, and secrets are never rendered.

Each statement is scanned before rendering. An item that looks like a prompt injection, or that
holds a credential, is replaced by a ``[BLOCKED]`` placeholder that keeps its id (so the user can
inspect and correct it) and is counted in the trace; its text is never shown. Blocking is per item:
one bad memory never suppresses the block.

Names pass the same scan (:func:`model_label`): a display name, like a statement, is outside text, and
every label a model is given (the block's subjects and sources, a recall's items, the authors of
history hits and their neighbours) is made by that one function.
"""

from __future__ import annotations

import functools
import re

from accounts.models import actor_label
from config.text import NAME_LIMIT, TITLE_LIMIT, clean_name

INJECTION_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|any|your|the)\b.{0,20}"
        r"\b(instructions?|rules|prompts?|guidelines|directives)\b",
        r"\byou are now\b",
        r"\b(new|updated|real) (system )?instructions?\s*:",
        r"\bsystem prompt\b",
        r"</?\s*(system|assistant|developer|instructions?|memory)\s*>",
        # The block's own tags, with attributes or left open: text must never open or close the block.
        r"<\s*/?\s*memory\b",
        r"\b(jailbreak|developer mode|dan mode)\b",
        r"\bact as (an?|the) (unrestricted|unfiltered|different)\b",
        r"\b(reveal|print|output|leak) (your|the) (system prompt|instructions|hidden)\b",
        r"\bdo not (tell|inform) the user\b",
        r"\bgrant (me|yourself|the user) (admin|full|root)\b",
    )
]

SECRET_PATTERNS = [
    re.compile(p)
    for p in (
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        r"\bAKIA[0-9A-Z]{16}\b",
        r"\b(sk|rk|pk)[-_](live|test|proj)?[-_]?[A-Za-z0-9]{20,}\b",
        r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
        r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b",
        r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b",
        r"\begk_[0-9a-f]{8}_[A-Za-z0-9_-]{20,}",
        r"(?i)\b(password|passwd|passphrase|api[_ -]?key|secret|token)\b\s*(is|=|:)\s*\S{6,}",
    )
]

INJECTION = "failed injection scan"
SECRET = "contains a credential"

#: Every credential pattern needs one of these fragments as written (``(sk|rk|pk)[-_]`` a "k-" or an
#: underscore; ``gh?_`` and ``egk_`` an underscore) or one of ``SECRET_WORDS`` in any case (``password``,
#: ``passwd`` and ``passphrase`` "pass", ``api key`` "api").
SECRET_MARKS = ("-----BEGIN ", "AKIA", "k-", "_", "xox", "eyJ")
SECRET_WORDS = ("pass", "api", "secret", "token")
#: Every injection pattern needs one of these words in any case, spaced as the pattern spaces it.
INJECTION_WORDS = (
    "ignore",
    "disregard",
    "forget",
    "override",
    "you are now",
    "instruction",
    "system prompt",
    "<",
    "jailbreak",
    "developer mode",
    "dan mode",
    "act as",
    "reveal",
    "print",
    "output",
    "leak",
    "do not",
    "grant",
)


def block_reason(text: str) -> str:
    """Why ``text`` must not be rendered, or "" if it may be.

    The scan runs on every line a recall or a search hands the agent, so a set of patterns is only run
    when the text holds a fragment each of them needs (plain substring tests, several times cheaper
    than the patterns; most lines hold none). For ASCII text a lowered substring test is exactly the
    patterns' case-insensitive match, so the shortcut skips only what could not match; any other text
    is scanned in full."""
    if not text.isascii():
        return scan(text)
    lowered = text.lower()
    return scan(
        text,
        secrets=any(mark in text for mark in SECRET_MARKS) or any(word in lowered for word in SECRET_WORDS),
        injections=any(word in lowered for word in INJECTION_WORDS),
    )


def scan(text: str, *, secrets: bool = True, injections: bool = True) -> str:
    """:func:`block_reason` by the patterns themselves: the credential patterns unless ``secrets`` is
    False, the injection patterns unless ``injections`` is False."""
    if secrets and any(p.search(text) for p in SECRET_PATTERNS):
        return SECRET
    if injections and any(p.search(text) for p in INJECTION_PATTERNS):
        return INJECTION
    return ""


#: What a name's angle brackets become in a label: look-alikes that cannot open or close any markup.
_BRACKETS = str.maketrans({"<": "\u2039", ">": "\u203a"})
#: The label of a person neither whose name nor whose external id may be shown.
WITHHELD_NAME = "(name withheld)"


#: Every recall and search labels the same few people again and again: a name's screening is a pure
#: function of its text, so each worker remembers the latest few thousand.
@functools.lru_cache(maxsize=4096)
def model_name(text: str, *, limit: int = NAME_LIMIT) -> str:
    """Outside text that names something (a display name, an external id, a project), as a model may
    read it: cleaned as ingest cleans names (rows stored before that rule existed are cleaned here),
    with ``<`` and ``>`` replaced by look-alikes so that no name forms a tag; "" if it fails the
    safety scan. ``limit`` is the bound ingest applies to that kind of name."""
    cleaned = clean_name(text, limit=limit)
    if block_reason(cleaned):
        return ""
    return cleaned.translate(_BRACKETS)


#: What a project name that fails the scan reads as.
WITHHELD_PROJECT = "another project"


def model_project(origin_scope: str) -> str:
    """A memory's project (the one it was learned in, named by a connector) as a model may read it:
    :func:`model_name`, or ``another project`` if it fails the scan ("" for none)."""
    return model_name(origin_scope, limit=TITLE_LIMIT) or (WITHHELD_PROJECT if origin_scope.strip() else "")


def model_label(display_name: str, external_id: str) -> str:
    """How a person is named to a model, everywhere a model reads a person's name: ``Victor (id U123)``.

    A display name that fails the safety scan (or cleans to nothing) is replaced by the external id
    alone, ``U123``; the name itself never reaches the model. An external id that fails too gives
    ``(name withheld)``."""
    ident = model_name(external_id, limit=TITLE_LIMIT)
    if not ident:
        return WITHHELD_NAME
    name = model_name(display_name)
    return actor_label(name, ident) if name else ident
