"""The PostgreSQL harness starts a real server of its own and leaves nothing behind."""

from __future__ import annotations

import psycopg

from .postgresql import PostgreSQLServer


def test_a_private_server_answers_and_is_removed_afterwards() -> None:
    with PostgreSQLServer() as server:
        root = server._root
        assert root is not None and (root / "data" / "postmaster.pid").exists()
        with psycopg.connect(server.url(), autocommit=True) as conn:
            [(version,)] = conn.execute("SELECT version()").fetchall()
            [(port,)] = conn.execute("SHOW port").fetchall()
        assert "PostgreSQL" in version and int(port) == server.port
    assert not root.exists()
