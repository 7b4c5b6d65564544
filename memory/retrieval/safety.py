"""The safety pass: memory is data, never instructions, and secrets are never rendered.

Each statement is scanned before rendering. An item that looks like a prompt injection, or that
holds a credential, is replaced by a ``[BLOCKED]`` placeholder that keeps its id (so the user can
inspect and correct it) and is counted in the trace; its text is never shown. Blocking is per item:
one bad memory never suppresses the block.
"""

from __future__ import annotations

import re

INJECTION_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|any|your|the)\b.{0,20}"
        r"\b(instructions?|rules|prompts?|guidelines|directives)\b",
        r"\byou are now\b",
        r"\b(new|updated|real) (system )?instructions?\s*:",
        r"\bsystem prompt\b",
        r"</?\s*(system|assistant|developer|instructions?|memory)\s*>",
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
