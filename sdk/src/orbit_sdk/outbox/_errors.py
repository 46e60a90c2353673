"""The outbox's own error: bad input or an unsupported database, with a stable code."""

from __future__ import annotations

__all__ = ["OutboxError"]


class OutboxError(ValueError):
    """Raised before anything is written or sent. ``code`` is stable:

    - ``unsupported_connection``: not a SQLAlchemy ``Connection``/``Session`` nor a psycopg,
      PyMySQL or sqlite3 connection;
    - ``unsupported_database``: a database other than PostgreSQL, MySQL/MariaDB or SQLite;
    - ``invalid_request``: arguments Orbit would refuse, or params that are not JSON.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"
