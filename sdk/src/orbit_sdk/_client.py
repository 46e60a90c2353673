"""``Client`` and ``AsyncClient``: Orbit's HTTP API over httpx2.

The typed task and queue methods come from ``_tasks``, the schedule methods from
``_schedules``, the workflow methods from ``_workflows``; this module sends what they
describe.

Given several URLs (nodes of one Orbit service), a client sends each request to the URL that
last worked and moves on to the next when that node cannot be reached, is unavailable or
answers through a failing proxy, repeating only what is safe to repeat (see ``_failover``).
Beyond that neither client retries anything on its own: every failure surfaces once, as an
:class:`~orbit_sdk.OrbitError` carrying ``retryable`` (and ``retry_after`` for transient
errors), so the caller decides whether, when and how often to try again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeAlias, TypeVar

import httpx2
import msgspec

import orbit_sdk
from orbit_sdk._config import DEFAULT_TIMEOUT, ClientConfig
from orbit_sdk._errors import (
    UNEXPECTED_RESPONSE,
    OrbitError,
    OutcomeUnknownError,
    TransportError,
    describe_unexpected,
    error_from_http,
)
from orbit_sdk._failover import Fate, exception_fate, replay_safe, response_fate
from orbit_sdk._health import Readiness, health_from_http, readiness_from_http
from orbit_sdk._models import Operation
from orbit_sdk._schedules import AsyncScheduleCalls, ScheduleCalls
from orbit_sdk._tasks import AsyncTaskCalls, TaskCalls
from orbit_sdk._workflows import AsyncWorkflowCalls, WorkflowCalls

__all__ = ["AsyncClient", "Client", "QueryParams"]

T = TypeVar("T")
_log = logging.getLogger("orbit_sdk.client")

QueryScalar: TypeAlias = str | int | float | bool | None
QueryParams: TypeAlias = Mapping[str, QueryScalar | Sequence[QueryScalar]]
"""Query parameters; ``None`` values are left out, sequences repeat the name."""


@dataclass(frozen=True, slots=True)
class _Call:
    """One prepared request: everything both clients need to send it and report on it."""

    method: str
    path: str
    content: bytes | None
    headers: dict[str, str]
    params: httpx2.QueryParams | None
    timeout: float | None


def _prepare(
    method: str,
    path: str,
    json: Any,
    params: QueryParams | None,
    timeout: float | None,
    headers: Mapping[str, str] | None = None,
) -> _Call:
    # The bearer key must only ever go to the configured server: no absolute URLs here.
    if not path.startswith("/") or path.startswith("//"):
        raise ValueError(f"path must start with a single '/', like '/v1/tasks': {path!r}")
    content = None if json is None else msgspec.json.encode(json)
    call_headers = dict(headers or {})
    if content is not None:
        call_headers["Content-Type"] = "application/json"
    return _Call(method.upper(), path, content, call_headers, _query(params), timeout)


def _prepare_operation(operation: Operation[Any]) -> _Call:
    return _prepare(
        operation.method,
        operation.path,
        operation.json,
        operation.params,
        operation.timeout,
        operation.headers,
    )


def _query(params: QueryParams | None) -> httpx2.QueryParams | None:
    if params is None:
        return None
    items: list[tuple[str, QueryScalar]] = []
    for name, value in params.items():
        values = [value] if value is None or isinstance(value, str | int | float) else value
        items.extend((name, _query_text(item)) for item in values if item is not None)
    return httpx2.QueryParams(items)


def _query_text(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _session_headers(config: ClientConfig, extra: Mapping[str, str] | None) -> httpx2.Headers:
    # The SDK's own headers win over caller-supplied ones with the same name.
    headers = httpx2.Headers(extra)
    headers["User-Agent"] = f"orbit-sdk/{orbit_sdk.__version__}"
    headers["Accept"] = "application/json"
    if config.api_key is not None:
        headers["Authorization"] = f"Bearer {config.api_key}"
    return headers


def _result(response: httpx2.Response) -> Any:
    if not response.is_success:
        raise error_from_http(response.status_code, response.headers, response.content)
    if not response.content:
        return None
    try:
        return msgspec.json.decode(response.content)
    except msgspec.DecodeError as exc:
        raise OrbitError(
            describe_unexpected(response.status_code, response.headers, response.content),
            code=UNEXPECTED_RESPONSE,
            status=response.status_code,
        ) from exc


def _typed_result(response: httpx2.Response, read: Callable[[bytes], T]) -> T:
    if not response.is_success:
        raise error_from_http(response.status_code, response.headers, response.content)
    try:
        return read(response.content)
    except msgspec.DecodeError as exc:  # also a body of the wrong shape (ValidationError)
        description = describe_unexpected(response.status_code, response.headers, response.content)
        raise OrbitError(
            f"{description}: {exc}", code=UNEXPECTED_RESPONSE, status=response.status_code
        ) from exc


def _failure(call: _Call, base: str, exc: httpx2.RequestError) -> OrbitError:
    message = f"{call.method} {base}{call.path} failed: {_detail(exc)}"
    if isinstance(exc, httpx2.TransportError):
        return TransportError(message)
    # Decoding errors and the like: a response arrived but could not be read.
    return OrbitError(message, code=UNEXPECTED_RESPONSE)


def _detail(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _outcome_unknown(call: _Call, base: str, detail: str) -> OutcomeUnknownError:
    return OutcomeUnknownError(
        f"{call.method} {base}{call.path} may or may not have been applied ({detail}); "
        "it was not sent again because it carries no idempotency key"
    )


class _Failover:
    """Which URL a client sends to, and what it does when a try fails (shared by both
    clients; the sending itself is theirs)."""

    def __init__(self, urls: tuple[str, ...]) -> None:
        self.urls = urls
        self.current = 0  # sticky: the URL that last worked

    def order(self) -> list[int]:
        start = self.current
        return [(start + step) % len(self.urls) for step in range(len(self.urls))]

    def on_exception(self, call: _Call, index: int, exc: httpx2.RequestError, last: bool) -> None:
        """Raise the error for a try that failed without an answer, unless the next URL is
        to be tried."""
        base = self.urls[index]
        fate = exception_fate(exc)
        if fate is Fate.UNKNOWN and not replay_safe(call.method, call.content):
            raise _outcome_unknown(call, base, _detail(exc)) from exc
        error = _failure(call, base, exc)
        if last and len(self.urls) > 1:
            error.message += f" (after every other URL failed: {', '.join(self.urls)})"
            error.args = (error.message,)
        if fate is None or last:
            raise error from exc
        _log.warning("%s: trying %s", error.message, self.urls[(index + 1) % len(self.urls)])

    def keep(self, call: _Call, index: int, response: httpx2.Response, last: bool) -> bool:
        """Whether to answer with ``response`` rather than try the next URL."""
        fate = response_fate(response.status_code, response.content)
        if fate is None:
            self.current = index
            return True
        safe = replay_safe(call.method, call.content)
        if fate is Fate.UNKNOWN and not safe:
            raise _outcome_unknown(
                call, self.urls[index], f"a proxy answered HTTP {response.status_code}"
            )
        if last or not safe:
            return True  # raised by the caller as the mapped error (UnavailableError, ...)
        _log.warning(
            "%s %s%s answered HTTP %d: trying %s",
            call.method,
            self.urls[index],
            call.path,
            response.status_code,
            self.urls[(index + 1) % len(self.urls)],
        )
        return False


class Client(TaskCalls, ScheduleCalls, WorkflowCalls):
    """Synchronous client for Orbit's HTTP API.

    ``url`` (or ``urls``, several servers of one cluster; a comma-separated ``url`` too) and
    ``api_key`` default to ``ORBIT_URL`` and ``ORBIT_API_KEY``; explicit arguments win.
    ``timeout`` is in seconds. ``transport`` replaces the network (``httpx2.MockTransport`` in
    tests, ``httpx2.WSGITransport``). ``headers`` are sent with every request; the SDK's
    ``Authorization``, ``User-Agent`` and ``Accept`` take precedence over them.

    Use it as a context manager or call :meth:`close`. With several URLs, a request goes to the
    one that last worked, and on to the next when that server fails if the request is safe to
    repeat (a read, or a write with an idempotency key); a write that is not and whose answer
    was lost raises :class:`~orbit_sdk.OutcomeUnknownError`. Beyond that it never retries:
    failures raise an :class:`~orbit_sdk.OrbitError` whose ``retryable`` tells the caller
    whether to try again.

    Tasks: :meth:`submit`, :meth:`submit_many`, :meth:`get_task`, :meth:`wait_for_task`,
    :meth:`list_tasks`, :meth:`iter_tasks`, :meth:`task_attempts`, :meth:`cancel_task`,
    :meth:`retry_task`, :meth:`resolve_task`. Queues: :meth:`list_queues`, :meth:`update_queue`.
    Schedules: :meth:`create_schedule`, :meth:`get_schedule`, :meth:`list_schedules`,
    :meth:`iter_schedules`, :meth:`update_schedule`, :meth:`delete_schedule`,
    :meth:`pause_schedule`, :meth:`resume_schedule`, :meth:`trigger_schedule`,
    :meth:`backfill_schedule`, :meth:`get_backfill`, :meth:`list_backfills`,
    :meth:`schedule_fires`. Workflows: :meth:`publish_workflow`,
    :meth:`get_workflow_definition`, :meth:`list_workflow_definitions`,
    :meth:`iter_workflow_definitions`, :meth:`start_workflow`, :meth:`get_workflow`,
    :meth:`wait_for_workflow`, :meth:`list_workflows`, :meth:`iter_workflows`,
    :meth:`workflow_steps`, :meth:`iter_workflow_steps`, :meth:`signal_workflow`,
    :meth:`pause_workflow`, :meth:`resume_workflow`, :meth:`cancel_workflow`,
    :meth:`retry_workflow_step`, :meth:`skip_workflow_step`, :meth:`resolve_workflow_step`.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        urls: str | Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx2.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        config = ClientConfig.from_env(url=url, urls=urls, api_key=api_key, timeout=timeout)
        self._setup(config, transport, headers)

    @classmethod
    def from_config(
        cls,
        config: ClientConfig,
        *,
        transport: httpx2.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Self:
        """A client for exactly this configuration; the environment is not consulted."""
        client = cls.__new__(cls)
        client._setup(config, transport, headers)
        return client

    def _setup(
        self,
        config: ClientConfig,
        transport: httpx2.BaseTransport | None,
        headers: Mapping[str, str] | None,
    ) -> None:
        self._config = config
        self._failover = _Failover(config.urls)
        self._http = httpx2.Client(
            headers=_session_headers(config, headers),
            timeout=config.timeout,
            transport=transport,
        )

    @property
    def config(self) -> ClientConfig:
        """The configuration this client was built with."""
        return self._config

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._http.is_closed

    def __repr__(self) -> str:
        return _repr(self, self._config)

    def close(self) -> None:
        """Close the connection pool (and a transport passed in). Idempotent."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def health(self) -> bool:
        """``GET /healthz``: ``True`` if the server is alive, ``False`` if it answers 5xx.

        Raises :class:`~orbit_sdk.TransportError` when no answer arrives at all, and the
        mapped error for a 4xx (usually a wrong base URL).
        """
        response = self._send(_prepare("GET", "/healthz", None, None, None))
        return health_from_http(response.status_code, response.headers, response.content)

    def ready(self) -> Readiness:
        """``GET /readyz``: a 503 gives ``Readiness(ready=False, ...)`` rather than raising."""
        response = self._send(_prepare("GET", "/readyz", None, None, None))
        return readiness_from_http(response.status_code, response.headers, response.content)

    def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: QueryParams | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON body (``None`` for an empty body).

        ``path`` is relative to the base URL and starts with ``/`` (``"/v1/tasks"``). ``json``
        is encoded with msgspec (dicts, lists, msgspec Structs, dataclasses). ``timeout``
        overrides the client's for this call, e.g. for long polls with ``wait_ms``.
        Non-2xx answers raise the mapped :class:`~orbit_sdk.OrbitError`.
        """
        return _result(self._send(_prepare(method, path, json, params, timeout)))

    def _run(self, operation: Operation[T]) -> T:
        return _typed_result(self._send(_prepare_operation(operation)), operation.read)

    def _send(self, call: _Call) -> httpx2.Response:
        failover = self._failover
        order = failover.order()
        for step, index in enumerate(order):
            last = step == len(order) - 1
            try:
                response = self._http.request(
                    call.method,
                    failover.urls[index] + call.path,
                    content=call.content,
                    params=call.params,
                    headers=call.headers,
                    timeout=httpx2.USE_CLIENT_DEFAULT if call.timeout is None else call.timeout,
                )
            except httpx2.RequestError as exc:
                failover.on_exception(call, index, exc, last)
                continue
            if failover.keep(call, index, response, last):
                return response
        raise AssertionError("unreachable: the last URL's try answers or raises")


class AsyncClient(AsyncTaskCalls, AsyncScheduleCalls, AsyncWorkflowCalls):
    """Asynchronous client for Orbit's HTTP API; the same calls as :class:`Client`, awaited.

    ``transport`` takes an ``httpx2.AsyncBaseTransport`` (``httpx2.MockTransport``,
    ``httpx2.ASGITransport``). Use ``async with`` or await :meth:`aclose`. Several URLs fail
    over as for :class:`Client`; beyond that it never retries.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        urls: str | Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx2.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        config = ClientConfig.from_env(url=url, urls=urls, api_key=api_key, timeout=timeout)
        self._setup(config, transport, headers)

    @classmethod
    def from_config(
        cls,
        config: ClientConfig,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Self:
        """A client for exactly this configuration; the environment is not consulted."""
        client = cls.__new__(cls)
        client._setup(config, transport, headers)
        return client

    def _setup(
        self,
        config: ClientConfig,
        transport: httpx2.AsyncBaseTransport | None,
        headers: Mapping[str, str] | None,
    ) -> None:
        self._config = config
        self._failover = _Failover(config.urls)
        self._http = httpx2.AsyncClient(
            headers=_session_headers(config, headers),
            timeout=config.timeout,
            transport=transport,
        )

    @property
    def config(self) -> ClientConfig:
        """The configuration this client was built with."""
        return self._config

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`aclose` has been called."""
        return self._http.is_closed

    def __repr__(self) -> str:
        return _repr(self, self._config)

    async def aclose(self) -> None:
        """Close the connection pool (and a transport passed in). Idempotent."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def health(self) -> bool:
        """``GET /healthz``; see :meth:`Client.health`."""
        response = await self._send(_prepare("GET", "/healthz", None, None, None))
        return health_from_http(response.status_code, response.headers, response.content)

    async def ready(self) -> Readiness:
        """``GET /readyz``; see :meth:`Client.ready`."""
        response = await self._send(_prepare("GET", "/readyz", None, None, None))
        return readiness_from_http(response.status_code, response.headers, response.content)

    async def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: QueryParams | None = None,
        *,
        # The per-request HTTP timeout handed to httpx2, as in httpx2's own async API.
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        """Send one request and return the decoded JSON body; see :meth:`Client.request`."""
        return _result(await self._send(_prepare(method, path, json, params, timeout)))

    async def _run(self, operation: Operation[T]) -> T:
        return _typed_result(await self._send(_prepare_operation(operation)), operation.read)

    async def _send(self, call: _Call) -> httpx2.Response:
        failover = self._failover
        order = failover.order()
        for step, index in enumerate(order):
            last = step == len(order) - 1
            try:
                response = await self._http.request(
                    call.method,
                    failover.urls[index] + call.path,
                    content=call.content,
                    params=call.params,
                    headers=call.headers,
                    timeout=httpx2.USE_CLIENT_DEFAULT if call.timeout is None else call.timeout,
                )
            except httpx2.RequestError as exc:
                failover.on_exception(call, index, exc, last)
                continue
            if failover.keep(call, index, response, last):
                return response
        raise AssertionError("unreachable: the last URL's try answers or raises")


def _repr(client: Client | AsyncClient, config: ClientConfig) -> str:
    if len(config.urls) == 1:
        return f"{type(client).__name__}(url={config.url!r})"
    return f"{type(client).__name__}(urls={list(config.urls)!r})"
