"""Per-request context shared by the outer middleware and the handlers."""

from __future__ import annotations

import re
from contextvars import ContextVar

from orbit_server.ids import new_id

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

request_id_var: ContextVar[str | None] = ContextVar("orbit_request_id", default=None)
# The stable code of the error a request answered with, for the outer layer's metrics.
error_code_var: ContextVar[str | None] = ContextVar("orbit_error_code", default=None)


def accept_request_id(offered: str | None) -> str:
    """Keep a caller's sane ``X-Request-Id``; otherwise mint one."""
    if offered and _REQUEST_ID.match(offered):
        return offered
    return new_id("req_")


def current_request_id() -> str | None:
    return request_id_var.get()
