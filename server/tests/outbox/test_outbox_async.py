"""The asynchronous writes on real databases: psycopg's ``AsyncConnection`` on PostgreSQL,
asyncmy on MariaDB, and SQLAlchemy's ``AsyncSession`` and ``AsyncConnection`` on each."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import asyncmy
import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from orbit_sdk.outbox import OutboxError, signal_async, start_workflow_async, submit_async
from tests.outbox.conftest import rows

Transaction = Callable[[str], Any]


@asynccontextmanager
async def driver_transaction(url: str) -> AsyncIterator[Any]:
    """The driver's own async connection in a transaction: committed, or rolled back on error."""
    if url.startswith("postgresql"):
        conn: Any = await psycopg.AsyncConnection.connect(url)
    else:
        parts = urlsplit(url)
        conn = await asyncmy.connect(
            host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
            password=parts.password or "", database=parts.path.lstrip("/"),
        )  # fmt: skip
    try:
        yield conn
        await conn.commit()
    except BaseException:
        await conn.rollback()
        raise
    finally:
        closed = conn.close()
        if isinstance(closed, Awaitable):
            await closed


@asynccontextmanager
async def session_transaction(url: str) -> AsyncIterator[Any]:
    scheme = urlsplit(url).scheme
    driver = "postgresql+psycopg" if scheme.startswith("postgres") else "mysql+asyncmy"
    engine = create_async_engine(driver + url[len(scheme) :])
    try:
        async with AsyncSession(engine) as session, session.begin():
            yield session
    finally:
        await engine.dispose()


@asynccontextmanager
async def connection_transaction(url: str) -> AsyncIterator[Any]:
    scheme = urlsplit(url).scheme
    driver = "postgresql+psycopg" if scheme.startswith("postgres") else "mysql+asyncmy"
    engine = create_async_engine(driver + url[len(scheme) :])
    try:
        async with engine.begin() as conn:
            yield conn
    finally:
        await engine.dispose()


class Rollback(Exception):
    pass


@pytest.mark.parametrize("business_url", ["postgresql", "mariadb"], indirect=True)
@pytest.mark.parametrize(
    "transaction", [driver_transaction, session_transaction, connection_transaction]
)
async def test_async_writes_commit_and_roll_back_with_the_transaction(
    business_url: str, transaction: Transaction
) -> None:
    async with transaction(business_url) as conn:
        task = await submit_async(conn, "emails", "welcome", {"user": 1}, aggregate_key="u-1")
        flow = await start_workflow_async(conn, "onboarding", {"user": 1})
        sent = await signal_async(conn, "wf-1", "paid", {"amount": 3})
    with contextlib.suppress(Rollback):
        async with transaction(business_url) as conn:
            await submit_async(conn, "emails", "welcome", {"user": 2})
            raise Rollback
    found = rows(business_url)
    assert [row["id"] for row in found] == [task, flow, sent]
    assert found[0]["aggregate_key"] == "u-1"


async def test_an_unknown_async_connection_is_refused_with_a_code() -> None:
    with pytest.raises(OutboxError) as refused:
        await submit_async(object(), "emails", "welcome")
    assert refused.value.code == "unsupported_connection"
