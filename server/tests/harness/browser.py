"""Debian's Chromium, headless, driven through ChromeDriver with Selenium, for browser tests.

The binaries are the distribution's (``chromium`` and ``chromium-driver``); when they are
missing and the process runs as root, they are installed with apt-get, as the MariaDB harness
installs ``mariadb-server``. Nothing is downloaded from anywhere else (Selenium Manager is
never asked for a driver)::

    with ChromeDriverService() as service:
        with chrome(service) as driver:  # a fresh browser with a profile of its own
            driver.get(url)
            save_screenshot(driver, Path("page.png"))

One ChromeDriver process serves many browsers, one after the other or side by side; a test
process keeps its browsers in ``Browsers`` and resets them between tests. Each browser has a
temporary profile, a fixed viewport (``WINDOW_SIZE``), the UTC time zone and no network but
the loopback one: every request to another host goes to a proxy that refuses it, and host
names other than ``localhost`` resolve to nothing, so a page that reaches out fails to load
those resources instead of depending on the internet.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.timeouts import Timeouts

from .mariadb import APT_LOCK, parent_death_signal

__all__ = [
    "WINDOW_SIZE",
    "BrowserBinaries",
    "Browsers",
    "ChromeDriverService",
    "chrome",
    "chrome_options",
    "ensure_browser_binaries",
    "save_screenshot",
]

#: Width and height of every browser's viewport (the page's area, what a screenshot shows), so
#: pages and screenshots look the same everywhere. The window is larger by the height of the
#: browser's own bar, which headless Chromium draws too.
WINDOW_SIZE = (1280, 900)

_PAGE_LOAD_TIMEOUT_S = 30
_APT_TIMEOUT = 1800.0
# Waits for a dpkg lock held by an apt-get outside the test run instead of failing at once.
_DPKG_LOCK_TIMEOUT_S = 600
_LOG_TAIL_LINES = 40
_SEARCH_DIRS = ("/usr/bin", "/usr/lib/chromium", "/usr/local/bin", "/bin")
# fonts-liberation is only recommended by chromium; without a font, text renders as boxes.
_APT_PACKAGES = ("chromium", "chromium-driver", "fonts-liberation")


class BrowserBinaries(NamedTuple):
    chromium: Path
    chromedriver: Path


# --------------------------------------------------------------------------------------------
# Binaries
# --------------------------------------------------------------------------------------------


def _find_binary(name: str) -> Path | None:
    search = os.pathsep.join([os.environ.get("PATH", ""), *_SEARCH_DIRS])
    found = shutil.which(name, path=search)
    return Path(found) if found else None


def _locate_binaries() -> BrowserBinaries | None:
    # Debian's /usr/bin/chromium is a wrapper script that runs /usr/lib/chromium/chromium.
    chromium = _find_binary("chromium")
    chromedriver = _find_binary("chromedriver")
    if chromium is None or chromedriver is None:
        return None
    return BrowserBinaries(chromium, chromedriver)


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _apt_get(apt_get: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(apt_get), "-o", f"DPkg::Lock::Timeout={_DPKG_LOCK_TIMEOUT_S}", *args],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=_APT_TIMEOUT,
        check=False,
    )


def _install_packages() -> None:
    apt_get = _find_binary("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        raise RuntimeError(
            "Chromium and ChromeDriver (chromium, chromedriver) were not found, and they can "
            "only be installed automatically when running as root on a system with apt-get; "
            f"install them with: apt-get install {' '.join(_APT_PACKAGES)}"
        )
    install = ("install", "-y", "--no-install-recommends", *_APT_PACKAGES)
    # Several test processes may get here at once, or install MariaDB: one apt-get at a time.
    with APT_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _locate_binaries() is not None:
            return
        # The package lists are refreshed only when the install fails on them (missing or
        # out of date): an update takes longer than the install on a fresh machine.
        result = _apt_get(apt_get, *install)
        if result.returncode != 0:
            updated = _apt_get(apt_get, "update")
            if updated.returncode != 0:
                raise RuntimeError(
                    f"installing Chromium failed: `apt-get update` exited with "
                    f"{updated.returncode}:\n{_tail(updated.stdout)}"
                )
            result = _apt_get(apt_get, *install)
        if result.returncode != 0:
            raise RuntimeError(
                f"installing Chromium failed: `apt-get {' '.join(install)}` exited with "
                f"{result.returncode}:\n{_tail(result.stdout)}"
            )


def ensure_browser_binaries() -> BrowserBinaries:
    """Return the paths of ``chromium`` and ``chromedriver``, installing them if needed.

    The packages are installed with apt-get only when running as root; otherwise a missing
    binary raises RuntimeError that says what to install.
    """
    found = _locate_binaries()
    if found is None:
        _install_packages()
        found = _locate_binaries()
    if found is None:
        raise RuntimeError(
            f"apt-get installed {' '.join(_APT_PACKAGES)}, but chromium or chromedriver is "
            "still not found"
        )
    return found


# --------------------------------------------------------------------------------------------
# ChromeDriver and browsers
# --------------------------------------------------------------------------------------------


class ChromeDriverService(Service):
    """One ChromeDriver process that many browsers share.

    A ``webdriver.Chrome`` starts its service when it is made and stops it when it quits; here
    starting a running service does nothing and a browser's quit leaves it running, so a new
    browser does not wait for a new ChromeDriver. ``shutdown()`` (or leaving the ``with``
    block) stops the process.
    """

    def __init__(self, binaries: BrowserBinaries | None = None) -> None:
        self.binaries = binaries if binaries is not None else ensure_browser_binaries()
        super().__init__(
            executable_path=str(self.binaries.chromedriver),
            log_output=subprocess.DEVNULL,
            # Inherited by the browsers: dates in pages and screenshots do not depend on the
            # machine's time zone.
            env={**os.environ, "TZ": "UTC"},
            # ChromeDriver ends when the test process dies, and its browsers with it.
            popen_kw={"preexec_fn": parent_death_signal()},
        )
        #: Seconds the ChromeDriver process took to accept connections.
        self.start_seconds: float | None = None

    @property
    def running(self) -> bool:
        process: subprocess.Popen[bytes] | None = getattr(self, "process", None)
        return process is not None and process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        started = time.monotonic()
        super().start()
        self.start_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Left running for the next browser: see ``shutdown()``."""

    def shutdown(self) -> None:
        """Stop the ChromeDriver process (the browsers it still drives end with it)."""
        if getattr(self, "process", None) is not None:
            super().stop()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.shutdown()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()


