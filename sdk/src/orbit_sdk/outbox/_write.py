"""Writing outbox rows in the caller's transaction: ``submit``, ``start_workflow``, ``signal``.

A row is one ``INSERT`` on the connection the caller passes; nothing here begins, commits or
rolls back, so the row is committed exactly when the caller's business rows are. The
database libraries are imported only to recognise a SQLAlchemy connection, never required.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from orbit_sdk._models import RetryPolicy, SideEffect, TaskRequest
from orbit_sdk.outbox._dialects import Dialect, dialect_named, pyformat, queries_for, time_param
from orbit_sdk.outbox._errors import OutboxError
from orbit_sdk.outbox._ids import new_id

__all__ = [
    "KIND_SIGNAL",
    "KIND_TASK",
    "KIND_WORKFLOW",
    "Row",
    "signal",
    "signal_row",
    "start_workflow",
    "submit",
    "task_row",
    "workflow_row",
    "write_row",
]

KIND_TASK = "task"
KIND_WORKFLOW = "workflow"
KIND_SIGNAL = "signal"

_Execute = Callable[[str, dict[str, Any]], None]


def submit(
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
    """Write a task submission into ``orbit_outbox`` on ``conn``, in its current transaction.

    ``conn`` is a SQLAlchemy ``Connection`` or ``Session``, Django's ``connection`` (inside
    ``transaction.atomic()``), or a psycopg 3, PyMySQL or sqlite3 connection; it is never
    committed here. The arguments are those of
    :meth:`orbit_sdk.Client.submit`; ``delay_ms`` counts from now (it is stored as ``run_at``),
    not from when the relay delivers the row. The relay submits the task with
    ``idempotency_key``, or the row's id when none is given, so a row delivered twice makes one
    task. Rows of one ``aggregate_key`` are delivered one after the other, in id order.
    Answers the row's id.
    """
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
    write_row(conn, row)
    return row.id


def request_options(request: TaskRequest) -> dict[str, Any]:
    """The keyword arguments of :func:`submit` that ``request`` holds (its queue, type and
    params aside)."""
    return {
        "idempotency_key": request.idempotency_key,
        "priority": request.priority,
        "run_at": request.run_at,
        "delay_ms": request.delay_ms,
        "concurrency_key": request.concurrency_key,
        "fairness_key": request.fairness_key,
        "side_effect": request.side_effect,
        "handler_version": request.handler_version,
        "retry": request.retry,
        "timeout_ms": request.timeout_ms,
        "labels": request.labels,
    }


def submit_request(
    conn: Any,
    request: TaskRequest,
    *,
    aggregate_key: str | None = None,
    traceparent: str | None = None,
) -> str:
    """:func:`submit` of a whole :class:`~orbit_sdk.TaskRequest`: a typed task reference's
    ``ref.request(params, **overrides)``, which carries the params checked against its model,
    its declared defaults and its handler version. Answers the row's id."""
    return submit(
        conn, request.queue, request.type, request.params, aggregate_key=aggregate_key,
        traceparent=traceparent, **request_options(request),
    )  # fmt: skip


def start_workflow(
    conn: Any,
    definition: str,
    input: Any = None,
    *,
    version: str | None = None,
    idempotency_key: str | None = None,
    aggregate_key: str | None = None,
) -> str:
    """Write a workflow start into ``orbit_outbox`` on ``conn``; see :func:`submit`. The
    arguments are those of :meth:`orbit_sdk.Client.start_workflow`. Answers the row's id."""
    row = workflow_row(definition, input, version, idempotency_key, aggregate_key)
    write_row(conn, row)
    return row.id


def signal(
    conn: Any,
    workflow_id: str,
    name: str,
    payload: Any = None,
    *,
    idempotency_key: str | None = None,
    aggregate_key: str | None = None,
) -> str:
    """Write a workflow signal into ``orbit_outbox`` on ``conn``; see :func:`submit`. The
    arguments are those of :meth:`orbit_sdk.Client.signal_workflow`. Answers the row's id."""
    row = signal_row(workflow_id, name, payload, idempotency_key, aggregate_key)
    write_row(conn, row)
    return row.id


@dataclass(frozen=True, slots=True)
class Row:
    """One outbox row, validated and encoded, not yet written."""

    id: str
    kind: str
    payload: str
    aggregate_key: str | None
    now: datetime

    def insert(self, dialect: Dialect) -> tuple[str, dict[str, Any]]:
        """The ``INSERT`` of this row and its parameters (``:name`` placeholders)."""
        params = {
            "id": self.id,
            "kind": self.kind,
            "payload": self.payload,
            "aggregate_key": self.aggregate_key,
            "now": time_param(dialect, self.now),
        }
        return queries_for(dialect).insert, params


def task_row(
    queue: str,
    type: str,
    params: Any,
    *,
    idempotency_key: str | None,
    aggregate_key: str | None,
    priority: int | None,
    run_at: datetime | str | None,
    delay_ms: int | None,
    concurrency_key: str | None,
    fairness_key: str | None,
    side_effect: SideEffect | None,
    handler_version: str | None,
    retry: RetryPolicy | None,
    timeout_ms: int | None,
    labels: Mapping[str, str] | None,
    traceparent: str | None,
) -> Row:
    now = datetime.now(UTC)
    if delay_ms is not None:
        if run_at is not None:
            raise OutboxError("invalid_request", "give run_at or delay_ms, not both")
        if delay_ms < 0:
            raise OutboxError("invalid_request", f"delay_ms must not be negative: {delay_ms}")
        run_at = now + timedelta(milliseconds=delay_ms)
    row_id = new_id()
    try:
        request = TaskRequest(
            queue=queue,
            type=type,
            params=params,
            priority=priority,
            run_at=run_at,
            idempotency_key=idempotency_key or row_id,
            concurrency_key=concurrency_key,
            fairness_key=fairness_key,
            side_effect=side_effect,
            handler_version=handler_version,
            retry=retry,
            timeout_ms=timeout_ms,
            labels=None if labels is None else dict(labels),
        )
    except ValueError as exc:
        raise OutboxError("invalid_request", str(exc)) from None
    if not queue or not type:
        raise OutboxError("invalid_request", "queue and type must not be empty")
    body: dict[str, Any] = {"request": request}
    if traceparent is not None:
        body["traceparent"] = traceparent
    return _row(row_id, KIND_TASK, body, aggregate_key, now)


