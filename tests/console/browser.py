"""Headless Debian Chromium for the console's browser tests, driven by Playwright.

What it does: finds ``/usr/bin/chromium`` (Debian's package; Playwright's own browsers are
never downloaded: the network may be closed) and launches it headless with a fresh profile and
everything that would reach out (sync, component updates, background networking) off;
``skip_without_chromium`` skips a test module with one line saying how to get Chromium;
``artefacts`` is where screenshots go (``$USHER_CONSOLE_ARTEFACTS``, else the pytest basetemp).
What it must never do: download a browser, reach the network, or keep a browser after its
block.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOW_TO_GET_IT = (
    "browser tests skipped: no Chromium at /usr/bin/chromium "
    "(install Debian's with `apt-get install -y chromium`; .ci/run does)"
)


def skip_without_chromium() -> None:
    """Skip the calling test module (one line) when Chromium or Playwright is missing."""
    if not CHROMIUM.exists():
        pytest.skip(HOW_TO_GET_IT, allow_module_level=True)
    pytest.importorskip("playwright.sync_api", reason="playwright: pip install -e '.[dev]'")


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A browser context on a fresh profile (closed, with its profile, after the block)."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="usher-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 860},
        )
        try:
            yield context
        finally:
            context.close()


def artefacts(basetemp: Path) -> Path:
    """Where the tests' screenshots go (made if missing)."""
    folder = Path(os.environ.get("USHER_CONSOLE_ARTEFACTS") or basetemp / "console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
