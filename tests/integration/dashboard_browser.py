"""Debian's Chromium driven by Playwright, for the dashboard's browser tests.

Playwright is the test dependency; its own browser download is never used: the launch names
/usr/bin/chromium (scripts/test.sh installs Debian's package). Without it the tests skip,
saying so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

__all__ = ["Browser", "browser_or_skip", "screenshot_dir"]

CHROMIUM = "/usr/bin/chromium"
# Headless, no sandbox (tests may run as root), and nothing that calls home.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
ROOT = Path(__file__).resolve().parents[2]


def screenshot_dir() -> Path:
    """Where the tests' screenshots go: test-output/screenshots/ (gitignored), or
    $AIPAAS_SCREENSHOTS."""
    path = Path(os.environ.get("AIPAAS_SCREENSHOTS", ROOT / "test-output" / "screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def browser_or_skip() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip(f"Debian's chromium is not installed ({CHROMIUM}); scripts/test.sh installs it")
    executable = CHROMIUM if Path(CHROMIUM).exists() else str(shutil.which("chromium"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=list(FLAGS))
        try:
            yield browser
        finally:
            browser.close()
