"""The shop's tables, and ``orbit_outbox`` beside them in the same database."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from orbit_sdk import outbox


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    email: Mapped[str] = mapped_column(String(200))
    total_cents: Mapped[int]
    outbox_id: Mapped[str] = mapped_column(String(26))  # the outbox row of its confirmation
    task_id: Mapped[str | None] = mapped_column(String(64))  # Orbit's task, once delivered


async def create_tables(engine: AsyncEngine) -> None:
    """The app's tables and the outbox's (in production: your migrations, see the guide)."""
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
        for statement in outbox.ddl_statements(engine.dialect.name):
            await conn.exec_driver_sql(statement)
