"""The outbox's pure parts: row ids, backoff, placeholders, DDL splitting, failure verdicts.
Its behaviour on real databases is tested in server/tests/outbox/."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

import pytest

from orbit_sdk import (
    AuthenticationError,
    IdempotencyConflictError,
    NotFoundError,
    OrbitError,
    ProtocolError,
    RateLimitedError,
    RetryPolicy,
    StateConflictError,
    TransportError,
    UnavailableError,
    task_ref,
)
from orbit_sdk.outbox import OutboxError, ddl_statements, submit_request
from orbit_sdk.outbox._dialects import dialect_named, pyformat
from orbit_sdk.outbox._ids import new_id
from orbit_sdk.outbox._relay import _passing, backoff_delay


def test_ids_sort_by_time_and_increase_within_one_millisecond() -> None:
    same_ms = [new_id(1_700_000_000_000) for _ in range(1000)]
    assert same_ms == sorted(same_ms) and len(set(same_ms)) == 1000
    assert new_id(1_700_000_000_001 + 10**6) > same_ms[-1]
    assert all(len(i) == 26 and i.isalnum() and i.upper() == i for i in same_ms)


def test_backoff_doubles_up_to_the_maximum_and_jitter_takes_off_at_most_half() -> None:
    delays = [backoff_delay(n, initial=1, maximum=10, rand=lambda: 1.0) for n in range(1, 7)]
    assert delays == [1, 2, 4, 8, 10, 10]
    assert backoff_delay(3, initial=1, maximum=10, rand=lambda: 0.0) == 2


def test_named_placeholders_become_pyformat_and_nothing_else_changes() -> None:
    sql = "SELECT a FROM t WHERE b = :b AND c <= :now AND d = 'x'"
    assert pyformat(sql) == "SELECT a FROM t WHERE b = %(b)s AND c <= %(now)s AND d = 'x'"


@pytest.mark.parametrize("dialect", ["postgresql", "mysql", "sqlite"])
def test_the_ddl_splits_into_statements_without_comments(dialect: str) -> None:
    statements = ddl_statements(dialect)
    assert statements[0].startswith("CREATE TABLE IF NOT EXISTS orbit_outbox")
    assert not any("--" in statement for statement in statements)


def test_dialects_have_aliases_and_unknown_ones_a_code() -> None:
    assert dialect_named("postgresql+psycopg") == "postgresql"
    assert dialect_named("mariadb") == dialect_named("mysql+pymysql") == "mysql"
    with pytest.raises(OutboxError) as refused:
        dialect_named("oracle")
    assert refused.value.code == "unsupported_database"


@pytest.mark.parametrize(
    ("error", "passing"),
    [
        (TransportError("connection refused"), True),
        (UnavailableError("draining", status=503), True),
        (RateLimitedError("slow down", status=429), True),
        (OrbitError("bad gateway", status=502), True),
        (AuthenticationError("who are you", status=401), True),
        (ProtocolError("timeout_ms too large", status=422), False),
        (NotFoundError("no such definition", status=404), False),
        (IdempotencyConflictError("key reused", status=409), False),
        (StateConflictError("workflow finished", status=409), False),
        (KeyError("request"), False),
        (OSError("disk"), True),
    ],
)
def test_failures_that_may_pass_are_retried_and_refusals_parked(
    error: BaseException, passing: bool
) -> None:
    assert _passing(error) is passing


@dataclass
class Charge:
    order: str
    cents: int


def test_a_typed_request_keeps_its_defaults_and_version_in_the_row() -> None:
    """``submit_request`` writes what a typed reference's ``request`` carries: the params
    encoded by its model, the declared defaults, the handler version; the row's id is the
    idempotency key unless the request names one."""
    charge = task_ref(queue="billing", type="charge", params=Charge, result=dict, version="2",
                      retry=RetryPolicy(max_attempts=7), timeout_ms=5_000)  # fmt: skip
    conn = sqlite3.connect(":memory:")
    for statement in ddl_statements("sqlite"):
        conn.execute(statement)
    row_id = submit_request(conn, charge.request(Charge("A-1", 990), priority=3),
                            aggregate_key="order:A-1")  # fmt: skip
    payload, key = conn.execute(
        "SELECT payload, aggregate_key FROM orbit_outbox WHERE id = ?", (row_id,)
    ).fetchone()
    request = json.loads(payload)["request"]
    assert key == "order:A-1"
    assert request["params"] == {"order": "A-1", "cents": 990}
    assert (request["queue"], request["type"], request["handler_version"]) == (
        "billing", "charge", "2"
    )  # fmt: skip
    assert request["retry"]["max_attempts"] == 7 and request["timeout_ms"] == 5_000
    assert request["priority"] == 3 and request["idempotency_key"] == row_id
