"""Orders whose confirmation email is submitted through the transactional outbox.

``place_order`` writes the order and the outbox row in one SQLAlchemy transaction: both are
committed, or neither is. ``relay_outbox`` delivers committed rows to Orbit (``ORBIT_URL`` and
``ORBIT_API_KEY`` set, the key with the ``submitter`` role)::

    python sdk/examples/outbox_orders.py sqlite:///orders.db    # place one order, deliver it
"""

from __future__ import annotations

import asyncio
import sys

from sqlalchemy import Engine, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from orbit_sdk import AsyncClient, outbox


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    email: Mapped[str] = mapped_column(String(200))


def create_schema(engine: Engine) -> None:
    """The application's tables and ``orbit_outbox`` (in production: your migrations)."""
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        for statement in outbox.ddl_statements(engine.dialect.name):
            conn.exec_driver_sql(statement)


def place_order(session: Session, order_id: str, email: str) -> str:
    """Add the order and its email task to the session's transaction; the caller commits."""
    session.add(Order(id=order_id, email=email))
    return outbox.submit(
        session,
        "emails",
        "order-confirmation",
        {"order": order_id, "email": email},
        aggregate_key=f"order:{order_id}",
    )


async def relay_outbox(database_url: str, client: AsyncClient | None = None) -> int:
    """Deliver every row that is due now; answers how many were claimed."""
    relay = outbox.OutboxRelay(database_url, client)
    try:
        return await relay.drain()
    finally:
        await relay.aclose()


def main(database_url: str) -> None:
    engine = create_engine(database_url)
    create_schema(engine)
    with Session(engine) as session, session.begin():
        row_id = place_order(session, "A-1001", "ada@example.com")
    print(f"order A-1001 placed, outbox row {row_id}")
    print(f"delivered {asyncio.run(relay_outbox(database_url))} row(s)")


if __name__ == "__main__":
    main(sys.argv[1])
