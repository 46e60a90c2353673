"""The FastAPI recipe (docs/recipes/fastapi.md) end to end: ``orbit dev``, the example's worker
under ``orbit-worker`` and the relay (inside the app, or as ``orbit-outbox-relay``), and the
app itself through FastAPI's ``TestClient``, on a SQLite business database."""

from __future__ import annotations

import importlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orbit_sdk import Client
from tests.support.processes import OrbitProcess, clean_env

EXAMPLES = Path(__file__).resolve().parents[3] / "sdk" / "examples"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def shop() -> Iterator[ModuleType]:
    """``fastapi_shop.app``, imported as a project that has sdk/examples as its root would."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module("fastapi_shop.app")
    finally:
        sys.path.remove(str(EXAMPLES))
        for name in [n for n in sys.modules if n.split(".")[0] == "fastapi_shop"]:
            del sys.modules[name]


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
def worker(dev: dict[str, str]) -> Iterator[OrbitProcess]:
    """``orbit-worker fastapi_shop.worker``, started from the project's root, connected."""
    process = OrbitProcess.command(
        [str(BIN / "orbit-worker"), "fastapi_shop.worker"], env={**dev, "PYTHONPATH": str(EXAMPLES)}
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


def settings(shop: ModuleType, dev: dict[str, str], db: Path, *, embedded: bool) -> Any:
    return shop.Settings(
        database_url=f"sqlite+aiosqlite:///{db}",
        # A first URL where no Orbit listens: the app's client fails over to the next one.
        orbit_url=f"http://127.0.0.1:9,{dev['ORBIT_URL']}",
        orbit_api_key=dev["ORBIT_API_KEY"],
        embedded_relay=embedded,
    )


def wait_until_confirmed(client: TestClient, order_id: str) -> dict[str, Any]:
    """``GET /orders/ID`` until its confirmation task has settled (the worker is a process of
    its own: there is nothing to wait on but the answers)."""
    deadline = time.monotonic() + 15
    while True:
        response = client.get(f"/orders/{order_id}")
        assert response.status_code == 200, response.text
        order: dict[str, Any] = response.json()
        if order["confirmation"]["state"] in ("succeeded", "failed", "cancelled"):
            return order
        assert time.monotonic() < deadline, order
        time.sleep(0.05)


def tasks_of(dev: dict[str, str], order_id: str) -> list[Any]:
    with Client(dev["ORBIT_URL"], dev["ORBIT_API_KEY"]) as orbit:
        found = orbit.iter_tasks(queue="shop", type="confirm-order")
        return [task for task in found if task.params["order_id"] == order_id]


def outbox_rows(db: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT id, result FROM orbit_outbox ORDER BY id"))


def test_an_order_is_confirmed_by_the_worker_through_the_embedded_relay(
    shop: ModuleType, dev: dict[str, str], worker: OrbitProcess, tmp_path: Path
) -> None:
    app = shop.create_app(settings(shop, dev, tmp_path / "shop.db", embedded=True))
    with TestClient(app) as client:
        order = {"id": "A-1", "email": "ada@example.com", "total_cents": 1250}
        created = client.post("/orders", json=order)
        assert created.status_code == 201, created.text
        assert created.json()["confirmation"] == {
            "delivery": "pending", "task_id": None, "state": None, "result": None, "error": None,
        }  # fmt: skip
        shown = wait_until_confirmed(client, "A-1")
    [task] = tasks_of(dev, "A-1")
    assert shown["confirmation"] == {
        "delivery": "delivered",
        "task_id": task.id,
        "state": "succeeded",
        "result": {"message_id": f"msg-{task.id}"},
        "error": None,
    }
    assert task.params == {"order_id": "A-1", "email": "ada@example.com", "total_cents": 1250}
    assert task.retry is not None and task.retry.max_attempts == 5  # declared with the task
    assert "confirming order A-1 to ada@example.com" in worker.stderr
    [(row_id, result)] = outbox_rows(tmp_path / "shop.db")
    assert (task.idempotency_key, task.id) == (row_id, result)


def test_a_duplicate_order_rolls_back_its_outbox_row_and_the_relay_command_delivers(
    shop: ModuleType, dev: dict[str, str], worker: OrbitProcess, tmp_path: Path
) -> None:
    db = tmp_path / "shop.db"
    app = shop.create_app(settings(shop, dev, db, embedded=False))
    with TestClient(app) as client:
        order = {"id": "B-1", "email": "bob@example.com", "total_cents": 900}
        assert client.post("/orders", json=order).status_code == 201
        again = client.post("/orders", json={**order, "email": "eve@example.com"})
        assert again.status_code == 409, again.text
        [(row_id, result)] = outbox_rows(db)  # the second order's row rolled back with it
        assert result is None  # not delivered: no relay runs
        assert client.get("/orders/B-1").json()["confirmation"]["delivery"] == "pending"

        relay = subprocess.run(
            [str(BIN / "orbit-outbox-relay"), "--database-url", f"sqlite:///{db}", "--once"],
            env=clean_env(dev),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert relay.returncode == 0, relay.stderr
        assert "1 row(s) claimed" in relay.stderr
        shown = wait_until_confirmed(client, "B-1")
        assert client.get("/orders/B-9").status_code == 404
    assert shown["email"] == "bob@example.com"
    assert shown["confirmation"]["state"] == "succeeded"
    [task] = tasks_of(dev, "B-1")  # one task: none for the order that rolled back
    assert task.idempotency_key == row_id


def test_the_settings_come_from_the_environment(
    shop: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://shop@db.internal/shop")
    monkeypatch.setenv("ORBIT_URL", "http://orbit-1:7070,http://orbit-2:7070")
    monkeypatch.setenv("ORBIT_API_KEY", "k")
    monkeypatch.setenv("OUTBOX_RELAY", "external")
    settings = shop.Settings.from_env()
    assert settings == shop.Settings(
        database_url="postgresql+psycopg://shop@db.internal/shop",
        orbit_url="http://orbit-1:7070,http://orbit-2:7070",
        orbit_api_key="k",
        embedded_relay=False,
    )
    monkeypatch.setenv("OUTBOX_RELAY", "embeded")
    with pytest.raises(ValueError, match="OUTBOX_RELAY must be 'embedded' or 'external'"):
        shop.Settings.from_env()


def test_the_recipes_handler_tests_pass() -> None:
    """``fastapi_shop/test_worker.py``, run by a pytest of its own with orbit-sdk's plugin
    (which starts its own ``orbit dev --testing``)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "fastapi_shop"],
        cwd=EXAMPLES,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_every_python_block_of_the_guide_quotes_the_example() -> None:
    # The quotes are checked against their files by tests/docs/test_docs_in_step.py.
    guide = (EXAMPLES.parents[1] / "docs" / "recipes" / "fastapi.md").read_text()
    quoted = guide.count("<!-- quote: sdk/examples/fastapi_shop/")
    assert guide.count("```python\n") == quoted >= 6
