"""The worker's handler against a real Orbit server, with orbit-sdk's pytest plugin (its
``orbit`` fixture): ``pytest orders`` from the project's directory. The handler needs no
Django, so neither does this test."""

from __future__ import annotations

from orbit_sdk.testing import OrbitTest
from orders.tasks import ConfirmOrder, confirm_order
from orders.worker import worker


def test_an_order_confirmation_is_sent(orbit: OrbitTest) -> None:
    params = ConfirmOrder(order_id="D-1", email="ada@example.com", total_cents=1250)
    with orbit.worker(worker):
        handle = confirm_order.submit(orbit.client, params)
        task = orbit.wait_for_task(handle.id)
    assert confirm_order.result(task) == {"message_id": f"msg-{task.id}"}
