"""HTTP connections against a real server process: timeouts, the connection cap, and the
error envelope for requests the HTTP parser refuses (what an ASGI test client cannot reach)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.processes import OrbitProcess

HEADER_TIMEOUT_MS = 600
IDLE_TIMEOUT_MS = 1000
WAIT_S = 15  # the bound on every read: far above the timeouts under test


def _dev_and_key(tmp_path: Path, **settings: str) -> Iterator[tuple[tuple[str, int], str]]:
    env = {f"ORBIT_{name.upper()}": value for name, value in settings.items()}
    dev = OrbitProcess(["dev", "--data-dir", str(tmp_path / "data"), "--port", "0"], env)
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        url = urlsplit(announced["ORBIT_URL"])
        assert url.hostname is not None and url.port is not None
        yield (url.hostname, url.port), announced["ORBIT_API_KEY"]
    finally:
        assert dev.stop() == 0


def _dev(tmp_path: Path, **settings: str) -> Iterator[tuple[str, int]]:
    for address, _ in _dev_and_key(tmp_path, **settings):
        yield address


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """One server for the module's tests of single connections: each test opens its own
    connections and reads each until it ends, so what one test does never reaches another's
    (and a server process takes seconds to start)."""
    yield from _dev(
        tmp_path_factory.mktemp("server"),
        http_header_timeout_ms=str(HEADER_TIMEOUT_MS),
        http_idle_timeout_ms=str(IDLE_TIMEOUT_MS),
    )


def _connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (bounded by WAIT_S per read)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def test_a_connection_that_sends_nothing_is_closed(server: tuple[str, int]) -> None:
    with _connect(server) as sock:
        started = time.monotonic()
        assert _read_until_closed(sock) == b""
        assert time.monotonic() - started < WAIT_S - 1


def test_headers_that_never_complete_are_cut_off(server: tuple[str, int]) -> None:
    with _connect(server) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        # A slowloris client: one more header line now and then, never the blank line.
        closed = False
        for n in range(int(WAIT_S / 0.2)):
            try:
                sock.sendall(b"X-Slow-%d: 1\r\n" % n)
            except OSError:
                closed = True
                break
            sock.settimeout(0.2)
            try:
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except ConnectionResetError:  # closed with our unread header lines: a reset
                closed = True
                break
        assert closed
        assert time.monotonic() - started < WAIT_S - 1


def test_a_body_that_trickles_in_is_cut_off(tmp_path: Path) -> None:
    """Headers in time, with a key that may submit, then the body a byte at a time: it must
    make progress (16 KiB per header timeout), so the connection is closed long before the
    body could complete, and with no answer."""
    timeout = {"http_header_timeout_ms": str(HEADER_TIMEOUT_MS)}
    for address, key in _dev_and_key(tmp_path, **timeout):
        with _connect(address) as sock:
            started = time.monotonic()
            sock.sendall(
                b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer " + key.encode() + b"\r\n"
                b"Content-Length: 100000\r\n\r\n{"
            )
            assert _trickle_until_closed(sock) == b""
            assert time.monotonic() - started < WAIT_S - 1


def _trickle_until_closed(sock: socket.socket) -> bytes:
    """Send a byte every 0.1 s until the server closes; answers what it sent back."""
    received = b""
    for _ in range(int(WAIT_S / 0.1)):
        try:
            sock.sendall(b" ")
        except OSError:
            return received
        sock.settimeout(0.1)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"still open after {WAIT_S} s")


def test_an_idle_keep_alive_connection_is_closed(server: tuple[str, int]) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        status, _, _ = _response(_read_until_closed(sock))
        assert status == 200
        assert time.monotonic() - started < WAIT_S - 1


MALFORMED = [
    b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
    b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
]


@pytest.mark.parametrize("request_bytes", MALFORMED)
def test_malformed_framing_is_answered_in_the_error_envelope(
    server: tuple[str, int], request_bytes: bytes
) -> None:
    with _connect(server) as sock:
        sock.sendall(request_bytes)
        status, headers, body = _response(_read_until_closed(sock))
    assert status == 400
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert (error["code"], error["category"]) == ("invalid_request", "protocol")
    assert error["request_id"] == headers["x-request-id"]


def test_connections_past_the_cap_are_refused_in_the_envelope(tmp_path: Path) -> None:
    for address in _dev(tmp_path, http_max_connections="2"):
        held = [_connect(address), _connect(address)]
        try:
            with _connect(address) as extra:
                status, headers, body = _response(_read_until_closed(extra))
            assert status == 503
            assert json.loads(body)["error"]["code"] == "unavailable"
            assert "retry-after" in headers
        finally:
            for sock in held:
                sock.close()
        # Once they are gone, new connections are served again.
        for _ in range(50):
            with _connect(address) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                status, _, _ = _response(_read_until_closed(sock))
            if status == 200:
                break
        assert status == 200


def test_worker_connections_do_not_count_against_the_cap(tmp_path: Path) -> None:
    """Workers are WebSocket connections: with a cap of 2 HTTP connections and three workers
    connected, HTTP requests are still served."""
    for address, key in _dev_and_key(tmp_path, http_max_connections="2"):
        upgrade = (
            f"GET /v1/worker HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {key}\r\n\r\n"
        ).encode()
        workers = []
        try:
            for _ in range(3):
                sock = _connect(address)
                workers.append(sock)
                sock.sendall(upgrade)
                answer = b""
                while b"\r\n\r\n" not in answer:
                    answer += sock.recv(4096)
                assert answer.startswith(b"HTTP/1.1 101"), answer[:200]
            with _connect(address) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                status, _, _ = _response(_read_until_closed(sock))
            assert status == 200
        finally:
            for sock in workers:
                sock.close()
