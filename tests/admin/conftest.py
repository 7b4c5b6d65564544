"""Admin test fixtures: real headless Chromium for the browser tests, and strict HTML parsing."""

from __future__ import annotations

import html5lib  # type: ignore[import-untyped]
import pytest
from html5lib.html5parser import ParseError  # type: ignore[import-untyped]


def assert_valid_html(content: bytes | str, where: str = "") -> None:
    """The page parses without a single error under html5lib's strict mode (the HTML5 parsing
    algorithm: misnested or stray tags, bad attributes, a missing doctype all fail)."""
    parser = html5lib.HTMLParser(strict=True)
    try:
        parser.parse(content)
    except ParseError as error:
        pytest.fail(f"{where}: invalid HTML: {error}")
