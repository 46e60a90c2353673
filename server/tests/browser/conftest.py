"""Fixtures of the browser tests: a real headless Chromium (Debian's) driven with Selenium.

Every test in this folder is marked ``browser`` (``-m browser`` selects them, ``-m "not
browser"`` leaves them out); they run in the normal ``scripts/test`` run. A test takes
``browser`` (JavaScript on) or ``browser_nojs`` (JavaScript off), a clean ``webdriver.Chrome``
that reaches 127.0.0.1 and localhost only, and ``screenshot`` to save pictures of its pages::

    def test_tasks_page(browser: webdriver.Chrome, screenshot: Screenshot) -> None:
        browser.get(f"{base_url}/console/tasks")
        assert browser.find_element(By.CSS_SELECTOR, "h1").text == "Tasks"
        screenshot("tasks")

``ORBIT_CONSOLE_SCREENSHOTS=docs/console scripts/test server/tests/browser`` writes the pictures as
``docs/console/<name>.png`` (a relative folder is taken from the repository's root); without
the variable ``screenshot`` does nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
from selenium import webdriver

from tests.harness.browser import Browsers, ChromeDriverService, save_screenshot

SCREENSHOTS_ENV = "ORBIT_CONSOLE_SCREENSHOTS"
_HERE = Path(__file__).parent
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


class Screenshot(Protocol):
    def __call__(self, name: str, driver: webdriver.Chrome | None = None) -> Path | None: ...


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Called with every collected item, not only this folder's.
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def chromedriver_service() -> Iterator[ChromeDriverService]:
    """The test process's ChromeDriver (Chromium and ChromeDriver are installed with apt-get
    on first use when missing and running as root)."""
    with ChromeDriverService() as service:
        yield service


@pytest.fixture(scope="session")
def browsers(
    chromedriver_service: ChromeDriverService, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Browsers]:
    """The test process's browsers, reset between tests instead of restarted."""
    # Profiles in the run's temporary folder, which scripts/test removes even after a crash.
    started = Browsers(chromedriver_service, tmp_path_factory.mktemp("chromium"))
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def browser(browsers: Browsers) -> webdriver.Chrome:
    """A clean headless Chromium with JavaScript: no cookies, storage, cache or other windows,
    showing ``about:blank`` in a 1280x900 window; hosts other than 127.0.0.1 and localhost
    are unreachable."""
    return browsers.get(javascript=True)


@pytest.fixture
def browser_nojs(browsers: Browsers) -> webdriver.Chrome:
    """As ``browser``, with JavaScript disabled: what a page shows without scripts."""
    return browsers.get(javascript=False)


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Screenshot:
    """``screenshot(name)`` saves a PNG of the page the test's browser shows (``driver=``
    picks another) as ``$ORBIT_CONSOLE_SCREENSHOTS/<name>.png``, a relative folder being taken
    from the repository's root, and returns its path; without the variable it does nothing
    and returns None. Names are lower case: letters, digits, ``-`` and ``_``."""

    def take(name: str, driver: webdriver.Chrome | None = None) -> Path | None:
        if not _NAME.fullmatch(name):
            raise ValueError(f"screenshot names are lower case letters, digits, - and _: {name!r}")
        directory = os.environ.get(SCREENSHOTS_ENV)
        if not directory:
            return None
        if driver is None:
            driver = _test_browser(request)
        path = request.config.rootpath / directory / f"{name}.png"
        return save_screenshot(driver, path)

    return take


def _test_browser(request: pytest.FixtureRequest) -> webdriver.Chrome:
    used = [name for name in ("browser", "browser_nojs") if name in request.fixturenames]
    if len(used) != 1:
        raise ValueError(
            "screenshot() needs driver= unless the test uses exactly one of browser, browser_nojs"
        )
    driver: webdriver.Chrome = request.getfixturevalue(used[0])
    return driver
