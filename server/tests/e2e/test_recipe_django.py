"""The Django recipe (docs/recipes/django.md) end to end: ``orbit dev``, the example's worker
under ``orbit-worker``, its ``relay_outbox`` management command, and the project itself
through Django's test ``Client``, on a SQLite business database migrated by its migrations.
Also what the outbox does with Django's connection outside a transaction."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orbit_sdk import Client, outbox
from tests.support.processes import OrbitProcess, clean_env

PROJECT = Path(__file__).resolve().parents[3] / "sdk" / "examples" / "django_shop"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    data = tmp_path_factory.mktemp("orbit-dev") / "data"
    server = OrbitProcess(["dev", "--data-dir", str(data), "--port", "0"])
    try:
        announced = server.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        yield {"ORBIT_URL": announced["ORBIT_URL"], "ORBIT_API_KEY": announced["ORBIT_API_KEY"]}
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def env(dev: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The project's environment: its database, and Orbit's URLs (a first one where no Orbit
    listens: the clients fail over to the next) and key."""
    database = tmp_path_factory.mktemp("shop") / "shop.sqlite3"
    return {
        "DATABASE_URL": f"sqlite:///{database}",
        "ORBIT_URL": f"http://127.0.0.1:9,{dev['ORBIT_URL']}",
        "ORBIT_API_KEY": dev["ORBIT_API_KEY"],
        "DJANGO_SETTINGS_MODULE": "shop_site.settings",
        "DJANGO_ALLOWED_HOSTS": "testserver",
    }


@pytest.fixture(scope="module")
def django_project(env: dict[str, str]) -> Iterator[Path]:
    """The project set up in this process, its database migrated; answers the database."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    sys.path.insert(0, str(PROJECT))
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        yield Path(env["DATABASE_URL"].removeprefix("sqlite:///"))
    finally:
        from django.db import connections
        from orders.orbit import orbit_client

        if orbit_client.cache_info().currsize:
            orbit_client().close()
        connections.close_all()
        sys.path.remove(str(PROJECT))
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def worker(env: dict[str, str]) -> Iterator[OrbitProcess]:
    """``orbit-worker orders.worker``, started from the project's directory, connected."""
    process = OrbitProcess.command(
        [str(BIN / "orbit-worker"), "orders.worker"], env={**env, "PYTHONPATH": str(PROJECT)}
    )
    try:
        deadline = time.monotonic() + 30
        while "connected to node" not in process.stderr:
            assert process.proc.poll() is None, process.stderr
            assert time.monotonic() < deadline, process.stderr
            time.sleep(0.02)
        yield process
    finally:
        assert process.stop() == 0, process.stderr