def _closed_loopback_port() -> socket.socket:
    """A socket bound to a port on 127.0.0.1 that never listens: connecting to the port is
    refused at once, and nothing else can listen on it while the socket is open."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def chrome_options(
    binaries: BrowserBinaries, user_data_dir: Path, *, proxy_port: int, javascript: bool = True
) -> webdriver.ChromeOptions:
    """The options of every test browser: headless, a profile in ``user_data_dir``, the fixed
    window size, and every host but the loopback one unreachable (through a proxy at
    ``proxy_port`` on 127.0.0.1 that refuses connections)."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(binaries.chromium)
    options.page_load_strategy = "normal"
    options.timeouts = {"implicit": 0, "pageLoad": _PAGE_LOAD_TIMEOUT_S * 1000, "script": 30_000}
    width, height = WINDOW_SIZE
    arguments = [
        "--headless=new",
        # DevTools over a pipe rather than a port: the browser ends when ChromeDriver does.
        "--remote-debugging-pipe",
        f"--user-data-dir={user_data_dir}",
        f"--window-size={width},{height}",  # then grown by the bar: see _fit_viewport()
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
        "--lang=en-US",
        # The network: requests to any host but the loopback one go to a proxy that refuses
        # them (IP addresses included), and no other host name resolves (DNS never leaves).
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--proxy-bypass-list=<-loopback>;127.0.0.1;localhost;[::1]",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
        # Nothing the browser would do by itself: no first-run, updates, sync or pings.
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-extensions",
        "--disable-sync",
        "--disable-client-side-phishing-detection",
        "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
        "--metrics-recording-only",
        "--no-pings",
        "--password-store=basic",
        "--use-mock-keychain",
        "--mute-audio",
        # No GPU, and shared memory in /tmp: the /dev/shm of a container can be small.
        "--disable-gpu",
        "--disable-dev-shm-usage",
    ]
    if os.geteuid() == 0:
        # Chromium's sandbox refuses to run as root.
        arguments.append("--no-sandbox")
    for argument in arguments:
        options.add_argument(argument)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return options


