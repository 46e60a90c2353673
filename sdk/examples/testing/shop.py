"""The application the testing guide tests: a worker with three handlers and a typed task,
and a checkout workflow that prices an order, waits a day before reminding the customer, and
reserves stock.

Run its tests with ``pytest sdk/examples/testing`` (``orbit-server`` installed beside
``orbit-sdk``: the tests start a real server).
"""

from __future__ import annotations

from datetime import timedelta

import msgspec

from orbit_sdk import RetryPolicy, Workflow
from orbit_sdk.worker import NonRetryableError, TaskContext, Worker

worker = Worker()


@worker.handler(queue="shop", type="price")
def price(ctx: TaskContext) -> dict[str, int]:
    total = sum(item["qty"] * item["unit_cents"] for item in ctx.params["items"])
    if total <= 0:
        raise NonRetryableError("an order must cost something", code="empty_order")
    return {"total_cents": total}


@worker.handler(queue="shop", type="reserve")
async def reserve(ctx: TaskContext) -> dict[str, str]:
    return {"reservation": f"res-{ctx.params['order']}"}


@worker.handler(queue="shop", type="remind")
def remind(ctx: TaskContext) -> dict[str, str]:
    return {"reminded": ctx.params["email"]}


class Coupon(msgspec.Struct, frozen=True):
    code: str
    total_cents: int


@worker.task(queue="shop", type="discount")
def discount(coupon: Coupon) -> int:  # a typed task: ``discount`` is its TaskRef
    return coupon.total_cents * 9 // 10 if coupon.code == "TEN" else coupon.total_cents


checkout = Workflow("checkout", version="1", output="steps.reserve.output")
checkout.task(
    "price",
    queue="shop",
    type="price",
    params="{'items': input.items}",
    output="result.total_cents",
    retry=RetryPolicy(max_attempts=3, initial_backoff_ms=60_000, max_backoff_ms=600_000),
)
checkout.timer("cooling-off", duration=timedelta(days=1))
checkout.task("remind", queue="shop", type="remind", params="{'email': input.email}")
checkout.task(
    "reserve",
    queue="shop",
    type="reserve",
    params="{'order': input.order, 'total': steps.price.output}",
)
