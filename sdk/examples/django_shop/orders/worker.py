"""The shop's worker: ``orbit-worker orders.worker``, started from the project's directory
(``ORBIT_URL`` and ``ORBIT_API_KEY`` set, the key with the worker role)."""

from __future__ import annotations

from orbit_sdk.worker import TaskContext, Worker
from orders.tasks import Confirmation, ConfirmOrder, confirm_order

worker = Worker()


@worker.implement(confirm_order)
def send_confirmation(params: ConfirmOrder, ctx: TaskContext) -> Confirmation:
    ctx.logger.info("confirming order %s to %s", params.order_id, params.email)
    # Send the email here, with an idempotency key of its own (the task's id): Orbit may run
    # a task again after a lost worker or a retry.
    return {"message_id": f"msg-{ctx.task_id}"}
