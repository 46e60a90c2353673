"""The task the shop submits, shared by the views (which submit it) and the worker (which runs
it). It imports nothing of Django: the worker loads it without setting Django up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from orbit_sdk import RetryPolicy, task_ref


@dataclass(frozen=True)
class ConfirmOrder:
    order_id: str
    email: str
    total_cents: int


class Confirmation(TypedDict):
    message_id: str


confirm_order = task_ref(
    queue="shop",
    type="confirm-order",
    params=ConfirmOrder,
    result=Confirmation,
    retry=RetryPolicy(max_attempts=5, initial_backoff_ms=1_000),
    timeout_ms=30_000,
)
