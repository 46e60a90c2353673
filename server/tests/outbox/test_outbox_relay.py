"""The outbox on real PostgreSQL, MariaDB and SQLite databases, written through DB-API and
SQLAlchemy, delivered by the relay to a real Orbit node."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy.orm import Session

from orbit_sdk import AsyncClient
from orbit_sdk.outbox import OutboxError, OutboxRelay, ddl, signal, start_workflow, submit
from tests.outbox.conftest import (
    ACCESS,
    DIALECTS,
    FakeClock,
    connect,
    create_table,
    rows,
    sqlalchemy_engine,
)

MakeClient = Callable[..., AsyncClient]


@contextlib.contextmanager
def transaction(url: str, via: str) -> Iterator[Any]:
    """A connection in a transaction, committed when the block ends without an error, else
    rolled back: a DB-API connection, or a SQLAlchemy ORM Session."""
    if via == "dbapi":
        conn = connect(url)
        try:
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()
        return
    engine = sqlalchemy_engine(url)
    try:
        with Session(engine) as session, session.begin():
            yield session
    finally:
        engine.dispose()


class Rollback(Exception):
    pass


def relay_for(url: str, client: AsyncClient, clock: FakeClock, **options: Any) -> OutboxRelay:
    return OutboxRelay(url, client, clock=clock, rand=lambda: 1.0, **options)


async def tasks_in(client: AsyncClient, queue: str) -> list[Any]:
    return [task async for task in client.iter_tasks(queue=queue)]


@pytest.mark.parametrize(("business_url", "via"), ACCESS, indirect=["business_url"])
async def test_committed_rows_become_one_task_each_and_rolled_back_rows_none(
    business_url: str, via: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    with transaction(business_url, via) as conn:
        first = submit(conn, "emails", "welcome", {"user": 1}, labels={"via": via})
        second = submit(conn, "emails", "welcome", {"user": 2}, idempotency_key="welcome-2")
    with contextlib.suppress(Rollback), transaction(business_url, via) as conn:
        submit(conn, "emails", "welcome", {"user": 3})
        raise Rollback
    client = orbit()
    relay = relay_for(business_url, client, fake_clock)
    try:
        assert await relay.drain() == 2
        assert await relay.drain() == 0
    finally:
        await relay.aclose()
    made = {task.idempotency_key: task for task in await tasks_in(client, "emails")}
    assert set(made) == {first, "welcome-2"}
    assert made[first].params == {"user": 1} and made[first].labels == {"via": via}
    delivered = {row["id"]: row for row in rows(business_url)}
    assert delivered[first]["result"] == made[first].id
    assert delivered[second]["result"] == made["welcome-2"].id
    assert all(row["delivered_at"] is not None for row in delivered.values())
    assert relay.stats().delivered == 2


@pytest.mark.parametrize("business_url", DIALECTS, indirect=True)
async def test_a_row_delivered_again_after_a_crash_makes_no_second_task(
    business_url: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    with transaction(business_url, "dbapi") as conn:
        row_id = submit(conn, "emails", "welcome", {"user": 1})
    client = orbit()
    crashed = relay_for(business_url, client, fake_clock, lease=timedelta(seconds=30))
    survivor = relay_for(business_url, client, fake_clock, lease=timedelta(seconds=30))
    try:
        # The first relay claims and delivers, then dies before it records the delivery.
        claimed = await asyncio.to_thread(
            crashed._store.claim, crashed.relay_id, fake_clock(), timedelta(seconds=30), 10
        )
        [outcome] = await crashed._deliver(claimed)
        assert await survivor.run_once() == 0  # leased to the dead relay
        fake_clock.advance(31)
        assert await survivor.drain() == 1
    finally:
        await crashed.aclose()
        await survivor.aclose()
    [task] = await tasks_in(client, "emails")
    assert task.id == outcome.result
    assert rows(business_url)[0]["result"] == task.id
    assert rows(business_url)[0]["id"] == row_id


class FailFirst(httpx2.AsyncBaseTransport):
    """Answers the first ``count`` requests with ``status`` as Orbit would, then passes on."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, count: int, status: int) -> None:
        self.inner = inner
        self.count = count
        self.status = status

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.count > 0:
            self.count -= 1
            body = {
                "error": {
                    "code": "unavailable",
                    "category": "transient",
                    "message": "draining",
                    "retryable": True,
                }
            }
            return httpx2.Response(self.status, json=body, headers={"retry-after": "1"})
        return await self.inner.handle_async_request(request)


