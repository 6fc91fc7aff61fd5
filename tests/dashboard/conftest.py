"""Dashboard fixtures: a game ticking on a thread of its own with its dashboard served on
loopback, mod folders written in a line, and a headless Chromium driven by Playwright.

Every server, game thread and browser a test starts is stopped at the end of the test.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from running_game import CHROMIUM_ARGS, INSTALL_BROWSER, WAIT_S, Running


def _missing(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return True
    return False


MISSING = [name for name in ("starlette", "uvicorn", "sse_starlette") if _missing(name)]


@pytest.fixture(autouse=True)
def _the_dashboard_extra(request: pytest.FixtureRequest) -> None:
    """Tests that serve (all but those of modules with ``NEEDS_SERVER = False``) skip
    without the dashboard's packages."""
    if MISSING and getattr(request.module, "NEEDS_SERVER", True):
        pytest.skip(f"the dashboard tests need moonbox[dashboard] ({', '.join(MISSING)} "
                    "missing): pip install -e '.[dev]'")


@pytest.fixture
def mods_dir(tmp_path: Path) -> Path:
    d = tmp_path / "mods"
    d.mkdir()
    return d


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """``running(mods_dir, store=True, **dashboard_options)``: a ticking game and its
    dashboard, stopped at the end of the test."""
    made: list[Running] = []

    def make(mods_dir: Path, *, store: bool = True, **options: Any) -> Running:
        r = Running(mods_dir, tmp_path / "versions.db" if store else None, **options)
        made.append(r)
        return r

    yield make
    for r in reversed(made):
        r.close()


def _chromium() -> str | None:
    path = os.environ.get("MOONBOX_CHROMIUM") or shutil.which("chromium") \
        or shutil.which("chromium-browser")
    return path if path and os.access(path, os.X_OK) else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium with a fresh profile (skips with how to install it)."""
    # CI sets MOONBOX_REQUIRE_BROWSER: there a missing browser fails instead of skipping.
    missing = pytest.fail if os.environ.get("MOONBOX_REQUIRE_BROWSER") else pytest.skip
    chromium = _chromium()
    if chromium is None:
        missing(INSTALL_BROWSER)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing(INSTALL_BROWSER)
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 1000})
        context.set_default_timeout(WAIT_S * 1000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; JavaScript errors on it fail the test."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        page.close()
    assert not errors, f"errors on the page: {errors}"
