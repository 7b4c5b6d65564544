"""Outside text that names something (a person's display name, a conversation's title, a project), as
Engram stores it.

Names arrive from connectors and reach the model: in the memory block's labels, in the items of a
recall and in the author of every history hit. A name is data, one line of plain text, so it is
normalised once, on the way in (ingest, renames, conversation upserts):

- NFKC, so text styled with compatibility characters (fullwidth or mathematical letters, ligatures)
  reads, and is scanned, as the letters it shows;
- control (Cc), format (Cf: bidirectional embeddings, overrides and isolates, zero-width spaces and
  joiners, the BOM, tag characters) and surrogate (Cs) characters dropped; a control character that
  is a line break or a tab becomes a space first, so words stay apart;
- every run of whitespace (newlines and line separators included) collapsed to one space, ends
  trimmed;
- cut to a length bound.

The function is idempotent, so a name stored before this rule existed can be passed through it again
when it is rendered (``memory.retrieval.safety.model_label`` does) and a stored name compares equal to
the same name arriving again. Message bodies are not names: they are stored byte for byte.
"""

from __future__ import annotations

import unicodedata

#: A display name's bound. Connectors cap names well below it (Slack's display names at 80 characters,
#: Discord's at 32), so real names stay whole; the bound caps what one label costs, since a label is
#: rendered up to twice on every memory line and once on every history hit and neighbour, and the
#: block's token estimate counts a token per three bytes (200 CJK characters would be ~200 tokens).
NAME_LIMIT = 100
#: Titles and projects: the width of their columns, so the bound never cuts what the API accepted
#: (a project is matched by equality, and a cut could merge two of them).
TITLE_LIMIT = 200

_DROPPED = frozenset({"Cc", "Cf", "Cs"})


def clean_name(text: str, *, limit: int = NAME_LIMIT) -> str:
    """``text`` as one normalised line of at most ``limit`` characters (see the module docstring)."""
    # Dropped before normalising, so that nothing dropped keeps apart what NFKC composes (an "e", a
    # zero-width joiner and an acute accent), and again after, in case a compatibility form yields one.
    text = _visible(unicodedata.normalize("NFKC", _visible(text)))
    return " ".join(text.split())[:limit].rstrip()


def _visible(text: str) -> str:
    return "".join(
        " " if char.isspace() else char for char in text if char.isspace() or unicodedata.category(char) not in _DROPPED
    )
