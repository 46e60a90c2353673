"""The browser harness: a real headless Chromium that reaches the loopback server and
nothing else, with and without JavaScript, clean for every test, and its screenshots."""

from __future__ import annotations

import contextlib
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By

from tests.harness.browser import WINDOW_SIZE, Browsers

from .conftest import SCREENSHOTS_ENV, Screenshot

PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Harness page</title></head>
<body>
<h1>Harness page</h1>
<p id="marker">static</p>
<noscript><p id="noscript">shown without JavaScript</p></noscript>
<img id="by-address" src="{elsewhere}pixel.png" alt="" onerror="this.dataset.failed = 'yes'">
<img id="by-name" src="https://example.com/pixel.png" alt="" onerror="this.dataset.failed = 'yes'">
<script src="/local.js"></script>
<script src="https://example.com/x.js"
  onerror="document.body.dataset.externalScript = 'failed'"></script>
</body>
</html>
"""

LOCAL_SCRIPT = "document.getElementById('marker').textContent = 'ran';\n"


class Site:
    """A tiny web site on a loopback address, in a thread; it records the paths asked for."""

    def __init__(self, host: str, files: dict[str, tuple[str, str]]) -> None:
        self.files = files
        self.requested: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.requested.append(self.path)
                content_type, body = site.files.get(self.path, ("text/plain", ""))
                self.send_response(200 if self.path in site.files else 404)
                self.send_header("Content-Type", f"{content_type}; charset=utf-8")
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_port}/"

    @contextlib.contextmanager
    def serving(self) -> Iterator[Site]:
        thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join()


@pytest.fixture
def elsewhere() -> Iterator[Site]:
    """A site on 127.0.0.2: a loopback address, but not one the browser may reach, so a
    request to it shows whether requests to IP addresses are blocked as well as names."""
    with Site("127.0.0.2", {"/pixel.png": ("image/png", "")}).serving() as site:
        yield site


@pytest.fixture
def site(elsewhere: Site) -> Iterator[Site]:
    files = {
        "/": ("text/html", PAGE.format(elsewhere=elsewhere.url)),
        "/local.js": ("text/javascript", LOCAL_SCRIPT),
    }
    with Site("127.0.0.1", files).serving() as site:
        yield site


def test_page_loads_from_the_loopback_server_and_nothing_else(
    browser: webdriver.Chrome, site: Site, elsewhere: Site
) -> None:
    browser.get(site.url)

    assert browser.title == "Harness page"
    assert browser.find_element(By.ID, "marker").text == "ran"
    for image in ("by-address", "by-name"):
        assert browser.find_element(By.ID, image).get_attribute("data-failed") == "yes"
    assert browser.execute_script("return document.body.dataset.externalScript") == "failed"
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter(e => e.responseStart > 0).map(e => e.name)"
    )
    assert f"{site.url}local.js" in loaded
    assert [url for url in loaded if not url.startswith(site.url)] == []
    assert elsewhere.requested == []
    assert "/local.js" in site.requested


def test_only_loopback_hosts_are_reachable(browser: webdriver.Chrome, site: Site) -> None:
    browser.get(site.url.replace("127.0.0.1", "localhost"))
    assert browser.title == "Harness page"

    for url in ("http://example.com/", "https://example.com/", "http://93.184.215.14/"):
        with pytest.raises(WebDriverException, match="ERR_PROXY_CONNECTION_FAILED"):
            browser.get(url)


def test_browser_is_headless_with_a_fixed_window(browser: webdriver.Chrome) -> None:
    assert "HeadlessChrome" in browser.execute_script("return navigator.userAgent")
    viewport = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    assert tuple(viewport) == WINDOW_SIZE
    assert browser.current_url == "about:blank"
    assert browser.execute_script("return Intl.DateTimeFormat().resolvedOptions().timeZone") in {
        "UTC",
        "Etc/UTC",
    }


def test_javascript_can_be_disabled(browser_nojs: webdriver.Chrome, site: Site) -> None:
    browser_nojs.get(site.url)

    assert browser_nojs.find_element(By.ID, "marker").text == "static"
    assert browser_nojs.find_element(By.ID, "noscript").is_displayed()
    assert "/local.js" not in site.requested


def test_each_test_gets_a_clean_browser(browsers: Browsers, site: Site) -> None:
    used = browsers.get()
    used.get(site.url)
    used.execute_script(
        "localStorage.setItem('k', 'v'); sessionStorage.setItem('k', 'v');"
        "document.cookie = 'k=v'; window.open('about:blank');"
    )
    used.set_window_size(640, 480)

    clean = browsers.get()
    assert clean.current_url == "about:blank"
    assert len(clean.window_handles) == 1
    viewport = clean.execute_script("return [window.innerWidth, window.innerHeight]")
    assert tuple(viewport) == WINDOW_SIZE
    clean.get(site.url)
    assert clean.get_cookies() == []
    assert clean.execute_script(
        "return [localStorage.length, sessionStorage.length, document.cookie]"
    ) == [0, 0, ""]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_screenshot_writes_a_png_when_asked(
    browser: webdriver.Chrome,
    site: Site,
    screenshot: Screenshot,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    browser.get(site.url)
    monkeypatch.setenv(SCREENSHOTS_ENV, str(tmp_path / "shots"))

    path = screenshot("harness-page")

    assert path == tmp_path / "shots" / "harness-page.png"
    assert _png_size(path) == WINDOW_SIZE


def test_screenshot_does_nothing_unless_asked(
    browser: webdriver.Chrome, screenshot: Screenshot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SCREENSHOTS_ENV, raising=False)
    assert screenshot("harness-page") is None
    with pytest.raises(ValueError, match="lower case"):
        screenshot("../elsewhere")


def test_a_browser_that_cannot_be_reset_is_replaced(browsers: Browsers, site: Site) -> None:
    gone = browsers.get()
    gone.quit()

    replacement = browsers.get()

    assert replacement is not gone
    replacement.get(site.url)
    assert replacement.title == "Harness page"
