"""JSON log lines: one object per line, values JSON cannot hold written as text, secrets
masked."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import structlog

from orbit_server.observability.logging import configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("restore_logging")
def test_a_json_line_holds_every_field_and_no_secret(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    structlog.get_logger("orbit.test").info(
        "took", at=when, amount=Decimal("1.5"), authorization="Bearer ok_abcdefgh_0123456789xyz"
    )
    logging.getLogger("plain").warning("from the standard library")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    first, second = lines
    assert first["event"] == "took" and first["level"] == "info"
    assert first["at"] == "2026-01-02T03:04:05Z"
    assert first["amount"] == "1.5"
    assert "ok_abcdefgh" not in json.dumps(first)
    assert (second["event"], second["logger"]) == ("from the standard library", "plain")
