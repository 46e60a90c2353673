"""An order as a workflow: charge the card, have a person approve large orders, ship (print a
label and send a mail at once), and refund the payment when approval or shipping goes wrong.

One file holds the three parts of a workflow: a worker with the handlers of its tasks, the
definition (built with the ``Workflow`` builder), and a script that publishes the definition,
starts two orders, approves the large one and waits for both. Run it against a server
(``ORBIT_URL`` and ``ORBIT_API_KEY`` set; the key needs the ``worker`` and ``operator`` roles,
as the ``orbit dev`` key has)::

    orbit-worker sdk/examples/workflow_order.py    # the worker, in one terminal
    python sdk/examples/workflow_order.py          # the script, in another

The script prints the two instances as they end.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from orbit_sdk import Client, RetryPolicy, When, Workflow
from orbit_sdk.worker import TaskContext, Worker

# -- the worker: one handler per task type the steps submit ------------------------------------

worker = Worker()


@worker.handler(queue="examples", type="charge", side_effect="unsafe")
def charge(ctx: TaskContext) -> dict[str, str]:
    """Stands for a payment provider's API."""
    return {"receipt": f"r-{ctx.params['order']}", "provider": "acme-pay"}


@worker.handler(queue="examples", type="print-label")
def print_label(ctx: TaskContext) -> dict[str, str]:
    return {"label": f"label-{ctx.params['order']}.pdf"}


@worker.handler(queue="examples", type="send-mail")
async def send_mail(ctx: TaskContext) -> dict[str, str]:
    await asyncio.sleep(0)  # stands for a mail provider's API
    return {"to": ctx.params["to"], "template": "order-shipped"}


@worker.handler(queue="examples", type="refund", side_effect="unsafe")
def refund(ctx: TaskContext) -> dict[str, str]:
    return {"refunded": ctx.params["receipt"]}


# -- the definition ----------------------------------------------------------------------------

order = Workflow("order", version="1", description="charge, approve large orders, ship")
order.task(
    "charge",
    queue="examples",
    type="charge",
    params="{'order': input.order_id, 'amount': input.amount}",
    output="result.receipt",
    retry=RetryPolicy(max_attempts=5),
    timeout=timedelta(seconds=30),
    side_effect="unsafe",
    on_failure="declined",
)
order.choice("route", [When("input.amount > 1000", "approve")], default="ship")
order.signal(
    "approve",
    name="approved",
    timeout=timedelta(days=1),
    on_timeout="refund",
    output="signal.by",
)  # continues with the next step declared: "ship"
ship = order.parallel("ship", on_failure="refund")
ship.branch("label").task(
    "print",
    queue="examples",
    type="print-label",
    params="{'order': input.order_id}",
    output="result.label",
)
ship.branch("mail").task(
    "mail",
    queue="examples",
    type="send-mail",
    params="{'order': input.order_id, 'to': input.email}",
)
order.succeed(
    "done",
    output="{'receipt': steps.charge.output, 'shipped': steps.ship.output, "
    "'approved_by': has(steps.approve) ? steps.approve.output : 'nobody'}",
)
order.task(
    "refund",
    queue="examples",
    type="refund",
    params="{'receipt': steps.charge.output}",
    side_effect="unsafe",
)  # continues with the next step declared: "refunded"
order.fail("refunded", code="refunded", message="the order was refunded")
order.fail("declined", code="declined", message="the payment did not go through")


# -- the script --------------------------------------------------------------------------------


def main() -> None:
    with Client() as client:  # ORBIT_URL and ORBIT_API_KEY
        client.publish_workflow(order)  # the same content again changes nothing
        large = client.start_workflow(
            "order",
            {"order_id": "o-17", "amount": 1200, "email": "ada@example.com"},
            version=order.version,
            idempotency_key="order-o-17",
        )
        # The large order will wait in "approve". A signal sent before a step waits for it is
        # kept, and the step takes it when it gets there.
        client.signal_workflow(large.id, "approved", {"by": "ana"}, idempotency_key="ok-o-17")
        small = client.start_workflow(
            "order",
            {"order_id": "o-18", "amount": 40, "email": "bob@example.com"},
            version=order.version,
            idempotency_key="order-o-18",
        )
        for run in (large, small):
            done = client.wait_for_workflow(run.id, timeout=timedelta(seconds=60))
            print(done.input["order_id"], done.state, done.output)


if __name__ == "__main__":
    main()
