"""``orbit status`` names the fault it meets: a refused key, or a database the server cannot
reach (then it cannot check the key, and must not say the key was rejected)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from orbit_server.cli.status import show_status

DATABASE_DOWN = {"ready": False, "checks": {"database": "unreachable", "schema": "unknown"}}
UNAVAILABLE = {"error": {"code": "unavailable", "message": "the database is unavailable"}}
UNAUTHENTICATED = {"error": {"code": "unauthenticated", "message": "invalid API key"}}
ME = {"key_id": "key_1", "tenant": "acme", "environment": "prod", "roles": ["admin"]}


def serve(answers: dict[str, tuple[int, Any]]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answers[self.path]
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def answers() -> dict[str, tuple[int, Any]]:
    return {}


@pytest.fixture
def url(answers: dict[str, tuple[int, Any]]) -> Iterator[str]:
    yield from serve(answers)


def test_a_database_outage_is_not_a_rejected_key(
    url: str, answers: dict[str, tuple[int, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    answers.update({"/readyz": (503, DATABASE_DOWN), "/v1/whoami": (503, UNAVAILABLE)})
    assert show_status(url, "ok_key") == 1
    out, err = capsys.readouterr()
    assert "not ready (database=unreachable" in out
    assert "database unavailable (unavailable)" in err
    assert "rejected" not in err


def test_a_refused_key_is_rejected(
    url: str, answers: dict[str, tuple[int, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    answers.update({"/readyz": (200, {"ready": True}), "/v1/whoami": (401, UNAUTHENTICATED)})
    assert show_status(url, "ok_nope") == 1
    assert "key rejected: unauthenticated" in capsys.readouterr().err


def test_a_good_key_on_a_ready_server(
    url: str, answers: dict[str, tuple[int, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    answers.update({"/readyz": (200, {"ready": True, "checks": {}}), "/v1/whoami": (200, ME)})
    assert show_status(url, "ok_key") == 0
    assert "key key_1: acme/prod, roles admin" in capsys.readouterr().out


def test_the_database_node_in_use_is_named(
    url: str, answers: dict[str, tuple[int, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    checks = {
        "database": "ok",
        "schema": "current",
        "database_node": "db2.internal:3306",
        "database_role": "galera synced",
    }
    answers["/readyz"] = (200, {"ready": True, "checks": checks})
    assert show_status(url, None) == 0
    assert "database node: db2.internal:3306 (galera synced)" in capsys.readouterr().out
