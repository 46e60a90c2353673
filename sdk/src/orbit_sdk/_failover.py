"""When a client may send a request to the next of its URLs, decided without I/O.

A failed try is one of three kinds:

* ``NOT_SENT`` — no connection was made (refused, unreachable, connect timeout): the request
  never left, so any request may go to the next URL.
* ``UNAVAILABLE`` — Orbit itself answered ``503 unavailable`` (database down, node draining).
* ``UNKNOWN`` — the request may have arrived: the connection broke or timed out after it was
  sent, or a proxy answered 502, 503 or 504 instead of Orbit.

After the last two only a request that is safe to repeat goes on: a read (``GET``, ``HEAD``,
``OPTIONS``) or a write carrying an idempotency key (every item of a batch carrying one).
Any other write fails: with :class:`~orbit_sdk.OutcomeUnknownError` after ``UNKNOWN``, with
Orbit's own error after ``UNAVAILABLE``.
"""

from __future__ import annotations

import enum
from typing import Final

import httpx2
import msgspec

__all__ = ["Fate", "exception_fate", "replay_safe", "response_fate"]

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
PROXY_STATUSES: Final = frozenset({502, 503, 504})


class Fate(enum.Enum):
    NOT_SENT = "not_sent"
    UNAVAILABLE = "unavailable"
    UNKNOWN = "unknown"


class _KeyedItem(msgspec.Struct):
    idempotency_key: str | None = None


class _KeyedBody(msgspec.Struct):
    idempotency_key: str | None = None
    tasks: list[_KeyedItem] | None = None


class _ErrorCode(msgspec.Struct):
    code: str


class _Envelope(msgspec.Struct):
    error: _ErrorCode


def replay_safe(method: str, content: bytes | None) -> bool:
    """Whether sending the request twice does what sending it once does."""
    if method in SAFE_METHODS:
        return True
    if not content:
        return False
    try:
        body = msgspec.json.decode(content, type=_KeyedBody)
    except msgspec.DecodeError:  # not an object: no key in it
        return False
    if body.idempotency_key:
        return True
    return bool(body.tasks) and all(item.idempotency_key for item in body.tasks or ())


def exception_fate(exc: httpx2.RequestError) -> Fate | None:
    """The kind of failure an exception of httpx2 is; ``None`` when another node would fare
    no better (a local pool timeout, a malformed URL, a proxy refusing us)."""
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        return Fate.NOT_SENT
    if isinstance(
        exc,
        httpx2.ReadError
        | httpx2.WriteError
        | httpx2.ReadTimeout
        | httpx2.WriteTimeout
        | httpx2.RemoteProtocolError
        | httpx2.CloseError,
    ):
        return Fate.UNKNOWN
    return None


def response_fate(status: int, body: bytes) -> Fate | None:
    """``None`` for an answer to keep (any answer of Orbit's but ``unavailable``)."""
    if status not in PROXY_STATUSES:
        return None
    try:
        code: str | None = msgspec.json.decode(body, type=_Envelope).error.code
    except msgspec.DecodeError:
        code = None  # not Orbit's envelope: a proxy in front of it answered
    if code is None:
        return Fate.UNKNOWN
    return Fate.UNAVAILABLE if code == "unavailable" else None
