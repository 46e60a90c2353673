"""The shop's web app: ``POST /orders`` writes the order and its confirmation task in one
transaction, ``GET /orders/{id}`` shows the order and the state of its task in Orbit.

Serve it with ``uvicorn --factory fastapi_shop.app:create_app``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi_shop.db import Order, create_tables
from fastapi_shop.settings import Settings
from fastapi_shop.tasks import ConfirmOrder, confirm_order
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from orbit_sdk import AsyncClient, outbox


class OrderIn(BaseModel):
    id: str
    email: str
    total_cents: int


class TaskView(BaseModel):
    delivery: str  # "pending" (still in the outbox), "delivered" or "parked"
    task_id: str | None = None
    state: str | None = None  # the task's state in Orbit, once delivered
    result: Any = None
    error: str | None = None


class OrderOut(BaseModel):
    id: str
    email: str
    total_cents: int
    confirmation: TaskView


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    engine = create_async_engine(settings.database_url)
    await create_tables(engine)
    app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
    # One client for the app's lifetime: it keeps its connections, and fails over between
    # the URLs of ORBIT_URL.
    app.state.orbit = orbit = AsyncClient(urls=settings.orbit_url, api_key=settings.orbit_api_key)
    relay = outbox.OutboxRelay(settings.database_url, orbit) if settings.embedded_relay else None
    delivering = asyncio.create_task(relay.run()) if relay else None
    try:
        yield
    finally:
        if relay and delivering:
            relay.stop()
            await delivering
            await relay.aclose()
        await orbit.aclose()
        await engine.dispose()


async def session(request: Request) -> AsyncIterator[AsyncSession]:
    """The request's transaction: committed when the endpoint returns, rolled back when it
    raises. ``scope="function"`` below commits before the response is sent, so a failed
    commit is the client's error response, not a success already on its way."""
    sessions: async_sessionmaker[AsyncSession] = request.app.state.sessions
    async with sessions() as db, db.begin():
        yield db


def orbit_client(request: Request) -> AsyncClient:
    client: AsyncClient = request.app.state.orbit
    return client


Session = Annotated[AsyncSession, Depends(session, scope="function")]
Orbit = Annotated[AsyncClient, Depends(orbit_client)]


async def place_order(order: OrderIn, db: Session) -> OrderOut:
    params = ConfirmOrder(order_id=order.id, email=order.email, total_cents=order.total_cents)
    outbox_id = await outbox.submit_request_async(
        db,  # the request's transaction: the row commits with the order, or not at all
        confirm_order.request(params),  # checked against ConfirmOrder, with its defaults
        aggregate_key=f"order:{order.id}",
    )
    db.add(Order(**order.model_dump(), outbox_id=outbox_id))
    return OrderOut(**order.model_dump(), confirmation=TaskView(delivery="pending"))


async def show_order(order_id: str, db: Session, orbit: Orbit) -> OrderOut:
    order = await db.get(Order, order_id)
    if order is None:
        raise HTTPException(404, f"no order {order_id}")
    view = TaskView(delivery="pending", task_id=order.task_id)
    if view.task_id is None:
        # Orbit's task id is the outbox row's result once the relay delivered it; keep it
        # with the order, as delivered rows are deleted after the relay's retention.
        row = await db.execute(
            text("SELECT result, parked_at, last_error FROM orbit_outbox WHERE id = :id"),
            {"id": order.outbox_id},
        )
        found = row.one_or_none()
        if found is not None and found.parked_at is not None:
            view = TaskView(delivery="parked", error=found.last_error)
        elif found is not None and found.result is not None:
            order.task_id = view.task_id = found.result
    if view.task_id is not None:
        task = await orbit.get_task(view.task_id)
        error = None if task.error is None else task.error.message
        view = TaskView(
            delivery="delivered", task_id=task.id, state=task.state, result=task.result, error=error
        )
    return OrderOut(
        id=order.id, email=order.email, total_cents=order.total_cents, confirmation=view
    )


async def duplicate_order(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": "an order with this id exists"}, status_code=409)


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(title="shop", lifespan=lifespan)
    app.state.settings = settings or Settings.from_env()
    app.post("/orders", status_code=201)(place_order)
    app.get("/orders/{order_id}")(show_order)
    app.add_exception_handler(IntegrityError, duplicate_order)
    return app
