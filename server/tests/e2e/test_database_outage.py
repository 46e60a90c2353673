"""With MariaDB stopped, Orbit refuses instead of pretending, and recovers without a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import pytest

from tests.harness.mariadb import MariaDBServer
from tests.support.processes import OrbitProcess, run_orbit

LEAKS = ("select", "asyncmy", "traceback", "mysql", "2003", "connection refused")


@pytest.fixture
def private_mariadb() -> Iterator[MariaDBServer]:
    """A MariaDB server of this test's own, since the test stops and restarts it."""
    with MariaDBServer() as server:
        yield server


def wait_for_status(client: httpx2.Client, path: str, status: int, within_s: float) -> float:
    """Poll until ``path`` answers ``status``; answers how long it took (the server's own state
    changes asynchronously, so there is no event to wait on)."""
    started = time.monotonic()
    last = None
    while time.monotonic() - started < within_s:
        try:
            last = client.get(path).status_code
        except httpx2.TransportError:
            last = None
        if last == status:
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{path} still answered {last} after {within_s}s, wanted {status}")


def test_readyz_follows_the_database_down_and_back(private_mariadb: MariaDBServer) -> None:
    env = {"ORBIT_DATABASE_URL": private_mariadb.url()}
    assert run_orbit("migrate", env=env).code == 0
    created = run_orbit(
        "keys",
        "create",
        "--tenant",
        "acme",
        "--environment",
        "prod",
        "--role",
        "submitter",
        env=env,
    )
    key = created.stdout.strip().splitlines()[-1]
    server = OrbitProcess(["server", "--port", "0", "--host", "127.0.0.1"], env=env)
    try:
        url = server.wait_for("ORBIT_URL")["ORBIT_URL"]
        with httpx2.Client(base_url=url, timeout=10) as client:
            assert client.get("/readyz").status_code == 200
            private_mariadb.stop()
            went_down = wait_for_status(client, "/readyz", 503, within_s=5)
            ready = client.get("/readyz")
            assert ready.json()["checks"]["database"] == "unreachable"
            refused = client.get("/v1/whoami", headers={"Authorization": f"Bearer {key}"})
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "unavailable"
            assert "retry-after" in refused.headers
            assert not any(word in refused.text.lower() for word in LEAKS)
            assert client.get("/healthz").status_code == 200  # alive, just not ready
            status = run_orbit("status", env={"ORBIT_URL": url, "ORBIT_API_KEY": key})
            assert status.code == 1
            assert "database unavailable (unavailable)" in status.stderr, status.stderr
            assert "rejected" not in status.stderr
            private_mariadb.start()
            came_back = wait_for_status(client, "/readyz", 200, within_s=20)
            auth = {"Authorization": f"Bearer {key}"}
            assert client.get("/v1/whoami", headers=auth).status_code == 200
        print(f"readyz 503 after {went_down:.2f}s down, 200 after {came_back:.2f}s back")
    finally:
        assert server.stop() == 0
    # The outage is told in a few lines: when it began and when it ended, not once per
    # refused pass (the background loops tried every half second meanwhile).
    log = server.stderr.splitlines()
    assert len([line for line in log if "database unavailable: refusing work" in line]) == 1
    assert len([line for line in log if "database available again" in line]) == 1
    assert [line for line in log if "skipped" in line] == []
    # Nothing else meeting the outage repeats it: not the readiness probes (every 0.1 s
    # here), not the refused requests. The outage's one warning is the only one.
    warned = [line for line in log if "[warning" in line or "[error" in line]
    assert len(warned) == 1, warned
