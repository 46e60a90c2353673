"""The tests of the testing guide: a handler, a workflow, injected failures and the clock.
The fixtures ``orbit`` and ``orbit_worker`` come from orbit-sdk's pytest plugin."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import shop

from orbit_sdk import RetryPolicy
from orbit_sdk.testing import OrbitTest, TestWorker
from orbit_sdk.worker import NonRetryableError

ORDER = {"order": "o-1", "email": "ada@example.com", "items": [{"qty": 2, "unit_cents": 450}]}


def test_price_adds_up_the_items(orbit: OrbitTest) -> None:
    with orbit.worker(shop.worker):
        task = orbit.run_task("shop", "price", {"items": [{"qty": 3, "unit_cents": 200}]})
    assert task.state == "succeeded"
    assert task.result == {"total_cents": 600}


def test_an_empty_order_fails_at_once(orbit: OrbitTest) -> None:
    with orbit.worker(shop.worker):
        task = orbit.run_task("shop", "price", {"items": []})
    assert task.state == "failed"
    assert task.error is not None and task.error.code == "empty_order"
    assert len(orbit.attempts_of(task.id)) == 1  # not retried


def test_the_ten_percent_coupon(orbit: OrbitTest) -> None:
    with orbit.worker(shop.worker) as worker:
        handle = shop.discount.submit(orbit.client, shop.Coupon(code="TEN", total_cents=900))
        assert shop.discount.result(orbit.wait_for_task(handle.id)) == 810
        worker.fail_next(shop.discount.queue, shop.discount.type)
        again = shop.discount.submit(orbit.client, shop.Coupon(code="NONE", total_cents=500))
        task = orbit.wait_for_task(again.id, skip_waits=True)
    assert shop.discount.result(task) == 500
    assert [a.state for a in orbit.attempts_of(task.id)] == ["failed", "succeeded"]


def test_checkout_reserves_after_a_day(orbit: OrbitTest) -> None:
    with orbit.worker(shop.worker):
        started = orbit.start_workflow(shop.checkout, ORDER)
        orbit.wait_for_step(started.id, "cooling-off")  # the timer waits: a day from now
        orbit.advance_clock(timedelta(days=1))  # ... which is now
        done = orbit.wait_for_workflow(started.id)
    assert done.state == "succeeded"
    assert done.output == {"reservation": "res-o-1"}


def test_checkout_skips_the_day(orbit: OrbitTest) -> None:
    with orbit.worker(shop.worker):
        done = orbit.run_workflow(shop.checkout, ORDER, skip_waits=True)
    assert done.state == "succeeded"
    assert done.finished_at is not None
    assert done.finished_at - done.created_at >= timedelta(days=1)  # on the server's clock


def test_checkout_of_an_empty_order_fails(orbit: OrbitTest) -> None:
    with orbit.worker(shop.worker):
        done = orbit.run_workflow(shop.checkout, {**ORDER, "items": []})
    assert done.state == "failed"
    assert done.error is not None and done.error.code == "empty_order"


def test_a_price_that_fails_twice_is_retried(orbit: OrbitTest) -> None:
    hourly = RetryPolicy(max_attempts=3, initial_backoff_ms=3_600_000, max_backoff_ms=7_200_000)
    with orbit.worker(shop.worker) as worker:
        worker.fail_next("shop", "price", times=2)
        task = orbit.run_task(
            "shop", "price", {"items": ORDER["items"]}, retry=hourly, skip_waits=True
        )
    assert task.state == "succeeded"
    first, second, third = orbit.attempts_of(task.id)
    assert [first.state, second.state, third.state] == ["failed", "failed", "succeeded"]
    assert first.error is not None and first.error.code == "InjectedFailure"
    assert second.started_at and first.ended_at  # Orbit's backoff: 30 to 60 min, jittered
    assert second.started_at - first.ended_at >= timedelta(minutes=30)


def test_a_lost_attempt_is_retried(orbit: OrbitTest) -> None:
    with orbit.worker(shop.worker) as worker:
        worker.lose_next("shop", "reserve")
        task = orbit.run_task("shop", "reserve", {"order": "o-2"})
    assert task.state == "succeeded"
    first, second = orbit.attempts_of(task.id)
    assert (first.state, first.cause) == ("failed", "lease_expired")
    assert second.state == "succeeded"


def test_an_injected_error_fails_the_task(
    orbit: OrbitTest, orbit_worker: Callable[..., TestWorker]
) -> None:
    worker = orbit_worker(shop.worker)
    worker.fail_next("shop", "price", error=NonRetryableError("card declined", code="declined"))
    task = orbit.run_task("shop", "price", {"items": ORDER["items"]})
    assert task.state == "failed"
    assert task.error is not None and task.error.code == "declined"


async def test_reserve_from_an_async_test(orbit: OrbitTest) -> None:
    async with orbit.worker(shop.worker):
        task = await orbit.run_task_async("shop", "reserve", {"order": "o-3"})
    assert task.result == {"reservation": "res-o-3"}
