"""Dashboard fixtures: the real API in a uvicorn process, Debian's Chromium driven by Playwright.

Chromium is the system one (`apt-get install chromium`), never a browser Playwright downloads. Screenshots go
to the test's tmp folder; set EYAS_DASHBOARD_SCREENSHOTS=docs/screenshots to refresh the ones in the docs.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from app.core.config import Settings
from tests.conftest import free_port, serving, worker_env

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1440, "height": 900}
MAX_SCREENSHOT_BYTES = 300 * 1024


@pytest.fixture(scope="session")
def dashboard_url(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real uvicorn process serving the API with the dashboard, shared by the tests (each test still gets
    emptied tables through the `settings` fixture)."""
    log = tmp_path_factory.mktemp("dashboard-api") / "api.log"
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "tests.dashboard.asgi:create",
        "--port",
        str(free_port()),
    ]
    with serving(argv, worker_env(base_settings, EYAS_API_MAINTENANCE="true"), log) as url:
        yield url


@pytest.fixture(scope="package")  # playwright's sync API keeps an event loop running in the main thread
def browser() -> Iterator[Any]:  # until it stops: end it with this folder, not the session
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@dataclass
class Dashboard:
    """A browser tab on the dashboard, with what went wrong in it (console errors, uncaught exceptions)."""

    page: Any
    url: str
    shots: Path
    errors: list[str] = field(default_factory=list)

    def open(self, route: str) -> None:
        self.page.goto(f"{self.url}/{route}")

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).inner_text())

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.wait_for_timeout(300)  # let bar transitions settle
        self.page.screenshot(path=str(path))
        assert path.stat().st_size < MAX_SCREENSHOT_BYTES, f"{path} is {path.stat().st_size} bytes"
        if wanted := os.environ.get("EYAS_DASHBOARD_SCREENSHOTS"):
            Path(wanted).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(wanted) / path.name)
        return path


def _open_tab(browser: Any, url: str, shots: Path, token: str | None) -> Iterator[Dashboard]:
    context = browser.new_context(viewport=VIEWPORT, color_scheme="light")
    if token is not None:
        context.add_init_script(f"sessionStorage.setItem('eyas.token', {token!r})")
    page = context.new_page()
    page.set_default_timeout(15_000)
    tab = Dashboard(page=page, url=url, shots=shots)
    page.on("console", lambda msg: tab.errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    yield tab
    context.close()


@pytest.fixture
def admin_token(admin: dict[str, str]) -> str:
    return admin["Authorization"].removeprefix("Bearer ")


@pytest.fixture
def dashboard(browser: Any, dashboard_url: str, tmp_path: Path, admin_token: str) -> Iterator[Dashboard]:
    """A tab whose session already holds an admin token."""
    yield from _open_tab(browser, dashboard_url, tmp_path, admin_token)


@pytest.fixture
def fresh_tab(browser: Any, dashboard_url: str, tmp_path: Path) -> Iterator[Dashboard]:
    """A tab with no token yet."""
    yield from _open_tab(browser, dashboard_url, tmp_path, None)
