"""Typed task definitions, shared by the code that submits the tasks and the worker that runs
them. This module holds the models and the references, and no handler code: a web app imports
it to submit without importing the worker (see ``typed_submit.py`` and ``typed_worker.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import msgspec

from orbit_sdk import RetryPolicy, task_ref


class AddParams(msgspec.Struct, frozen=True):
    a: int
    b: int


class AddResult(msgspec.Struct, frozen=True):
    sum: int


@dataclass(frozen=True)
class GreetParams:
    name: str
    excited: bool = False


class Greeting(TypedDict):
    greeting: str


add = task_ref(
    queue="examples",
    type="typed-add",
    params=AddParams,
    result=AddResult,
    retry=RetryPolicy(max_attempts=5, initial_backoff_ms=200),  # defaults for every submit
    timeout_ms=30_000,
)
greet = task_ref(queue="examples", type="typed-greet", params=GreetParams, result=Greeting)
