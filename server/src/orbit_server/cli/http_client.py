"""The operator commands' way to the server: the public HTTP API only, never the database.

``OrbitHttp`` sends one request and answers the decoded JSON, or raises ``ApiError`` with the
API's error body (API.md "Errors") or ``Unreachable`` when no answer came. The transport is
injectable, as httpx's is, so the commands can be driven without a server.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from orbit_server import __version__

if TYPE_CHECKING:
    import httpx

DEFAULT_TIMEOUT_S = 30.0
MAX_PAGE = 500  # the API's largest ?limit=

Params = Mapping[str, str | int | list[str] | None]


class ApiError(Exception):
    """The server answered with an error body: ``{"error": {"code", "message", ...}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({code})")
        self.status = status
        self.code = code
        self.message = message


class Unreachable(Exception):
    """No answer: connection refused, DNS failure, timeout."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


def segment(value: str) -> str:
    """One path segment, escaped (ids and names are opaque to the client)."""
    return quote(value, safe="")


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_cursor: str | None


class OrbitHttp:
    """A synchronous client of the HTTP API for one base URL and key."""

    def __init__(
        self,
        url: str,
        key: str | None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx  # here, not at the top: `orbit dev` and `orbit server` start without it

        self.url = url.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": f"orbit-cli/{__version__}"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )

    def __enter__(self) -> OrbitHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def get(self, path: str, params: Params | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body=body)

    def request(
        self, method: str, path: str, *, params: Params | None = None, body: Any = None
    ) -> Any:
        import httpx

        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._client.request(method, path, params=query, json=body)
        except httpx.TransportError as exc:
            raise Unreachable(self.url, str(exc) or type(exc).__name__) from None
        if response.is_success:
            return response.json() if response.content else None
        raise _error_of(response)

    def page(self, path: str, params: Params | None = None) -> Page:
        answer = self.get(path, params)
        return Page(list(answer.get("items", [])), answer.get("next_cursor"))

    def pages(self, path: str, params: Params | None = None) -> Iterator[Page]:
        """Every page of a list, following ``next_cursor`` until the last one."""
        query = dict(params or {})
        while True:
            found = self.page(path, query)
            yield found
            if not found.next_cursor:
                return
            query["cursor"] = found.next_cursor


def _error_of(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "code" in error:
        return ApiError(response.status_code, str(error["code"]), str(error.get("message", "")))
    reason = response.reason_phrase or "error"
    return ApiError(response.status_code, f"http_{response.status_code}", reason)
