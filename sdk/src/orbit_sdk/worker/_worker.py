"""``Worker``: registers handlers, connects to Orbit and runs the tasks it is leased.

The worker keeps one WebSocket to one node at a time and reconnects (round the configured URLs,
with exponential backoff and full jitter) whenever it is lost; handlers keep running while it
is. ``run()`` blocks and stops gracefully on SIGTERM or SIGINT (a second signal stops at once).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, TypeVar, Unpack
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, WebSocketException

import orbit_sdk
from orbit_sdk._config import API_KEY_ENV, URL_ENV, ConfigurationError, split_urls
from orbit_sdk._redact import LIBRARY_LOGGERS, RedactSecrets, protocol_logger
from orbit_sdk._typed import TaskDefaults, TaskRef
from orbit_sdk.worker._errors import WorkerError
from orbit_sdk.worker._registry import HandlerFunc, HandlerRegistry, SideEffect
from orbit_sdk.worker._runtime import Runtime
from orbit_sdk.worker._session import Session, SessionEnd
from orbit_sdk.worker._typed import Implementer, TaskDecorator

__all__ = ["Worker", "worker_urls"]

WORKER_PATH: Final = "/v1/worker"
DEFAULT_CONCURRENCY: Final = 16
PREFETCH_UP_TO: Final = 32
"""By default a worker of at most this many slots prefetches as many tasks as it has slots; a
larger one none (measured: +12 % drain at 8 slots, -16 % at 256, where the server is busy)."""
DEFAULT_SHUTDOWN_GRACE_S: Final = 30.0
BACKOFF_BASE_S: Final = 0.2
BACKOFF_CAP_S: Final = 10.0
PING_INTERVAL_S: Final = 20.0
PING_TIMEOUT_S: Final = 20.0
OPEN_TIMEOUT_S: Final = 10.0
CLOSE_TIMEOUT_S: Final = 5.0
FATAL_CLOSE_CODES: Final = {
    4400: "the server refused a frame as a protocol error (a bug in the worker)",
    4401: "the API key was revoked",
    4403: "a handler names a queue the API key may not use",
    4409: "the server speaks no protocol version in common with this SDK",
}
FATAL_STATUSES: Final = {
    401: "the API key is missing, unknown or revoked",
    403: "the API key lacks the worker role",
}

F = TypeVar("F", bound=HandlerFunc)
P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class _Settings:
    urls: tuple[str, ...]
    api_key: str
    concurrency: int
    worker_id: str
    prefetch: int


class Worker:
    """Runs handlers for Orbit tasks.

    ``urls`` is one URL or several (a comma-separated string is split); ``http(s)://host``
    becomes ``ws(s)://host/v1/worker``. ``urls`` and ``api_key`` default to ``ORBIT_URL`` and
    ``ORBIT_API_KEY``, read when the worker starts, not when it is built. ``concurrency`` bounds
    the tasks running at once (and the threads running sync handlers). ``prefetch`` is how many
    more tasks the worker may hold, leased but not started, so that a slot that frees starts
    its next task at once instead of asking the server for one (default: as many as
    ``concurrency`` when that is 32 or less, else 0; 0 holds none beyond the running ones). It
    holds them only while its handlers have taken less than 100 ms on average: a longer task
    would rather run at once on another worker's free slot than wait here. ``worker_id`` names
    this process to Orbit (default ``host:pid``). ``lease_margin`` is how many seconds before
    its lease ends an attempt whose renewal is not confirmed counts as lost (default: the
    smaller of 2 s and half the heartbeat interval). ``shutdown_grace`` is the default of
    :meth:`stop`'s ``grace_s``.
    """

    def __init__(
        self,
        urls: str | Sequence[str] | None = None,
        api_key: str | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        prefetch: int | None = None,
        worker_id: str | None = None,
        lease_margin: float | None = None,
        shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE_S,
        logger: logging.Logger | None = None,
    ) -> None:
        self._registry = HandlerRegistry()
        self._urls: str | Sequence[str] | None = None
        self._api_key: str | None = None
        self._concurrency = DEFAULT_CONCURRENCY
        self._prefetch: int | None = None
        self._worker_id: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.configure(
            urls=urls,
            api_key=api_key,
            concurrency=concurrency,
            prefetch=prefetch,
            worker_id=worker_id,
        )
        if lease_margin is not None and lease_margin < 0:
            raise ConfigurationError(f"lease_margin must be >= 0: {lease_margin}")
        if shutdown_grace < 0:
            raise ConfigurationError(f"shutdown_grace must be >= 0: {shutdown_grace}")
        self._lease_margin = lease_margin
        self._shutdown_grace = shutdown_grace
        self._logger = logger or logging.getLogger("orbit_sdk.worker")
        self._session: Session | None = None
        self._stop_grace: float | None = None
        self._stop_requested = False
        self._stop_event: asyncio.Event | None = None
        self._abort_event: asyncio.Event | None = None
        self._closing: asyncio.Event | None = None
        self._done: asyncio.Event | None = None
        self._signals = 0

    def __repr__(self) -> str:
        return f"Worker(handlers={len(self._registry)}, concurrency={self._concurrency})"

    @property
    def concurrency(self) -> int:
        return self._concurrency

    @property
    def prefetch(self) -> int:
        """Tasks held beyond ``concurrency``, ready to start when a slot frees."""
        if self._prefetch is None:
            return self._concurrency if self._concurrency <= PREFETCH_UP_TO else 0
        return self._prefetch

    def handler(
        self,
        *,
        queue: str,
        type: str,
        version: str | None = None,
        side_effect: SideEffect = "idempotent",
    ) -> Callable[[F], F]:
        """Register the decorated function (sync or async, taking a :class:`TaskContext`) for
        tasks of ``queue`` and ``type``.

        ``version`` ``None`` runs tasks of any handler version; several versions of one queue
        and type may be registered, and a task's ``handler_version`` picks among them (a task
        without one gets the unversioned handler, else the highest version). ``side_effect``
        says whether running the handler twice is harmless (``"idempotent"``) or not
        (``"unsafe"``); a warning is logged when unsafe handlers get tasks submitted as
        idempotent, since Orbit retries those after a lost attempt.
        """

        def register(func: F) -> F:
            self._registry.add(
                func, queue=queue, type=type, version=version, side_effect=side_effect
            )
            return func

        return register

    def task(
        self,
        *,
        queue: str,
        type: str,
        version: str | None = None,
        **defaults: Unpack[TaskDefaults],
    ) -> TaskDecorator:
        """Register a typed handler, ``(params: Model[, ctx: TaskContext]) -> Result`` (sync or
        async), and return its :class:`~orbit_sdk.TaskRef`, typed by its annotations.

        ``defaults`` (``priority``, ``delay_ms``, ``side_effect``, ``retry``, ``timeout_ms``,
        ``labels``) go with every submit through the reference; ``side_effect`` and
        ``version`` also register the handler as :meth:`handler` does. Params that do not fit
        the model fail the attempt without retry (code ``invalid_params``). Submitters that
        must not import the handler declare the reference with :func:`orbit_sdk.task_ref`
        instead and the worker uses :meth:`implement`.
        """
        return TaskDecorator(
            self._registry, queue=queue, type=type, version=version, defaults=defaults
        )

    def implement(self, ref: TaskRef[P, R]) -> Implementer[P, R]:
        """Register the decorated typed handler for a reference declared with
        :func:`orbit_sdk.task_ref`; the handler is returned unchanged."""
        return Implementer(self._registry, ref)

    def configure(
        self,
        *,
        urls: str | Sequence[str] | None = None,
        api_key: str | None = None,
        concurrency: int | None = None,
        prefetch: int | None = None,
        worker_id: str | None = None,
    ) -> None:
        """Change settings before the worker runs; ``None`` keeps the current value."""
        if self._loop is not None:
            raise RuntimeError("the worker is running; configure it before run()")
        if concurrency is not None:
            if isinstance(concurrency, bool) or not isinstance(concurrency, int):
                raise ConfigurationError(f"concurrency must be an integer: {concurrency!r}")
            if concurrency < 1:
                raise ConfigurationError(f"concurrency must be at least 1: {concurrency}")
            self._concurrency = concurrency
        if prefetch is not None:
            if isinstance(prefetch, bool) or not isinstance(prefetch, int):
                raise ConfigurationError(f"prefetch must be an integer: {prefetch!r}")
            if prefetch < 0:
                raise ConfigurationError(f"prefetch must be at least 0: {prefetch}")
            self._prefetch = prefetch
        if worker_id is not None:
            if not 1 <= len(worker_id) <= 200:
                raise ConfigurationError("worker_id must have 1 to 200 characters")
            self._worker_id = worker_id
        if urls is not None:
            worker_urls(urls)  # fail early on a malformed URL
            self._urls = urls
        if api_key is not None:
            self._api_key = api_key

    # -- running ----------------------------------------------------------------------------

    def run(self) -> None:
        """Run until stopped; SIGTERM or SIGINT stops gracefully, a second one at once.

        Raises :class:`WorkerError` when Orbit refuses the worker for good (bad key, forbidden
        queue, no common protocol version) and ``ConfigurationError`` before connecting when
        the URL, the key or the handlers are missing.
        """
        asyncio.run(self._run_with_signals())

    async def run_async(self) -> None:
        """Run on the current event loop until :meth:`stop_async` (or :meth:`stop`) completes."""
        if self._loop is not None:
            raise RuntimeError("the worker is running already")
        settings = self._settings()
        name = self._logger.name
        redactor = RedactSecrets.install(
            [settings.api_key], (*LIBRARY_LOGGERS, name, f"{name}.task")
        )
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop_event, self._abort_event = asyncio.Event(), asyncio.Event()
        self._closing, self._done = asyncio.Event(), asyncio.Event()
        if self._stop_requested:
            self._stop_event.set()
        executor = ThreadPoolExecutor(
            max_workers=settings.concurrency, thread_name_prefix="orbit-worker"
        )
        runtime = Runtime(
            registry=self._registry,
            concurrency=settings.concurrency,
            executor=executor,
            logger=self._logger,
            lease_margin=self._lease_margin,
            prefetch=settings.prefetch,
        )
        connector = loop.create_task(self._connect_loop(runtime, settings))
        try:
            await self._supervise(runtime, connector)
        finally:
            self._closing.set()
            if not connector.done():
                await asyncio.wait({connector}, timeout=CLOSE_TIMEOUT_S)
                connector.cancel()
            await asyncio.gather(connector, return_exceptions=True)
            await runtime.abort()
            executor.shutdown(wait=False, cancel_futures=True)
            self._done.set()
            redactor.uninstall()
            self._loop = self._session = None
            self._stop_requested, self._stop_grace, self._signals = False, None, 0

    def stop(self, grace_s: float | None = None) -> None:
        """Ask the running worker to stop gracefully, from any thread; returns at once.

        New work stops, delivered tasks that have not started are released, running
        handlers get ``grace_s`` seconds (default ``shutdown_grace``) to finish and report.
        """
        loop = self._loop
        if loop is None:
            self._stop_requested, self._stop_grace = True, grace_s
            return
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            self._request_stop(grace_s)
        else:
            loop.call_soon_threadsafe(self._request_stop, grace_s)

    async def stop_async(self, grace_s: float | None = None) -> None:
        """Stop gracefully (see :meth:`stop`) and return once the worker has stopped."""
        self.stop(grace_s)
        if self._done is not None and self._loop is asyncio.get_running_loop():
            await self._done.wait()

    # -- internals --------------------------------------------------------------------------

    def _settings(self, environ: Mapping[str, str] | None = None) -> _Settings:
        env = os.environ if environ is None else environ
        urls = self._urls if self._urls is not None else env.get(URL_ENV, "").strip() or None
        if urls is None:
            raise ConfigurationError(f"no Orbit URL: pass urls=... or set {URL_ENV}")
        api_key = self._api_key or env.get(API_KEY_ENV, "").strip() or None
        if api_key is None:
            raise ConfigurationError(f"no API key: pass api_key=... or set {API_KEY_ENV}")
        if not len(self._registry):
            raise ConfigurationError("no handlers: register one with @worker.handler(...)")
        worker_id = self._worker_id or f"{socket.gethostname()}:{os.getpid()}"[:200]
        return _Settings(worker_urls(urls), api_key, self._concurrency, worker_id, self.prefetch)

    def _request_stop(self, grace_s: float | None) -> None:
        if grace_s is not None:
            self._stop_grace = grace_s
        self._stop_requested = True
        if self._stop_event is not None:
            self._stop_event.set()

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals == 1:
            self._logger.info(
                "%s: stopping gracefully (send it again to stop at once)",
                signal.Signals(signum).name,
            )
            self._request_stop(None)
        elif self._abort_event is not None:
            self._logger.warning("%s: stopping at once", signal.Signals(signum).name)
            self._abort_event.set()

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        installed = []
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(signum, self._on_signal, signum)
                except (NotImplementedError, RuntimeError):  # not on this platform
                    continue
                installed.append(signum)
        try:
            await self.run_async()
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)

    async def _supervise(self, runtime: Runtime, connector: asyncio.Task[None]) -> None:
        assert self._stop_event is not None and self._abort_event is not None
        stop_wait = asyncio.ensure_future(self._stop_event.wait())
        try:
            await asyncio.wait({connector, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
        if connector.done():
            connector.result()  # a fatal WorkerError, or the loop ended
            return
        grace = self._shutdown_grace if self._stop_grace is None else self._stop_grace
        self._logger.info("stopping: waiting up to %.1f s for running tasks", grace)
        runtime.begin_stop()
        idle = asyncio.ensure_future(runtime.wait_idle())
        abort = asyncio.ensure_future(self._abort_event.wait())
        try:
            await asyncio.wait(
                {idle, abort, connector}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            idle.cancel()
            abort.cancel()
        if connector.done():
            connector.result()
            return
        if runtime.attempts:
            self._logger.warning("stopping with %d attempts unreported", len(runtime.attempts))
        await self._close()

    async def _close(self) -> None:
        assert self._closing is not None
        self._closing.set()
        session = self._session
        if session is not None:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await session.close()
            except (TimeoutError, WebSocketException, OSError):
                self._logger.debug("closing the connection failed", exc_info=True)

    async def _connect_loop(self, runtime: Runtime, settings: _Settings) -> None:
        assert self._closing is not None
        headers = {"Authorization": f"Bearer {settings.api_key}"}
        sdk = f"orbit-sdk/{orbit_sdk.__version__}"
        failures = 0
        for index in itertools.count():
            if self._closing.is_set():
                return
            url = settings.urls[index % len(settings.urls)]
            end: SessionEnd | None = None
            try:
                async with connect(
                    url,
                    additional_headers=headers,
                    user_agent_header=sdk,
                    max_size=None,
                    ping_interval=PING_INTERVAL_S,
                    ping_timeout=PING_TIMEOUT_S,
                    open_timeout=OPEN_TIMEOUT_S,
                    close_timeout=CLOSE_TIMEOUT_S,
                    logger=protocol_logger(),  # its DEBUG lines hold the Authorization header
                ) as ws:
                    session = Session(
                        ws, runtime, worker_id=settings.worker_id, sdk=sdk, logger=self._logger
                    )
                    self._session = session
                    try:
                        end = await session.run()
                    finally:
                        self._session = None
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in FATAL_STATUSES:
                    raise WorkerError(
                        f"{url} refused the worker: {FATAL_STATUSES[status]} (HTTP {status})",
                        code="unauthenticated" if status == 401 else "forbidden",
                        status=status,
                    ) from exc
                self._logger.warning("%s refused the connection: HTTP %d", url, status)
            except (OSError, TimeoutError, WebSocketException) as exc:
                self._logger.warning(
                    "connection to %s failed: %s", url, str(exc) or type(exc).__name__
                )
            if end is not None:
                self._check_fatal(url, end)
                self._logger.info(
                    "disconnected from %s (close code %s %s)",
                    url,
                    end.close_code,
                    end.close_reason,
                )
            failures = 0 if end is not None and end.welcomed else failures + 1
            if self._closing.is_set():
                return
            delay = random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**failures))
            try:
                async with asyncio.timeout(delay):
                    await self._closing.wait()
            except TimeoutError:
                pass

    def _check_fatal(self, url: str, end: SessionEnd) -> None:
        if end.close_code not in FATAL_CLOSE_CODES:
            return
        detail = f": {end.last_error.message}" if end.last_error else ""
        raise WorkerError(
            f"{url} closed the connection with {end.close_code}, "
            f"{FATAL_CLOSE_CODES[end.close_code]}{detail}",
            code=end.last_error.code if end.last_error else None,
            close_code=end.close_code,
        )


def worker_urls(urls: str | Sequence[str]) -> tuple[str, ...]:
    """The WebSocket URLs of the worker endpoint for one URL, several, or a comma-separated
    string; ``http(s)`` becomes ``ws(s)`` and ``/v1/worker`` is appended unless present."""
    return tuple(_websocket_url(item) for item in split_urls(urls))


def _websocket_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if "@" in parts.netloc:
        raise ConfigurationError("Orbit URL must not contain credentials; use api_key")
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ConfigurationError(f"Orbit URL must be an absolute http(s) or ws(s) URL: {url!r}")
    if parts.query or parts.fragment:
        raise ConfigurationError(f"Orbit URL must not have a query or fragment: {url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith(WORKER_PATH):
        path += WORKER_PATH
    return urlunsplit((scheme, parts.netloc, path, "", ""))
