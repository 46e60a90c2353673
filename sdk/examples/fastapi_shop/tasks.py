"""The task the shop submits, shared by the web app (which submits it) and the worker (which
runs it). No handler code here: the app imports this module, never the worker's."""

from __future__ import annotations

from pydantic import BaseModel

from orbit_sdk import RetryPolicy, task_ref


class ConfirmOrder(BaseModel):
    order_id: str
    email: str
    total_cents: int


class Confirmation(BaseModel):
    message_id: str


confirm_order = task_ref(
    queue="shop",
    type="confirm-order",
    params=ConfirmOrder,
    result=Confirmation,
    retry=RetryPolicy(max_attempts=5, initial_backoff_ms=1_000),
    timeout_ms=30_000,
)
