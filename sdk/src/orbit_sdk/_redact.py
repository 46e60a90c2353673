"""Secrets never reach a log: a :class:`logging.Filter` that masks API keys and bearer tokens
in every record it sees, whatever logged it (the SDK itself, websockets' handshake at DEBUG,
httpx, the application's own code).

The worker installs it on the loggers of the libraries it uses (:meth:`RedactSecrets.install`)
and ``orbit-worker`` also puts it on its log handler; an application that configures logging
itself can add it to its handlers, which covers every logger::

    handler.addFilter(orbit_sdk.RedactSecrets(secrets=[api_key]))
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Final

__all__ = [
    "LIBRARY_LOGGERS",
    "RECORD_ATTRIBUTES",
    "REDACTED",
    "RedactSecrets",
    "protocol_logger",
    "redact",
]

REDACTED: Final = "***"
MIN_SECRET_CHARS: Final = 8
_TOKEN = re.compile(r"ok_[0-9a-z]{8,}_[A-Za-z0-9_\-]{10,}")
_BEARER = re.compile(r"(?i)(bearer)\s+[^\s\"',;]+")
# "Authorization: Basic ...", "'authorization': '...'" and the like: whatever the scheme.
_AUTHORIZATION = re.compile(
    r"(?i)(\bauthorization\b[\"']?\s*[:=,]\s*[\"']?\s*)(?=\S)(?!bearer\b)([^\r\n\"',;]+)"
)

LIBRARY_LOGGERS: Final = (
    "orbit_sdk",
    "websockets",
    "websockets.client",
    "websockets.server",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "httpcore2",
    "httpcore2.connection",
    "httpcore2.http11",
    "httpcore2.http2",
    "httpcore2.proxy",
    "httpcore2.socks",
)
"""The loggers :meth:`RedactSecrets.install` covers by default (and their existing children:
a filter on a logger does not see its children's records)."""

# Attributes every LogRecord has; anything else on a record came from ``extra``.
RECORD_ATTRIBUTES: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with Orbit API keys, bearer credentials, ``Authorization`` values and each of
    ``secrets`` (of at least 8 characters) masked."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    text = _TOKEN.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)
    return _AUTHORIZATION.sub(lambda m: f"{m[1]}{REDACTED}", text)


class RedactSecrets(logging.Filter):
    """Masks secrets in a record's message (formatted with its arguments), exception and stack
    text, and the string values it got from ``extra``. Never drops a record.

    Orbit API keys (``ok_...``), bearer tokens and ``Authorization`` header values are masked
    whatever they are; ``secrets`` adds exact strings to mask (the API key in use, whatever its
    shape; at least 8 characters)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        # Longest first, so that a secret containing another is masked whole. A string too
        # short to be a key (a test's "k") would mask every word that contains it.
        self.secrets: tuple[str, ...] = tuple(
            sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        )

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a record whose arguments do not fit its format
            message = str(record.msg)
        masked = self._redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        for name, value in record.__dict__.items():
            if isinstance(value, str) and name not in RECORD_ATTRIBUTES:
                record.__dict__[name] = self._redact(value)
        return True

    def _redact(self, text: str) -> str:
        return redact(text, self.secrets)

    @classmethod
    def install(
        cls, secrets: Iterable[str] = (), loggers: Iterable[str] = LIBRARY_LOGGERS
    ) -> RedactSecrets:
        """Put one filter on each of ``loggers`` and on their children that exist now,
        replacing a :class:`RedactSecrets` put there before; returns the filter.

        The worker calls it with its API key when it starts. A filter on a logger only sees
        records made through that very logger, so an application's own loggers are covered by
        adding the filter to its handlers instead."""
        redactor = cls(secrets)
        names = tuple(loggers)
        existing = [
            name
            for name in list(logging.Logger.manager.loggerDict)
            if any(name.startswith(prefix + ".") for prefix in names)
        ]
        for name in dict.fromkeys((*names, *existing)):
            logger = logging.getLogger(name)
            for old in [f for f in logger.filters if isinstance(f, RedactSecrets)]:
                logger.removeFilter(old)
            logger.addFilter(redactor)
        return redactor

    def uninstall(self) -> None:
        """Take this filter off every logger it is on (the worker does when it stops)."""
        for name in list(logging.Logger.manager.loggerDict):
            logger = logging.getLogger(name)
            if self in logger.filters:
                logger.removeFilter(self)


def protocol_logger() -> logging.Logger:
    """The logger websockets writes its connection and handshake lines to (with the request's
    headers at DEBUG): its records pass through :class:`RedactSecrets` where they are made."""
    logger = logging.getLogger("orbit_sdk.websockets")
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
    return logger