def relay_once(env: dict[str, str]) -> str:
    """``python manage.py relay_outbox --once``; answers its output."""
    done = subprocess.run(
        [sys.executable, "manage.py", "relay_outbox", "--once"],
        cwd=PROJECT,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def post_order(order: dict[str, Any]) -> Any:
    from django.test import Client as DjangoClient

    return DjangoClient().post("/orders", json.dumps(order), content_type="application/json")


def wait_until_confirmed(order_id: str) -> dict[str, Any]:
    """``GET /orders/ID`` until its confirmation task has settled (the worker is a process of
    its own: there is nothing to wait on but the answers)."""
    from django.test import Client as DjangoClient

    deadline = time.monotonic() + 15
    while True:
        response = DjangoClient().get(f"/orders/{order_id}")
        assert response.status_code == 200, response.content
        order: dict[str, Any] = response.json()
        if order["confirmation"].get("state") in ("succeeded", "failed", "cancelled"):
            return order
        assert time.monotonic() < deadline, order
        time.sleep(0.05)


def tasks_of(dev: dict[str, str], order_id: str) -> list[Any]:
    with Client(dev["ORBIT_URL"], dev["ORBIT_API_KEY"]) as orbit:
        found = orbit.iter_tasks(queue="shop", type="confirm-order")
        return [task for task in found if task.params["order_id"] == order_id]


def outbox_rows(db: Path, order_id: str) -> list[tuple[str, str | None]]:
    with sqlite3.connect(db) as conn:
        return list(
            conn.execute(
                "SELECT id, result FROM orbit_outbox WHERE payload LIKE ? ORDER BY id",
                [f'%"order_id":"{order_id}"%'],
            )
        )


def test_an_order_is_confirmed_by_the_worker_through_the_relay_command(
    django_project: Path, dev: dict[str, str], env: dict[str, str], worker: OrbitProcess
) -> None:
    created = post_order({"id": "D-1", "email": "ada@example.com", "total_cents": 1250})
    assert created.status_code == 201, created.content
    [(row_id, result)] = outbox_rows(django_project, "D-1")
    assert result is None  # committed with the order, not delivered yet

    relay = OrbitProcess.command([sys.executable, str(PROJECT / "manage.py"), "relay_outbox"], env)
    try:
        shown = wait_until_confirmed("D-1")
    finally:
        assert relay.stop() == 0, relay.stderr  # SIGTERM: it stops after the pass under way
    [task] = tasks_of(dev, "D-1")
    assert shown == {
        "id": "D-1",
        "email": "ada@example.com",
        "total_cents": 1250,
        "confirmation": {
            "delivery": "delivered",
            "task_id": task.id,
            "state": "succeeded",
            "result": {"message_id": f"msg-{task.id}"},
            "error": None,
        },
    }
    assert task.idempotency_key == row_id
    assert task.retry is not None and task.retry.max_attempts == 5  # declared with the task
    assert "confirming order D-1 to ada@example.com" in worker.stderr


def test_a_duplicate_order_leaves_no_outbox_row_and_no_task(
    django_project: Path, dev: dict[str, str], env: dict[str, str], worker: OrbitProcess
) -> None:
    order = {"id": "D-2", "email": "bob@example.com", "total_cents": 900}
    assert post_order(order).status_code == 201
    again = post_order({**order, "email": "eve@example.com"})
    assert again.status_code == 409, again.content
    assert len(outbox_rows(django_project, "D-2")) == 1  # the second one rolled back
    assert post_order({"id": "D-2b", "email": "x@example.com"}).status_code == 400
    assert relay_once(env).strip() == "1 row(s) claimed"
    shown = wait_until_confirmed("D-2")
    assert (shown["email"], shown["confirmation"]["state"]) == ("bob@example.com", "succeeded")
    [task] = tasks_of(dev, "D-2")
    assert task.params["email"] == "bob@example.com"


def test_the_outbox_writes_on_djangos_connection_only_in_a_transaction(
    django_project: Path,
) -> None:
    from django.db import connection, connections, transaction

    with pytest.raises(outbox.OutboxError) as refused:
        outbox.submit(connection, "shop", "in-autocommit", {"order_id": "D-3"})
    assert refused.value.code == "no_transaction"
    with transaction.atomic():
        outbox.submit(connections["default"], "shop", "rolled-back", {"order_id": "D-3"})
        transaction.set_rollback(True)
    assert outbox_rows(django_project, "D-3") == []
    with transaction.atomic():
        row_id = outbox.submit(connection, "shop", "committed", {"order_id": "D-3"})
    assert outbox_rows(django_project, "D-3") == [(row_id, None)]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM orbit_outbox WHERE id = %s", [row_id])


def test_the_recipes_handler_test_passes() -> None:
    """``orders/test_worker.py``, run by a pytest of its own with orbit-sdk's plugin (which
    starts its own ``orbit dev --testing``)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "orders/test_worker.py"],
        cwd=PROJECT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_every_python_block_of_the_guide_quotes_the_example() -> None:
    # The quotes are checked against their files by tests/docs/test_docs_in_step.py.
    guide = (PROJECT.parents[2] / "docs" / "recipes" / "django.md").read_text()
    quoted = guide.count("<!-- quote: sdk/examples/django_shop/")
    assert guide.count("```python\n") == quoted >= 6
