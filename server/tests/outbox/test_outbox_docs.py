"""The outbox guide's examples run: the orders example (its functions on every dialect, and as
a script against ``orbit dev``), the Alembic migration, the SQL an operator is told to run,
and the relay commands it shows."""

from __future__ import annotations

import importlib.util
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import httpx2
import pytest
import sqlalchemy
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.orm import Session

from orbit_sdk import Client, outbox
from orbit_sdk.outbox._cli import build_parser
from orbit_sdk.outbox._cli import main as relay_main
from tests.harness.mariadb import free_port
from tests.outbox.conftest import DIALECTS, connect, rows, sqlalchemy_engine
from tests.outbox.test_outbox_relay import MakeClient

ROOT = Path(__file__).resolve().parents[3]
GUIDE = (ROOT / "docs" / "outbox.md").read_text()


def load_example(name: str) -> ModuleType:
    """``sdk/examples/NAME.py`` imported as a module of its own."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "sdk" / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"examples.{name}"] = sys.modules[name] = module  # SQLAlchemy resolves names
    spec.loader.exec_module(module)
    return module


outbox_orders = load_example("outbox_orders")
outbox_alembic = load_example("outbox_alembic")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)\n```", GUIDE, re.S)


def test_every_python_block_of_the_guide_quotes_a_tested_example() -> None:
    # The quotes are checked against their files by tests/docs/test_docs_in_step.py.
    python = len(blocks("python"))
    quoted = len(re.findall(r"<!-- quote: sdk/examples/outbox_\w+\.py -->\n```python", GUIDE))
    assert python == quoted > 0


@pytest.mark.parametrize("business_url", DIALECTS, indirect=True)
async def test_an_order_and_its_outbox_row_commit_or_roll_back_together(
    business_url: str, orbit: MakeClient
) -> None:
    engine = sqlalchemy_engine(business_url)
    try:
        outbox_orders.create_schema(engine)
        with Session(engine) as session, session.begin():
            row_id = outbox_orders.place_order(session, "A-1001", "ada@example.com")
        # The same order again: its commit fails, so its outbox row is not committed either.
        with (
            pytest.raises(sqlalchemy.exc.IntegrityError),
            Session(engine) as session,
            session.begin(),
        ):
            outbox_orders.place_order(session, "A-1001", "ada@example.com")
        with engine.connect() as conn:
            orders = conn.execute(sqlalchemy.text("SELECT COUNT(*) FROM orders")).scalar()
    finally:
        engine.dispose()
    assert orders == 1
    assert [row["id"] for row in rows(business_url)] == [row_id]
    client = orbit()
    assert await outbox_orders.relay_outbox(business_url, client) == 1
    [task] = [task async for task in client.iter_tasks(queue="emails")]
    assert task.params == {"order": "A-1001", "email": "ada@example.com"}
    assert task.idempotency_key == row_id


def test_the_orders_example_runs_as_a_script(tmp_path: Path, orbit_dev: dict[str, str]) -> None:
    script = ROOT / "sdk" / "examples" / "outbox_orders.py"
    done = subprocess.run(
        [sys.executable, str(script), f"sqlite:///{tmp_path / 'orders.db'}"],
        env={**orbit_dev, "PATH": str(Path(sys.executable).parent)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "order A-1001 placed" in done.stdout
    assert "delivered 1 row(s)" in done.stdout


@pytest.mark.parametrize("business_url", DIALECTS, indirect=True)
def test_the_alembic_migration_drops_and_creates_the_table(business_url: str) -> None:
    engine = sqlalchemy_engine(business_url)
    try:
        with engine.begin() as conn, Operations.context(MigrationContext.configure(conn)):
            outbox_alembic.downgrade()
        assert "orbit_outbox" not in sqlalchemy.inspect(engine).get_table_names()
        with engine.begin() as conn, Operations.context(MigrationContext.configure(conn)):
            outbox_alembic.upgrade()
            outbox_alembic.upgrade()  # IF NOT EXISTS: adopting a table is a no-op
        with engine.begin() as conn:
            outbox.submit(conn, "emails", "welcome")
    finally:
        engine.dispose()
    assert len(rows(business_url)) == 1


@pytest.mark.parametrize("business_url", DIALECTS, indirect=True)
async def test_the_operator_sql_lists_requeues_and_deletes_parked_rows(
    business_url: str, orbit: MakeClient
) -> None:
    [listing, requeue, delete] = blocks("sql")
    conn = connect(business_url)
    try:
        row_id = outbox.submit(conn, "emails", "welcome", timeout_ms=10**12)
        conn.commit()
    finally:
        conn.close()
    relay = outbox.OutboxRelay(business_url, orbit())
    try:
        await relay.drain()

        def run(sql: str) -> list[tuple[object, ...]]:
            conn = connect(business_url)
            try:
                cursor = conn.cursor()
                cursor.execute(sql.replace("01JF3Z8Q6N2V4M9T7R1X5C0B2D", row_id))
                found = list(cursor.fetchall()) if cursor.description else []
                conn.commit()
                return found
            finally:
                conn.close()

        [(listed_id, kind, _key, attempts, error)] = run(listing)
        assert (listed_id, kind, attempts) == (row_id, "task", 1)
        assert "invalid_request" in str(error)
        run(requeue)
        assert await relay.run_once() == 1  # due at once, refused (and parked) again
        run(delete)
    finally:
        await relay.aclose()
    assert rows(business_url) == []


def test_the_relay_commands_of_the_guide_parse() -> None:
    commands = [
        shlex.split(line.split(">")[0])
        for block in blocks("console")
        for line in block.splitlines()
        if line.startswith("orbit-outbox-relay")
    ]
    assert len(commands) == 4
    for command in commands:
        build_parser().parse_args(command[1:])


@pytest.mark.parametrize("dialect", ["postgresql", "mysql", "sqlite"])
def test_print_ddl_prints_the_dialects_ddl(
    dialect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relay_main(["--print-ddl", dialect]) == 0
    assert capsys.readouterr().out == outbox.ddl(dialect)


def test_the_relay_command_refuses_a_batch_orbit_would_refuse() -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--batch-size", "1001"])
    assert exited.value.code == 2


def test_the_relay_command_needs_a_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORBIT_OUTBOX_DATABASE_URL", raising=False)
    assert relay_main(["--url", "http://127.0.0.1:1"]) == 2
    assert relay_main(["--database-url", "oracle://x/y", "--url", "http://127.0.0.1:1"]) == 2


def test_the_relay_command_creates_the_table_and_delivers_once(
    tmp_path: Path, orbit_dev: dict[str, str]
) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    command = [str(Path(sys.executable).with_name("orbit-outbox-relay")), "--database-url", url]

    def run(*options: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*command, *options],
            env=orbit_dev,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done

    run("--create-table", "--once")
    conn = connect(url)
    row_id = outbox.submit(conn, "cli-once", "welcome", {"user": 7})
    conn.commit()
    conn.close()
    assert "1 row(s) claimed" in run("--once").stderr
    assert rows(url)[0]["result"] is not None
    with Client(orbit_dev["ORBIT_URL"], orbit_dev["ORBIT_API_KEY"]) as client:
        [task] = list(client.iter_tasks(queue="cli-once"))
    assert task.idempotency_key == row_id and task.id == rows(url)[0]["result"]


def test_the_relay_command_serves_prometheus_metrics(
    tmp_path: Path, orbit_dev: dict[str, str]
) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    port = free_port()
    relay = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("orbit-outbox-relay")),
            *("--database-url", url, "--create-table", "--metrics-port", str(port)),
        ],
        env=orbit_dev,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                text = httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline and relay.poll() is None
                time.sleep(0.05)  # the server comes up in its own process: nothing to wait on
        assert "orbit_outbox_backlog 0.0" in text
        assert "orbit_outbox_delivered_total 0.0" in text
    finally:
        relay.send_signal(signal.SIGTERM)
        assert relay.wait(timeout=30) == 0
