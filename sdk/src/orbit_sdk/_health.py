"""Reading Orbit's ``/healthz`` and ``/readyz`` answers (shared by both clients)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from orbit_sdk._errors import error_from_http

__all__ = ["Readiness", "health_from_http", "readiness_from_http"]

_NOT_READY = 503


class Readiness(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the server can serve requests, and what it reported about each check.

    ``ready`` follows the HTTP status (200 ready, 503 not). ``checks`` is the body's ``checks``
    object (``{"database": "ok", ...}``) with non-string values rendered as JSON; when a 503 body
    is an error envelope or not JSON, it holds a single ``"error"`` entry describing it.
    """

    ready: bool
    checks: dict[str, str] = msgspec.field(default_factory=dict)


def health_from_http(status: int, headers: Mapping[str, str], body: bytes) -> bool:
    """``True`` for 2xx, ``False`` for 5xx (not alive, draining, or a proxy with no backend).

    Any other status (a 404 from a wrong base URL, a proxy's 407) is a misconfiguration and
    raises the mapped :class:`~orbit_sdk.OrbitError` rather than passing for "unhealthy".
    """
    if 200 <= status < 300:
        return True
    if status >= 500:
        return False
    raise error_from_http(status, headers, body)


def readiness_from_http(status: int, headers: Mapping[str, str], body: bytes) -> Readiness:
    """A :class:`Readiness` for 2xx and 503; raises the mapped error for any other status."""
    if 200 <= status < 300:
        return Readiness(ready=True, checks=_checks_from_body(body) or {})
    if status == _NOT_READY:
        checks = _checks_from_body(body)
        if checks is None:
            checks = {"error": _problem_from_body(status, headers, body)}
        return Readiness(ready=False, checks=checks)
    raise error_from_http(status, headers, body)


def _decode(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None


def _checks_from_body(body: bytes) -> dict[str, str] | None:
    document = _decode(body)
    if not isinstance(document, dict) or not isinstance(document.get("checks"), dict):
        return None
    return {
        str(name): value if isinstance(value, str) else msgspec.json.encode(value).decode()
        for name, value in document["checks"].items()
    }


def _problem_from_body(status: int, headers: Mapping[str, str], body: bytes) -> str:
    error = error_from_http(status, headers, body)
    return f"{error.code}: {error.message}"
