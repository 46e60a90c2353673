"""The MariaDB harness starts a real server, stops it, and restarts it on the same data."""

from __future__ import annotations

import asyncio
import socket

import asyncmy
import pytest

from .mariadb import DEFAULT_DATABASE, MariaDBServer


async def _query(port: int, sql: str, database: str = DEFAULT_DATABASE) -> list[tuple[object, ...]]:
    conn = await asyncmy.connect(
        host="127.0.0.1", port=port, user="root", password="", database=database
    )
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
            rows = await cur.fetchall()
        await conn.commit()
    finally:
        await conn.ensure_closed()
    return [tuple(row) for row in rows]


def _query_sync(port: int, sql: str, database: str = DEFAULT_DATABASE) -> list[tuple[object, ...]]:
    return asyncio.run(_query(port, sql, database))


def test_start_stop_restart_keeps_data_and_port() -> None:
    with MariaDBServer() as server:
        port = server.port
        assert server.url() == f"mysql://root@127.0.0.1:{port}/orbit_test"

        [(version,)] = _query_sync(port, "SELECT VERSION()")
        assert "MariaDB" in str(version)
        _query_sync(port, "CREATE TABLE survivor (id INT PRIMARY KEY) ENGINE=InnoDB")
        _query_sync(port, "INSERT INTO survivor VALUES (42)")

        server.stop()
        assert not server.running
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()

        server.start()
        assert server.port == port
        assert _query_sync(port, "SELECT id FROM survivor") == [(42,)]

        extra_url = server.create_database("harness_extra")
        assert extra_url == f"mysql://root@127.0.0.1:{port}/harness_extra"
        assert _query_sync(port, "SELECT DATABASE()", database="harness_extra") == [
            ("harness_extra",)
        ]
        server.drop_database("harness_extra")
        databases = {row[0] for row in _query_sync(port, "SHOW DATABASES")}
        assert "harness_extra" not in databases

        data_dir = server.data_dir
    assert not data_dir.exists()
    assert not server.running
