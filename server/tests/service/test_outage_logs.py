"""While the database is away, the whole node tells it in a few lines — one warning when it
goes, a reminder a minute, one line when it is back — however many requests, readiness
probes and background passes meet the outage meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
from structlog.testing import capture_logs

from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.errors import DatabaseUnavailable
from orbit_server.store import Database
from orbit_server.store.base import Availability, T, Unit
from tests.conftest import SCOPE, bearer, make_key, orbit_app
from tests.support.wrapped_database import WrappedDatabase


class Switchable(WrappedDatabase):
    """The real database, until ``down`` is set: then every unit and ping is refused as an
    unreachable server refuses them."""

    down = False

    async def _run_once(self, unit: Unit[T], *, write: bool, timeout_s: float) -> T:
        if self.down:
            raise DatabaseUnavailable("cannot connect to the database")
        return await super()._run_once(unit, write=write, timeout_s=timeout_s)

    async def ping(self) -> None:
        if self.down:
            raise DatabaseUnavailable("cannot connect to the database")
        await super().ping()


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def told(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The lines an operator sees at the default level (info and above) but the access log's,
    one per request in or out of an outage."""
    return [
        (e["log_level"], e["event"])
        for e in logs
        if e["log_level"] != "debug" and e["event"] != "request"
    ]


async def test_an_outage_is_a_few_lines_for_the_whole_node(
    db: Database, settings: Settings, clock: FakeClock
) -> None:
    switch = Switchable(db)
    mono = Monotonic()
    switch.availability = Availability(now=mono)
    node = await build_node(settings, db=switch, clock=clock)
    key = await make_key(node, SCOPE)
    transport = httpx2.ASGITransport(app=orbit_app(node))
    await node.supervisor.start()
    try:
        async with httpx2.AsyncClient(transport=transport, base_url="http://orbit.test") as http:
            with capture_logs() as logs:
                switch.down = True
                for _ in range(3):  # three "seconds" of refusals from every source
                    for _request in range(20):
                        answer = await http.post(
                            "/v1/tasks", json={"queue": "q", "type": "t"}, headers=bearer(key)
                        )
                        assert answer.status_code == 503
                        assert (await http.get("/readyz")).status_code == 503
                    await asyncio.sleep(0.6)  # the background loops try again meanwhile
                    mono.now += 1
                mono.now += 60  # a minute on: one reminder, however many refusals follow
                for _ in range(20):
                    assert (await http.get("/readyz")).status_code == 503
                switch.down = False
                assert (await http.get("/readyz")).status_code == 200
                assert (await http.get("/readyz")).status_code == 200
    finally:
        await node.supervisor.stop()
    assert told(logs) == [
        ("warning", "database unavailable: refusing work until it answers again"),
        ("warning", "database still unavailable"),
        ("info", "database available again"),
    ], told(logs)
    refused = next(e for e in logs if e["event"] == "database available again")["refused"]
    assert refused > 120  # every request and probe counted, each told at DEBUG only