@contextlib.contextmanager
def chrome(
    service: ChromeDriverService, *, javascript: bool = True, profiles_dir: Path | None = None
) -> Iterator[webdriver.Chrome]:
    """A new headless Chromium on ``service``, with a temporary profile (in ``profiles_dir``,
    default: the system's temporary folder) deleted afterwards.

    ``javascript=False`` starts it with JavaScript disabled, to see what a page shows
    without scripts.
    """
    service.start()
    user_data_dir = Path(tempfile.mkdtemp(prefix="orbit-chromium-", dir=profiles_dir))
    proxy = _closed_loopback_port()
    try:
        options = chrome_options(
            service.binaries,
            user_data_dir,
            proxy_port=proxy.getsockname()[1],
            javascript=javascript,
        )
        driver = webdriver.Chrome(options=options, service=service)
        try:
            # A new browser may still be opening its new-tab page.
            driver.get("about:blank")
            _fit_viewport(driver)
            yield driver
        finally:
            driver.quit()
    finally:
        proxy.close()
        shutil.rmtree(user_data_dir, ignore_errors=True)


class Browsers:
    """The browsers of one test process: one with JavaScript and one without, each started
    when first asked for and reset, not restarted, when asked for again.

    Starting a browser and quitting it takes over a second on two cores (several under load),
    resetting one about 0.2 s. The reset closes every window but one, shows ``about:blank``,
    deletes every cookie, the cache and the storage of every origin, and restores the viewport
    and the timeouts. A browser that cannot be reset (it crashed) is replaced by a new one.
    """

    def __init__(self, service: ChromeDriverService, profiles_dir: Path | None = None) -> None:
        """``profiles_dir``: where the browsers' profiles are made (see ``chrome()``)."""
        self._service = service
        self._profiles_dir = profiles_dir
        self._started: dict[bool, tuple[webdriver.Chrome, contextlib.ExitStack]] = {}
        self._handed_out: set[bool] = set()

    def get(self, *, javascript: bool = True) -> webdriver.Chrome:
        """A clean browser: as new, except for what the reset does not touch (the process,
        its profile folder, settings changed through the DevTools protocol)."""
        started = self._started.get(javascript)
        if started is not None and javascript in self._handed_out:
            try:
                _reset(started[0])
            except WebDriverException:
                del self._started[javascript]
                started[1].close()
                started = None
        if started is None:
            stack = contextlib.ExitStack()
            driver = stack.enter_context(
                chrome(self._service, javascript=javascript, profiles_dir=self._profiles_dir)
            )
            started = (driver, stack)
            self._started[javascript] = started
        self._handed_out.add(javascript)
        return started[0]

    def close(self) -> None:
        """Quit every browser."""
        for _, stack in self._started.values():
            stack.close()
        self._started.clear()
        self._handed_out.clear()


def _reset(driver: webdriver.Chrome) -> None:
    with contextlib.suppress(NoAlertPresentException):
        driver.switch_to.alert.dismiss()
    handles = driver.window_handles
    for handle in handles[1:]:
        driver.switch_to.window(handle)
        driver.close()
    driver.switch_to.window(handles[0])
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": "*", "storageTypes": "all"})
    _fit_viewport(driver)
    driver.timeouts = Timeouts(implicit_wait=0, page_load=_PAGE_LOAD_TIMEOUT_S, script=30)


def _fit_viewport(driver: webdriver.Chrome) -> None:
    """Size the window so that its viewport is ``WINDOW_SIZE``."""
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssLayoutViewport"]
    width, height = WINDOW_SIZE
    missing_width = width - metrics["clientWidth"]
    missing_height = height - metrics["clientHeight"]
    if missing_width or missing_height:
        window = driver.get_window_size()
        driver.set_window_size(window["width"] + missing_width, window["height"] + missing_height)


def save_screenshot(driver: webdriver.Chrome, path: Path) -> Path:
    """Save a PNG of the window's current contents (the viewport, ``WINDOW_SIZE``) at
    ``path``, making its folder if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(driver.get_screenshot_as_png())
    return path
