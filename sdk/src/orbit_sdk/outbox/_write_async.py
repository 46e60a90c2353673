"""The outbox writes for asynchronous connections: ``submit_async``, ``start_workflow_async``,
``signal_async``. The same rows as the synchronous calls, written on a SQLAlchemy
``AsyncSession``/``AsyncConnection`` (through ``run_sync``), a psycopg ``AsyncConnection`` or an
asyncmy connection, in the caller's transaction; never committed here."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from orbit_sdk._models import RetryPolicy, SideEffect, TaskRequest
from orbit_sdk.outbox._dialects import Dialect, pyformat
from orbit_sdk.outbox._errors import OutboxError
from orbit_sdk.outbox._write import (
    Row,
    request_options,
    signal_row,
    task_row,
    workflow_row,
    write_row,
)

__all__ = ["signal_async", "start_workflow_async", "submit_async"]


async def submit_async(
    conn: Any,
    queue: str,
    type: str,
    params: Any = None,
    *,
    idempotency_key: str | None = None,
    aggregate_key: str | None = None,
    priority: int | None = None,
    run_at: datetime | str | None = None,
    delay_ms: int | None = None,
    concurrency_key: str | None = None,
    fairness_key: str | None = None,
    side_effect: SideEffect | None = None,
    handler_version: str | None = None,
    retry: RetryPolicy | None = None,
    timeout_ms: int | None = None,
    labels: Mapping[str, str] | None = None,
    traceparent: str | None = None,
) -> str:
    """:func:`~orbit_sdk.outbox.submit` on an asynchronous connection; answers the row's id."""
    row = task_row(
        queue,
        type,
        params,
        idempotency_key=idempotency_key,
        aggregate_key=aggregate_key,
        priority=priority,
        run_at=run_at,
        delay_ms=delay_ms,
        concurrency_key=concurrency_key,
        fairness_key=fairness_key,
        side_effect=side_effect,
        handler_version=handler_version,
        retry=retry,
        timeout_ms=timeout_ms,
        labels=labels,
        traceparent=traceparent,
    )
    await _write_async(conn, row)
    return row.id


async def submit_request_async(
    conn: Any,
    request: TaskRequest,
    *,
    aggregate_key: str | None = None,
    traceparent: str | None = None,
) -> str:
    """:func:`~orbit_sdk.outbox.submit_request` on an asynchronous connection."""
    return await submit_async(
        conn, request.queue, request.type, request.params, aggregate_key=aggregate_key,
        traceparent=traceparent, **request_options(request),
    )  # fmt: skip


async def start_workflow_async(
    conn: Any,
    definition: str,
    input: Any = None,
    *,
    version: str | None = None,
    idempotency_key: str | None = None,
    aggregate_key: str | None = None,
) -> str:
    """:func:`~orbit_sdk.outbox.start_workflow` on an asynchronous connection."""
    row = workflow_row(definition, input, version, idempotency_key, aggregate_key)
    await _write_async(conn, row)
    return row.id


async def signal_async(
    conn: Any,
    workflow_id: str,
    name: str,
    payload: Any = None,
    *,
    idempotency_key: str | None = None,
    aggregate_key: str | None = None,
) -> str:
    """:func:`~orbit_sdk.outbox.signal` on an asynchronous connection."""
    row = signal_row(workflow_id, name, payload, idempotency_key, aggregate_key)
    await _write_async(conn, row)
    return row.id


async def _write_async(conn: Any, row: Row) -> None:
    module = type(conn).__module__.split(".", 1)[0]
    if module == "sqlalchemy" and callable(getattr(conn, "run_sync", None)):
        # AsyncSession and AsyncConnection run the synchronous write on their greenlet.
        await conn.run_sync(lambda sync_conn: write_row(sync_conn, row))
        return
    dialect: Dialect
    if module == "psycopg":
        dialect = "postgresql"
    elif module == "asyncmy":
        dialect = "mysql"
    else:
        raise OutboxError(
            "unsupported_connection",
            f"cannot write outbox rows on a {type(conn).__module__}.{type(conn).__qualname__}: "
            "pass a SQLAlchemy AsyncSession or AsyncConnection, a psycopg AsyncConnection or "
            "an asyncmy connection",
        )
    sql, params = row.insert(dialect)
    async with conn.cursor() as cursor:
        await cursor.execute(pyformat(sql), params)
