"""Database URLs: ``mysql://user:password@host:3306/orbit`` and ``sqlite:///path/orbit.db``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit


class InvalidDatabaseUrl(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class MySQLUrl:
    host: str
    port: int
    user: str
    password: str
    database: str
    unix_socket: str | None = None

    def redacted(self) -> str:
        auth = f"{self.user}:***@" if self.password else f"{self.user}@"
        return f"mysql://{auth}{self.host}:{self.port}/{self.database}"


@dataclass(frozen=True, slots=True)
class SQLiteUrl:
    path: Path

    def redacted(self) -> str:
        return f"sqlite:///{self.path}"


DatabaseUrl = MySQLUrl | SQLiteUrl


def parse_database_url(url: str) -> DatabaseUrl:
    """Parse and validate a database URL; the error never repeats a password."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("mysql", "mariadb"):
        database = parts.path.lstrip("/")
        if not database or "/" in database:
            raise InvalidDatabaseUrl(
                "a mysql:// URL must name one database: mysql://user@host/orbit"
            )
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise InvalidDatabaseUrl("the port of the database URL is not a number") from exc
        query = parse_qs(parts.query)
        return MySQLUrl(
            host=parts.hostname or "127.0.0.1",
            port=port,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=unquote(database),
            unix_socket=query.get("unix_socket", [None])[0],
        )
    if scheme == "sqlite":
        # sqlite:///relative/or/absolute -> path after the third slash, as in SQLAlchemy:
        # sqlite:///orbit.db is relative, sqlite:////var/lib/orbit.db is absolute.
        if parts.netloc:
            raise InvalidDatabaseUrl("a sqlite URL has three slashes: sqlite:///path/orbit.db")
        raw = url.split(":///", 1)[1] if ":///" in url else ""
        if not raw:
            raise InvalidDatabaseUrl("a sqlite URL must name a file: sqlite:///path/orbit.db")
        return SQLiteUrl(path=Path(unquote(raw)))
    raise InvalidDatabaseUrl("the database URL must start with mysql:// or sqlite:///")
