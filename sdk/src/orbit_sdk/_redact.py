"""Secrets never reach a log: a :class:`logging.Filter` that masks API keys and bearer tokens
in every record it sees, whatever logged it (the SDK itself, websockets' handshake at DEBUG,
httpx, the application's own code).

The worker hands websockets a logger that carries this filter, and ``orbit-worker`` puts it on
its log handler; an application that configures logging itself can add it to its handlers::

    handler.addFilter(orbit_sdk.RedactSecrets())
"""

from __future__ import annotations

import logging
import re
from typing import Final

REDACTED: Final = "***"
_TOKEN = re.compile(r"ok_[0-9a-z]{8,}_[A-Za-z0-9_\-]{10,}")
_BEARER = re.compile(r"(?i)(bearer)\s+[^\s\"',;]+")


def redact(text: str) -> str:
    """``text`` with Orbit API keys and bearer credentials masked."""
    return _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", _TOKEN.sub(REDACTED, text))


class RedactSecrets(logging.Filter):
    """Masks secrets in a record's message (formatted with its arguments) and exception text.
    Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a record whose arguments do not fit its format
            message = str(record.msg)
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def protocol_logger() -> logging.Logger:
    """The logger websockets writes its connection and handshake lines to (with the request's
    headers at DEBUG): its records pass through :class:`RedactSecrets` where they are made."""
    logger = logging.getLogger("orbit_sdk.websockets")
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
    return logger
