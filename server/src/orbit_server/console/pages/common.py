"""What the pages share: the viewer's scope, role checks, list paging."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from litestar import Request

from orbit_server.console.app import viewer_of
from orbit_server.errors import Forbidden, InvalidRequest
from orbit_server.governance.keys import Role
from orbit_server.scope import Scope

PAGE = 50
MAX_JSON_CHARS = 64 * 1024


def scope_of(request: Request[Any, Any, Any]) -> Scope:
    return viewer_of(request).principal.scope


def require_operator(request: Request[Any, Any, Any]) -> None:
    """An action: only an operator key (the HTTP API's rule for the same call)."""
    viewer_of(request).principal.require(Role.OPERATOR)


def require(request: Request[Any, Any, Any], roles: frozenset[Role]) -> None:
    """An action the HTTP API allows to ``roles``."""
    viewer_of(request).principal.require(*sorted(roles))


def require_operations(request: Request[Any, Any, Any]) -> None:
    """The operators' views: workers, bulk operations, the audit log."""
    if not viewer_of(request).sees_operations:
        raise Forbidden("this page needs an API key with the operator or admin role")


def next_url(request: Request[Any, Any, Any], cursor: str | None) -> str | None:
    """The URL of the next page: the same query with ``cursor``."""
    if not cursor:
        return None
    query = {k: v for k, v in request.query_params.items() if k not in ("cursor", "note") and v}
    return f"{request.url.path}?{urlencode({**query, 'cursor': cursor})}"


def text(value: str | None) -> str | None:
    """A form or query field: None when blank."""
    if value is None:
        return None
    value = value.strip()
    return value or None


def bounded(value: str | None, most: int, what: str) -> str | None:
    """A text field of at most ``most`` characters (None when blank)."""
    found = text(value)
    if found is not None and len(found) > most:
        raise InvalidRequest(f"{what} has at most {most} characters")
    return found


def moment(raw: str | None, what: str = "a time") -> datetime | None:
    """An RFC 3339 time field with its zone (None when blank)."""
    value = text(raw)
    if value is None:
        return None
    try:
        found = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"{what} must be a time like 2026-12-03T14:00:00Z") from None
    if found.tzinfo is None:
        raise InvalidRequest(f"{what} needs a time zone (Z or +01:00)")
    return found


def json_field(raw: str | None, what: str = "that field") -> Any:
    """A JSON field of at most ``MAX_JSON_CHARS`` characters (None when blank)."""
    value = text(raw)
    if value is None:
        return None
    if len(value) > MAX_JSON_CHARS:
        raise InvalidRequest(f"{what} holds at most {MAX_JSON_CHARS} characters")
    try:
        return json.loads(value)
    except ValueError:
        raise InvalidRequest(f"{what} must be JSON") from None


def label_of(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    name, sep, label = value.partition(":")
    if not sep or not name:
        raise InvalidRequest("a label filter reads key:value")
    return name, label
