"""structlog configuration: console or JSON lines, context ids, secrets redacted.

Request, task, attempt, workflow and step ids travel in ``structlog.contextvars``; every line
logged while handling a request carries them. A redaction processor masks API keys, bearer
tokens and passwords wherever they appear, so a careless ``log.info(..., headers=...)`` still
leaks nothing.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import msgspec
import structlog

_SECRET_KEYS = re.compile(r"(authorization|api_?key|password|passwd|secret|token|cookie)", re.I)
_TOKEN = re.compile(r"ok_[0-9a-z]{8,}_[A-Za-z0-9_\-]{10,}")
_BEARER = re.compile(r"(?i)bearer\s+[^\s\"']+")
_URL_PASSWORD = re.compile(r"(mysql|mariadb)://([^:/@\s]+):([^@\s]+)@")
REDACTED = "***"


def redact_text(text: str) -> str:
    text = _TOKEN.sub(REDACTED, text)
    text = _BEARER.sub("Bearer " + REDACTED, text)
    return _URL_PASSWORD.sub(lambda m: f"{m[1]}://{m[2]}:{REDACTED}@", text)


def _redact_value(key: str, value: Any) -> Any:
    if isinstance(value, str):
        return REDACTED if _SECRET_KEYS.search(key) else redact_text(value)
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(key, v) for v in value]
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        event_dict[key] = _redact_value(key, event_dict[key])
    return event_dict


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Route structlog and the standard library's logging through one pipeline."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_secrets,
    ]
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(
            serializer=lambda o, **_: msgspec.json.encode(o, enc_hook=str).decode()
        )
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).setLevel(logging.WARNING)
