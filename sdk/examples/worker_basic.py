"""A worker with one sync and one async handler.

Run it against a server (``ORBIT_URL`` and ``ORBIT_API_KEY`` set, the key with the ``worker``
role and the ``examples`` queue)::

    orbit-worker examples.worker_basic:worker     # from sdk/
    orbit-worker sdk/examples/worker_basic.py     # or by path
    python sdk/examples/worker_basic.py

Then submit ``{"queue": "examples", "type": "add", "params": {"a": 2, "b": 3}}`` (result
``{"sum": 5}``) or ``{"queue": "examples", "type": "greet", "params": {"name": "Ada"}}``
(result ``{"greeting": "Hello, Ada!"}``).
"""

from __future__ import annotations

import asyncio

from orbit_sdk.worker import NonRetryableError, TaskContext, Worker

worker = Worker()


@worker.handler(queue="examples", type="add")
def add(ctx: TaskContext) -> dict[str, int]:
    """Sync handlers run on a thread of the worker's pool."""
    try:
        a, b = int(ctx.params["a"]), int(ctx.params["b"])
    except (KeyError, TypeError, ValueError) as exc:
        # Retrying cannot fix bad input: fail the task at once.
        raise NonRetryableError(f"params need integers a and b: {exc}", code="bad_params") from exc
    ctx.logger.info("adding %d and %d", a, b)
    return {"sum": a + b}


@worker.handler(queue="examples", type="greet")
async def greet(ctx: TaskContext) -> dict[str, str]:
    """Async handlers run on the worker's event loop."""
    await asyncio.sleep(0)  # stands for real I/O
    ctx.raise_if_cancelled()
    name = ctx.params.get("name", "world") if isinstance(ctx.params, dict) else "world"
    return {"greeting": f"Hello, {name}!"}


if __name__ == "__main__":
    worker.run()
