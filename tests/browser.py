"""Real headless Chromium for page tests: Debian's ``chromium`` driven by Playwright for Python.

Pages are served by pytest-django's ``live_server`` (a real HTTP server on loopback). Chromium runs
with the flags this network needs (no background networking, no component updates) and a fresh
profile. If no Chromium is installed the browser tests skip, saying why; ``scripts/test`` installs
it (Debian package ``chromium``) where it can.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("ENGRAM_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(
    os.environ.get("ENGRAM_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "var" / "test-artifacts")
)
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


#: Module scope, not session: Playwright's sync API keeps an event loop in the main thread while it runs,
#: and a database connection that a later test opened outside a transaction (the migrations test's
#: ``makemigrations --check``) was then one that pytest-django's teardown did not close, so the test
#: database could not be dropped ("is being accessed by other users"). Stopped after each module, it
#: leaves the tests that follow as it found them.
@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """One Chromium process for a module's page tests (pages and contexts are per test)."""
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's chromium (scripts/test does, as root)")
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: object, live_server: object) -> Iterator[object]:
    """A fresh browser context and page; screenshots go to ``ARTIFACTS``."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


def screenshot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path