def workflow_row(
    definition: str,
    input: Any,
    version: str | None,
    idempotency_key: str | None,
    aggregate_key: str | None,
) -> Row:
    if not definition:
        raise OutboxError("invalid_request", "definition must not be empty")
    row_id = new_id()
    body: dict[str, Any] = {
        "definition": definition,
        "input": input,
        "version": version,
        "idempotency_key": idempotency_key or row_id,
    }
    return _row(row_id, KIND_WORKFLOW, body, aggregate_key, datetime.now(UTC))


def signal_row(
    workflow_id: str,
    name: str,
    payload: Any,
    idempotency_key: str | None,
    aggregate_key: str | None,
) -> Row:
    if not workflow_id or not name:
        raise OutboxError("invalid_request", "workflow_id and name must not be empty")
    row_id = new_id()
    body: dict[str, Any] = {
        "workflow_id": workflow_id,
        "name": name,
        "payload": payload,
        "idempotency_key": idempotency_key or row_id,
    }
    return _row(row_id, KIND_SIGNAL, body, aggregate_key, datetime.now(UTC))


def _row(
    row_id: str, kind: str, body: dict[str, Any], aggregate_key: str | None, now: datetime
) -> Row:
    try:
        payload = msgspec.json.encode(body).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise OutboxError("invalid_request", f"the {kind} is not JSON: {exc}") from None
    if aggregate_key is not None and not 0 < len(aggregate_key) <= 255:
        raise OutboxError("invalid_request", "aggregate_key must hold 1 to 255 characters")
    return Row(row_id, kind, payload, aggregate_key, now)


def write_row(conn: Any, row: Row) -> None:
    """Write ``row`` on a synchronous connection, in its current transaction."""
    dialect, execute = _executor(conn)
    execute(*row.insert(dialect))


def _executor(conn: Any) -> tuple[Dialect, _Execute]:
    """The dialect of ``conn`` and how to run one ``:name`` statement on it."""
    module = type(conn).__module__.split(".", 1)[0]
    if module == "sqlalchemy":
        return _sqlalchemy_executor(conn)
    if module == "django":
        return _executor(_django_connection(conn))
    if module == "sqlite3":
        return "sqlite", lambda sql, params: _dbapi_execute(conn, sql, params)
    if module in ("psycopg", "psycopg2"):
        return "postgresql", lambda sql, params: _dbapi_execute(conn, pyformat(sql), params)
    if module in ("pymysql", "MySQLdb"):
        return "mysql", lambda sql, params: _dbapi_execute(conn, pyformat(sql), params)
    raise OutboxError(
        "unsupported_connection",
        f"cannot write outbox rows on a {type(conn).__module__}.{type(conn).__qualname__}: "
        "pass a SQLAlchemy Connection or Session, Django's connection, or a psycopg, PyMySQL "
        "or sqlite3 connection",
    )


def _django_connection(conn: Any) -> Any:
    """The DB-API connection under Django's ``connection`` (or ``connections[alias]``), which
    must be in a transaction: in autocommit mode the row would commit on its own, before the
    business rows and whatever becomes of them."""
    if not hasattr(conn, "get_autocommit") or not hasattr(conn, "ensure_connection"):
        raise OutboxError(
            "unsupported_connection",
            f"cannot write outbox rows on a {type(conn).__qualname__}: pass Django's "
            "connection (django.db.connection or connections[alias])",
        )
    if conn.get_autocommit():  # opens the connection if it is not yet open
        raise OutboxError(
            "no_transaction",
            "Django's connection is in autocommit mode: call outbox.submit inside "
            "transaction.atomic() (or with ATOMIC_REQUESTS), so that the row commits with "
            "the business rows",
        )
    return conn.connection


def _dbapi_execute(conn: Any, sql: str, params: dict[str, Any]) -> None:
    cursor = conn.cursor()
    try:
        cursor.execute(sql, params)
    finally:
        cursor.close()


def _sqlalchemy_executor(conn: Any) -> tuple[Dialect, _Execute]:
    from sqlalchemy import text
    from sqlalchemy.engine import Connection

    if isinstance(conn, Connection):
        connection = conn
    elif callable(getattr(conn, "connection", None)) and hasattr(conn, "get_bind"):
        # A Session (or scoped_session): its connection in its current transaction.
        connection = conn.connection()
    else:
        raise OutboxError(
            "unsupported_connection",
            f"cannot write outbox rows on a {type(conn).__qualname__}: pass a SQLAlchemy "
            "Connection or Session (for AsyncSession or AsyncConnection, use submit_async)",
        )
    dialect = dialect_named(connection.dialect.name)

    def execute(sql: str, params: dict[str, Any]) -> None:
        connection.execute(text(sql), params)

    return dialect, execute
