"""The worker runtime: run handlers for Orbit tasks over the worker protocol.

```python
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()  # ORBIT_URL + ORBIT_API_KEY, read when it starts


@worker.handler(queue="emails", type="send-welcome")
async def send_welcome(ctx: TaskContext) -> dict[str, bool]:
    ...
    return {"sent": True}


worker.run()  # or: orbit-worker myapp.workers:worker
```
"""

from orbit_sdk.worker._context import TaskContext, WorkflowContext
from orbit_sdk.worker._errors import NonRetryableError, SafeToRetry, TaskCancelled, WorkerError
from orbit_sdk.worker._logs import JsonLogFormatter
from orbit_sdk.worker._worker import Worker

__all__ = [
    "JsonLogFormatter",
    "NonRetryableError",
    "SafeToRetry",
    "TaskCancelled",
    "TaskContext",
    "Worker",
    "WorkerError",
    "WorkflowContext",
]
