"""The shop's worker: ``orbit-worker fastapi_shop.worker`` (``ORBIT_URL`` and ``ORBIT_API_KEY``
set, the key with the worker role), a process of its own beside the web app."""

from __future__ import annotations

from fastapi_shop.tasks import Confirmation, ConfirmOrder, confirm_order

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.implement(confirm_order)
async def send_confirmation(params: ConfirmOrder, ctx: TaskContext) -> Confirmation:
    ctx.logger.info("confirming order %s to %s", params.order_id, params.email)
    # Send the email here. Orbit may run a task again (a lost worker, a retry): give the mail
    # service an idempotency key of its own, such as the task's id.
    return Confirmation(message_id=f"msg-{ctx.task_id}")
