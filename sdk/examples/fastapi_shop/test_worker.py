"""The worker's handler against a real Orbit server, with orbit-sdk's pytest plugin (its
``orbit`` fixture): ``pytest fastapi_shop`` from the project's root."""

from __future__ import annotations

from fastapi_shop.tasks import ConfirmOrder, confirm_order
from fastapi_shop.worker import worker

from orbit_sdk.testing import OrbitTest


def test_an_order_confirmation_is_sent(orbit: OrbitTest) -> None:
    params = ConfirmOrder(order_id="A-1", email="ada@example.com", total_cents=1250)
    with orbit.worker(worker):
        handle = confirm_order.submit(orbit.client, params)
        task = orbit.wait_for_task(handle.id)
    assert confirm_order.result(task).message_id == f"msg-{task.id}"


def test_a_failed_send_is_retried(orbit: OrbitTest) -> None:
    params = ConfirmOrder(order_id="A-2", email="bob@example.com", total_cents=900)
    with orbit.worker(worker) as running:
        running.fail_next(confirm_order.queue, confirm_order.type)
        handle = confirm_order.submit(orbit.client, params)
        task = orbit.wait_for_task(handle.id, skip_waits=True)  # no backoff to sit through
    assert task.state == "succeeded"
    assert [a.state for a in orbit.attempts_of(task.id)] == ["failed", "succeeded"]
