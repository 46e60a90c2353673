"""A worker implementing the typed tasks declared in ``typed_defs.py``, and one typed task
declared by its handler. Run it against a server (``ORBIT_URL`` and ``ORBIT_API_KEY`` set, the
key with the ``worker`` role)::

    orbit-worker sdk/examples/typed_worker.py
"""

from __future__ import annotations

import asyncio

import msgspec
from typed_defs import AddParams, AddResult, Greeting, GreetParams, add, greet

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.implement(add)
def run_add(params: AddParams, ctx: TaskContext) -> AddResult:
    """Sync: runs on a thread of the worker's pool; params arrive decoded and validated."""
    ctx.logger.info("adding %d and %d", params.a, params.b)
    return AddResult(sum=params.a + params.b)


@worker.implement(greet)
async def run_greet(params: GreetParams) -> Greeting:
    """Async, and without the context: a handler may take only its params."""
    await asyncio.sleep(0)  # stands for real I/O
    return {"greeting": f"Hello, {params.name}{'!' if params.excited else '.'}"}


class DoubleParams(msgspec.Struct, frozen=True):
    n: int


@worker.task(queue="examples", type="typed-double", priority=5)
def double(params: DoubleParams) -> int:
    """Declared by its handler: ``double`` is now the TaskRef[DoubleParams, int]."""
    return params.n * 2


if __name__ == "__main__":
    worker.run()
