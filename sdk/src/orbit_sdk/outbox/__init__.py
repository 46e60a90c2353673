"""The transactional outbox: submit Orbit work in the business database's own transaction.

``submit`` (or ``submit_request``, for a typed task reference's ``ref.request(params)``),
``start_workflow`` and ``signal`` write one row into the ``orbit_outbox`` table on
the caller's connection (SQLAlchemy ``Connection``/``Session``, Django's ``connection``, or a
psycopg, PyMySQL or sqlite3 connection) and never commit: the row exists exactly when the
business rows do.
``submit_async``, ``start_workflow_async`` and ``signal_async`` do the same on asynchronous
connections (SQLAlchemy ``AsyncSession``/``AsyncConnection``, psycopg, asyncmy).
``OutboxRelay`` (or the ``orbit-outbox-relay`` command) delivers committed rows to Orbit, each
with its idempotency key, so a row delivered twice still makes one task. ``ddl(dialect)``
gives the table's DDL for PostgreSQL, MySQL/MariaDB and SQLite. See ``docs/outbox.md``.
"""

from orbit_sdk.outbox._dialects import DIALECTS, ddl, ddl_statements
from orbit_sdk.outbox._errors import OutboxError
from orbit_sdk.outbox._relay import OutboxRelay, RelayStats
from orbit_sdk.outbox._write import signal, start_workflow, submit, submit_request
from orbit_sdk.outbox._write_async import (
    signal_async,
    start_workflow_async,
    submit_async,
    submit_request_async,
)

__all__ = [
    "DIALECTS",
    "OutboxError",
    "OutboxRelay",
    "RelayStats",
    "ddl",
    "ddl_statements",
    "signal",
    "signal_async",
    "start_workflow",
    "start_workflow_async",
    "submit",
    "submit_async",
    "submit_request",
    "submit_request_async",
]
