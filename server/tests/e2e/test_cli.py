"""The ``orbit`` command as a new user runs it: dev, server, migrate and keys."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from orbit_server.store import open_database
from orbit_server.store.migrate import load_migrations, schema_status
from tests.support.databases import MySQLServerForTests
from tests.support.processes import OrbitProcess, run_orbit


@pytest.fixture
async def mariadb_url(mysql_server: MySQLServerForTests) -> AsyncIterator[str]:
    name = await mysql_server.create()
    try:
        yield mysql_server.url_for(name)
    finally:
        await mysql_server.drop(name)


def test_dev_announces_url_and_key_then_is_ready(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    dev = OrbitProcess(["dev", "--data-dir", str(data_dir), "--port", "0"])
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        url, key = announced["ORBIT_URL"], announced["ORBIT_API_KEY"]
        assert url.startswith("http://127.0.0.1:")
        with httpx2.Client(base_url=url) as client:
            assert client.get("/readyz").status_code == 200
            me = client.get("/v1/whoami", headers={"Authorization": f"Bearer {key}"}).json()
        assert (me["tenant"], me["environment"]) == ("default", "dev")
        assert me["roles"] == ["submitter", "worker", "operator", "admin"]
        # A second server on the same SQLite file refuses to start.
        second = run_orbit("dev", "--data-dir", str(data_dir), "--port", "0", timeout=30)
        assert second.code != 0 and "another Orbit server" in second.stderr
    finally:
        assert dev.stop() == 0
    # A restart keeps the data and the dev key.
    again = OrbitProcess(["dev", "--data-dir", str(data_dir), "--port", "0"])
    try:
        assert again.wait_for("ORBIT_API_KEY")["ORBIT_API_KEY"] == key
    finally:
        assert again.stop() == 0
    assert "ok_" not in dev.stderr + again.stderr  # the key is never logged


@pytest.mark.parametrize("dialect", ["sqlite", "mariadb"])
def test_server_refuses_an_unmigrated_database(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'orbit.db'}"
        if dialect == "sqlite"
        else request.getfixturevalue("mariadb_url")
    )
    result = run_orbit("server", "--port", "0", env={"ORBIT_DATABASE_URL": url})
    assert result.code != 0
    assert "orbit migrate" in result.stderr


def test_server_without_a_database_url_says_so() -> None:
    result = run_orbit("server", "--port", "0")
    assert result.code != 0 and "ORBIT_DATABASE_URL" in result.stderr


def test_invalid_settings_stop_the_program_naming_the_setting(tmp_path: Path) -> None:
    result = run_orbit(
        "server", "--lease-ms", "1000", env={"ORBIT_DATABASE_URL": f"sqlite:///{tmp_path}/o.db"}
    )
    assert result.code != 0 and "ORBIT_LEASE_MS" in result.stderr


async def test_two_migrate_processes_at_once_apply_the_schema_once(mariadb_url: str) -> None:
    import subprocess

    from tests.support.processes import clean_env, orbit_command

    env = clean_env({"ORBIT_DATABASE_URL": mariadb_url})
    procs = [
        subprocess.Popen(orbit_command("migrate"), env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    applied_lines = [
        line for out in outputs for line in out.splitlines() if line.startswith("applied")
    ]
    assert len(applied_lines) == len(load_migrations("mysql"))  # each migration applied once
    third = run_orbit("migrate", env={"ORBIT_DATABASE_URL": mariadb_url})
    assert third.code == 0 and "nothing to do" in third.stdout
    db = open_database(mariadb_url)
    await db.connect()
    try:
        status = await schema_status(db)
        assert status.current and len(status.applied) == len(load_migrations("mysql"))
    finally:
        await db.close()


def test_server_serves_a_migrated_mariadb_and_keys_cli_works(mariadb_url: str) -> None:
    env = {"ORBIT_DATABASE_URL": mariadb_url}
    assert run_orbit("migrate", env=env).code == 0
    created = run_orbit(
        "keys", "create", "--tenant", "acme", "--environment", "prod",
        "--role", "worker", "--role", "submitter", "--queue", "emails", env=env,
    )  # fmt: skip
    assert created.code == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("ok_")
    listed = run_orbit("keys", "list", "--output", "json", env=env)
    rows = json.loads(listed.stdout)
    assert [(r["tenant"], r["roles"], r["queues"]) for r in rows] == [
        ("acme", ["submitter", "worker"], ["emails"])
    ]
    assert key not in listed.stdout  # secrets are never listed
    server = OrbitProcess(["server", "--port", "0", "--host", "127.0.0.1"], env=env)
    try:
        url = server.wait_for("ORBIT_URL")["ORBIT_URL"]
        with httpx2.Client(base_url=url) as client:
            assert client.get("/readyz").status_code == 200
            auth = {"Authorization": f"Bearer {key}"}
            assert client.get("/v1/whoami", headers=auth).status_code == 200
            revoked = run_orbit("keys", "revoke", rows[0]["id"], env=env)
            assert revoked.code == 0
            # Revoked by another process: the server reads the key again once the one second
            # it trusts a checked key for (ORBIT_KEY_CACHE_MS) has passed.
            deadline = time.monotonic() + 10
            while client.get("/v1/whoami", headers=auth).status_code == 200:
                assert time.monotonic() < deadline, "the revoked key kept working"
                time.sleep(0.05)
            assert client.get("/v1/whoami", headers=auth).status_code == 401
    finally:
        assert server.stop() == 0
    assert key not in server.stderr


def test_keys_cli_rejects_bad_input_clearly(mariadb_url: str) -> None:
    env = {"ORBIT_DATABASE_URL": mariadb_url}
    assert run_orbit("migrate", env=env).code == 0
    bad_role = run_orbit(
        "keys", "create", "--tenant", "a", "--environment", "b", "--role", "root", env=env
    )
    assert bad_role.code != 0 and "unknown role" in bad_role.stderr
    bad_tenant = run_orbit(
        "keys", "create", "--tenant", "A B", "--environment", "b", "--role", "admin", env=env
    )
    assert bad_tenant.code != 0 and "invalid tenant" in bad_tenant.stderr
    missing = run_orbit("keys", "revoke", "nope", env=env)
    assert missing.code != 0 and "no API key" in missing.stderr


def test_the_readme_run_command_works(tmp_path: Path) -> None:
    """`scripts/dev` exactly as the README gives it (extra flags pass through to orbit dev)."""
    root = Path(__file__).resolve().parents[3]
    dev = OrbitProcess.command(
        [str(root / "scripts" / "dev"), "--data-dir", str(tmp_path / "d"), "--port", "0"]
    )
    try:
        url = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY", timeout=120)["ORBIT_URL"]
        with httpx2.Client(base_url=url) as client:
            assert client.get("/readyz").status_code == 200
    finally:
        assert dev.stop() == 0


def test_dev_ignores_a_database_url_in_the_environment(tmp_path: Path) -> None:
    env = {"ORBIT_DATABASE_URL": "mysql://nobody@127.0.0.1:1/shared"}
    dev = OrbitProcess(["dev", "--data-dir", str(tmp_path / "d"), "--port", "0"], env=env)
    try:
        url = dev.wait_for("ORBIT_URL")["ORBIT_URL"]
        with httpx2.Client(base_url=url) as client:
            assert client.get("/readyz").status_code == 200
    finally:
        assert dev.stop() == 0
    assert (tmp_path / "d" / "orbit.db").exists()


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_orbit("dev", "--data-dir", str(tmp_path), "--port", str(port))
    assert result.code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_status_reads_url_and_key_from_the_environment(tmp_path: Path) -> None:
    dev = OrbitProcess(["dev", "--data-dir", str(tmp_path / "d"), "--port", "0"])
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        good = run_orbit("status", env=dict(announced))
        bad = run_orbit("status", env={**announced, "ORBIT_API_KEY": "ok_nope"})
    finally:
        assert dev.stop() == 0
    assert good.code == 0 and "ready" in good.stdout and "default/dev" in good.stdout
    assert bad.code == 1 and "unauthenticated" in bad.stderr


@pytest.mark.parametrize("command", ["server", "dev", "config"])
def test_help_lists_every_setting_flag(command: str) -> None:
    from orbit_server.config import describe_settings

    shown = run_orbit(command, "--help", env={"COLUMNS": "200"})
    assert shown.code == 0, shown.stderr
    for _env, flag, _default, _doc in describe_settings():
        if command == "dev" and flag == "--database-url":
            continue  # dev always uses its own SQLite file
        assert flag in shown.stdout, f"orbit {command} --help does not list {flag}"
