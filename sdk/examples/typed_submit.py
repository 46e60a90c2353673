"""Submits typed tasks through the references of ``typed_defs.py`` and waits for their typed
results; it imports no handler code. Run it while ``typed_worker.py`` runs (``ORBIT_URL`` and
``ORBIT_API_KEY`` set, the key with the ``submitter`` role)::

    python sdk/examples/typed_submit.py
"""

from __future__ import annotations

import asyncio

from typed_defs import AddParams, GreetParams, add, greet

from orbit_sdk import AsyncClient, Client, RetryPolicy, TaskFailedError


def main() -> None:
    with Client() as client:
        handle = add.submit(client, AddParams(a=2, b=3))  # sent with add's declared defaults
        result = handle.wait(client, timeout=60)  # an AddResult
        print("add", result.sum, handle.task.retry.max_attempts)

        # One submit may override what the reference declared.
        urgent = add.submit(client, AddParams(a=40, b=2), priority=10, retry=RetryPolicy())
        print("urgent", add.wait(client, urgent, timeout=60).sum, urgent.task.priority)

        hello = greet.wait(client, greet.submit(client, GreetParams("Ada", excited=True)))
        print("greet", hello["greeting"])

        # Several tasks of one reference in one request (all or nothing).
        handles = add.submit_many(client, [AddParams(a=n, b=n) for n in range(3)])
        print("batch", [handle.wait(client, timeout=60).sum for handle in handles])

        # A task submitted by name with params that do not fit fails on the worker, at once.
        raw = client.submit("examples", "typed-add", {"a": "two", "b": 3})
        try:
            add.wait(client, raw, timeout=60)
        except TaskFailedError as error:
            print("refused", error.code, error.task.attempts)


async def main_async() -> None:
    async with AsyncClient() as client:
        handle = await add.submit_async(client, AddParams(a=3, b=4))
        print("async", (await handle.wait_async(client, timeout=60)).sum)


if __name__ == "__main__":
    main()
    asyncio.run(main_async())
