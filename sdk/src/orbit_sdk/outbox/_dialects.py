"""What differs between PostgreSQL, MySQL/MariaDB and SQLite: the DDL, the SQL of each query,
how times are bound and read, and the placeholder style.

Queries are written once with ``:name`` placeholders; :func:`pyformat` turns them into the
``%(name)s`` style of psycopg and PyMySQL (SQLite and SQLAlchemy take ``:name`` as it is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeAlias

from orbit_sdk.outbox._errors import OutboxError
from orbit_sdk.outbox._schema import DDL

__all__ = [
    "DIALECTS",
    "Dialect",
    "Queries",
    "ddl",
    "ddl_statements",
    "dialect_named",
    "pyformat",
    "queries_for",
    "time_param",
    "time_value",
]

Dialect: TypeAlias = Literal["postgresql", "mysql", "sqlite"]
DIALECTS: Final[tuple[Dialect, ...]] = ("postgresql", "mysql", "sqlite")

_ALIASES: Final[dict[str, Dialect]] = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlite": "sqlite",
    "sqlite3": "sqlite",
}

_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"
_NAMED = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def dialect_named(name: str) -> Dialect:
    """``postgresql``, ``mysql`` or ``sqlite`` for a name or URL scheme (``postgres``,
    ``mariadb``, ``mysql+pymysql`` ...); raises ``OutboxError`` (``unsupported_database``)."""
    base = name.lower().split("+", 1)[0]
    try:
        return _ALIASES[base]
    except KeyError:
        raise OutboxError(
            "unsupported_database",
            f"the outbox supports PostgreSQL, MySQL/MariaDB and SQLite, not {name!r}",
        ) from None


def ddl(dialect: str) -> str:
    """The ``CREATE TABLE`` (and indexes) of ``orbit_outbox`` for ``dialect``, as SQL text."""
    return DDL[dialect_named(dialect)]


def ddl_statements(dialect: str) -> list[str]:
    """:func:`ddl` as separate statements, without comments, to execute one by one."""
    text = "\n".join(
        line for line in ddl(dialect).splitlines() if not line.lstrip().startswith("--")
    )
    return [statement.strip() for statement in text.split(";") if statement.strip()]


def pyformat(sql: str) -> str:
    """``:name`` placeholders as ``%(name)s`` (psycopg, PyMySQL)."""
    return _NAMED.sub(r"%(\1)s", sql)


def time_param(dialect: Dialect, moment: datetime) -> Any:
    """``moment`` as the dialect's driver binds a UTC time: aware for PostgreSQL, naive UTC
    for MySQL, fixed-width text for SQLite (so that text order is time order)."""
    utc = moment.astimezone(UTC)
    if dialect == "postgresql":
        return utc
    if dialect == "mysql":
        return utc.replace(tzinfo=None)
    return utc.strftime(_SQLITE_TIME)


def time_value(raw: Any) -> datetime | None:
    """A time read back from any dialect, as an aware UTC datetime."""
    if raw is None:
        return None
    if isinstance(raw, datetime):
        return raw.replace(tzinfo=UTC) if raw.tzinfo is None else raw.astimezone(UTC)
    return datetime.fromisoformat(str(raw)).replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Queries:
    """The SQL of one dialect, ``:name`` placeholders; ``{ids}`` is a list of ``:idN``."""

    insert: str
    claim: str
    """PostgreSQL and SQLite: claim and return in one statement; MySQL: select to lock."""
    claim_mark: str | None
    """MySQL only: mark the rows the claim locked."""
    delivered: str
    retry: str
    park: str
    prune: str
    measure: str
    parked_count: str


_COLUMNS = "id, kind, payload, aggregate_key, attempts"
_DUE = (
    "o.delivered_at IS NULL AND o.parked_at IS NULL AND o.next_attempt_at <= :now"
    " AND (o.claimed_until IS NULL OR o.claimed_until <= :now)"
    # Ordering per aggregate key: a row waits while an earlier row of its key is undelivered
    # (in flight with another relay, retrying or parked).
    " AND (o.aggregate_key IS NULL OR NOT EXISTS (SELECT 1 FROM orbit_outbox e"
    " WHERE e.aggregate_key = o.aggregate_key AND e.id < o.id AND e.delivered_at IS NULL))"
)
_RELEASE = "claimed_by = NULL, claimed_until = NULL, attempts = attempts + 1"
_MINE = "WHERE id = :id AND claimed_by = :owner"


def _queries(dialect: Dialect) -> Queries:
    payload = "CAST(:payload AS jsonb)" if dialect == "postgresql" else ":payload"
    insert = (
        "INSERT INTO orbit_outbox (id, kind, payload, aggregate_key, created_at, attempts,"
        f" next_attempt_at) VALUES (:id, :kind, {payload}, :aggregate_key, :now, 0, :now)"
    )
    pick = f"SELECT o.id FROM orbit_outbox o WHERE {_DUE} ORDER BY o.id LIMIT :limit"
    if dialect == "mysql":
        claim = (
            f"SELECT o.{_COLUMNS.replace(', ', ', o.')} FROM orbit_outbox o WHERE {_DUE}"
            " ORDER BY o.id LIMIT :limit FOR UPDATE SKIP LOCKED"
        )
        claim_mark: str | None = (
            "UPDATE orbit_outbox SET claimed_by = :owner, claimed_until = :until"
            " WHERE id IN ({ids})"
        )
        prune = "DELETE FROM orbit_outbox WHERE delivered_at < :cutoff LIMIT :limit"
    else:
        lock = " FOR UPDATE SKIP LOCKED" if dialect == "postgresql" else ""
        claim = (
            "UPDATE orbit_outbox SET claimed_by = :owner, claimed_until = :until"
            f" WHERE id IN ({pick}{lock}) RETURNING {_COLUMNS}"
        )
        claim_mark = None
        prune = (
            "DELETE FROM orbit_outbox WHERE id IN (SELECT id FROM orbit_outbox"
            " WHERE delivered_at < :cutoff LIMIT :limit)"
        )
    return Queries(
        insert=insert,
        claim=claim,
        claim_mark=claim_mark,
        delivered=(
            f"UPDATE orbit_outbox SET delivered_at = :now, result = :result, last_error = NULL,"
            f" {_RELEASE} {_MINE}"
        ),
        retry=(
            f"UPDATE orbit_outbox SET next_attempt_at = :next, last_error = :error, {_RELEASE}"
            f" {_MINE}"
        ),
        park=f"UPDATE orbit_outbox SET parked_at = :now, last_error = :error, {_RELEASE} {_MINE}",
        prune=prune,
        measure=(
            "SELECT COUNT(*), SUM(CASE WHEN next_attempt_at <= :now THEN 1 ELSE 0 END),"
            " MIN(created_at) FROM orbit_outbox WHERE delivered_at IS NULL AND parked_at IS NULL"
        ),
        parked_count="SELECT COUNT(*) FROM orbit_outbox WHERE parked_at IS NOT NULL",
    )


_QUERIES: Final = {dialect: _queries(dialect) for dialect in DIALECTS}


def queries_for(dialect: Dialect) -> Queries:
    return _QUERIES[dialect]