async def test_transient_failures_are_retried_with_backoff(
    business_url: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    with transaction(business_url, "dbapi") as conn:
        submit(conn, "emails", "welcome", {"user": 1})
    client = orbit(lambda inner: FailFirst(inner, 2, 503))
    relay = relay_for(business_url, client, fake_clock, initial_backoff=2.0)
    try:
        assert await relay.run_once() == 1  # 503: again in 2 s
        [row] = rows(business_url)
        assert row["attempts"] == 1 and row["delivered_at"] is None
        assert "unavailable" in row["last_error"] and row["claimed_by"] is None
        assert await relay.run_once() == 0  # not due yet
        fake_clock.advance(2)
        assert await relay.run_once() == 1  # 503 again: the wait doubles to 4 s
        fake_clock.advance(3)
        assert await relay.run_once() == 0
        fake_clock.advance(1)
        assert await relay.run_once() == 1
    finally:
        await relay.aclose()
    [row] = rows(business_url)
    assert row["attempts"] == 3 and row["delivered_at"] is not None and row["last_error"] is None
    stats = relay.stats()
    assert (stats.retried, stats.delivered, stats.parked) == (2, 1, 0)


@pytest.mark.parametrize("business_url", DIALECTS, indirect=True)
async def test_rows_orbit_refuses_are_parked_without_holding_up_the_others(
    business_url: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    with transaction(business_url, "dbapi") as conn:
        good = submit(conn, "emails", "welcome", {"user": 1})
        bad = submit(conn, "emails", "welcome", {"user": 2}, timeout_ms=10**12)
        later = submit(conn, "emails", "welcome", {"user": 3})
        lost = signal(conn, "no-such-workflow", "paid", {"amount": 5})
        flow = start_workflow(conn, "no-such-definition", {"order": 7})
    client = orbit()
    relay = relay_for(business_url, client, fake_clock)
    try:
        assert await relay.drain() == 5
        assert (await relay.measure()).parked_rows == 3
    finally:
        await relay.aclose()
    by_id = {row["id"]: row for row in rows(business_url)}
    assert by_id[good]["delivered_at"] is not None and by_id[later]["delivered_at"] is not None
    for parked in (bad, lost, flow):
        assert by_id[parked]["parked_at"] is not None and by_id[parked]["delivered_at"] is None
    assert "invalid_request" in by_id[bad]["last_error"]
    assert "not_found" in by_id[lost]["last_error"]
    assert len(await tasks_in(client, "emails")) == 2
    assert (relay.stats().delivered, relay.stats().parked) == (2, 3)


async def test_rows_of_one_aggregate_key_go_in_order_and_a_parked_row_holds_its_key(
    business_url: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    with transaction(business_url, "dbapi") as conn:
        a1 = submit(conn, "orders", "step", {"n": 1}, aggregate_key="order-1")
        a2 = submit(conn, "orders", "step", {"n": 2}, aggregate_key="order-1")
        a3 = submit(conn, "orders", "step", {"n": 3}, aggregate_key="order-1")
        b1 = submit(conn, "orders", "step", {"n": 1}, aggregate_key="order-2", timeout_ms=10**12)
        b2 = submit(conn, "orders", "step", {"n": 2}, aggregate_key="order-2")
    client = orbit()
    relay = relay_for(business_url, client, fake_clock)
    try:
        # One row of a key per pass: the next is claimed once the one before is delivered.
        assert await relay.run_once() == 2  # a1, b1 (parked)
        assert await relay.run_once() == 1  # a2; b2 waits behind parked b1
        assert await relay.run_once() == 1  # a3
        assert await relay.run_once() == 0
    finally:
        await relay.aclose()
    by_id = {row["id"]: row for row in rows(business_url)}
    made = {task.id: task for task in await tasks_in(client, "orders")}
    delivered = [made[by_id[key]["result"]] for key in (a1, a2, a3)]
    assert [task.params["n"] for task in sorted(delivered, key=lambda t: t.created_at)] == [1, 2, 3]
    assert by_id[b1]["parked_at"] is not None
    assert by_id[b2]["delivered_at"] is None and by_id[b2]["claimed_by"] is None


@pytest.mark.parametrize("business_url", ["postgresql", "mariadb"], indirect=True)
async def test_relays_running_at_once_deliver_each_row_once(
    business_url: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    with transaction(business_url, "dbapi") as conn:
        ids = [submit(conn, "bulk", "item", {"n": n}) for n in range(120)]
    client = orbit()
    relays = [relay_for(business_url, client, fake_clock, batch_size=10) for _ in range(3)]
    try:
        claimed = await asyncio.gather(*(relay.drain() for relay in relays))
    finally:
        for relay in relays:
            await relay.aclose()
    assert sum(claimed) == 120  # no row claimed twice
    assert sum(relay.stats().delivered for relay in relays) == 120
    tasks = await tasks_in(client, "bulk")
    assert sorted(task.idempotency_key for task in tasks) == sorted(ids)


async def test_delivered_rows_are_pruned_after_the_retention(
    business_url: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    with transaction(business_url, "dbapi") as conn:
        submit(conn, "emails", "welcome")
    relay = relay_for(business_url, orbit(), fake_clock, retention=timedelta(hours=1))
    try:
        await relay.drain()
        assert len(rows(business_url)) == 1
        fake_clock.advance(3601)
        await relay.run_once()
    finally:
        await relay.aclose()
    assert rows(business_url) == []


async def test_stats_report_the_backlog_and_the_oldest_row(
    business_url: str, orbit: MakeClient, fake_clock: FakeClock
) -> None:
    relay = relay_for(business_url, orbit(), fake_clock)
    try:
        assert (await relay.measure()).oldest_undelivered_age_s is None
        with transaction(business_url, "dbapi") as conn:
            submit(conn, "emails", "welcome")
            submit(conn, "emails", "welcome")
        fake_clock.advance(10)
        stats = await relay.measure()
        assert (stats.backlog, stats.undelivered) == (2, 2)
        assert stats.oldest_undelivered_age_s is not None
        assert 39 < stats.oldest_undelivered_age_s < 100
        await relay.drain()
        assert (await relay.measure()).backlog == 0
    finally:
        await relay.aclose()


def test_prometheus_metrics_read_the_relay_stats(business_url: str) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    relay = OutboxRelay(business_url, AsyncClient("http://orbit.test"))
    relay.register_metrics(registry)
    text = generate_latest(registry).decode()
    for name in ("backlog", "oldest_undelivered_age_seconds", "delivered_total", "parked_total"):
        assert f"orbit_outbox_{name}" in text


def test_unsupported_connections_and_bad_requests_are_refused_with_a_code(
    business_url: str,
) -> None:
    with pytest.raises(OutboxError) as refused:
        submit(object(), "emails", "welcome")
    assert refused.value.code == "unsupported_connection"
    conn = connect(business_url)
    try:
        for bad in (
            {"delay_ms": 5, "run_at": "2030-01-01T00:00:00Z"},
            {"params": {"at": object()}},
            {"aggregate_key": ""},
        ):
            with pytest.raises(OutboxError) as refused:
                submit(conn, "emails", "welcome", **bad)
            assert refused.value.code == "invalid_request"
        conn.rollback()
    finally:
        conn.close()
    assert rows(business_url) == []
    with pytest.raises(OutboxError) as refused:
        OutboxRelay("oracle://db/x", AsyncClient("http://orbit.test"))
    assert refused.value.code == "unsupported_database"


@pytest.mark.parametrize("dialect", ["postgresql", "mysql", "sqlite"])
def test_each_dialect_has_its_ddl(dialect: str) -> None:
    text = ddl(dialect)
    assert "CREATE TABLE IF NOT EXISTS orbit_outbox" in text
    for column in ("claimed_until", "claimed_by", "next_attempt_at", "parked_at", "result"):
        assert column in text


async def test_the_run_loop_waits_out_a_missing_database_and_delivers_once_it_is_there(
    tmp_path: Path, orbit: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'not-yet' / 'business.db'}"
    relay = OutboxRelay(url, orbit(), poll_interval=0.01, rand=lambda: 1.0)
    running = asyncio.create_task(relay.run())
    try:
        async with asyncio.timeout(10):
            while "outbox relay pass failed" not in caplog.text:
                await asyncio.sleep(0.01)
        (tmp_path / "not-yet").mkdir()
        create_table(url)
        with transaction(url, "dbapi") as conn:
            row_id = submit(conn, "emails", "welcome")
        async with asyncio.timeout(20):
            while not rows(url)[0]["delivered_at"]:
                await asyncio.sleep(0.01)
        relay.stop()
        await asyncio.wait_for(running, 5)
    finally:
        running.cancel()
        await relay.aclose()
    assert rows(url)[0]["id"] == row_id and relay.stats().delivered == 1
