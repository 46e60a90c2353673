"""Database URLs: ``mysql://user:password@host:3306/orbit`` and ``sqlite:///path/orbit.db``.

A MySQL URL may name several hosts, tried in order for a writable primary
(docs/operations/database-ha.md): ``mysql://user:pw@db1:3306,db2:3307,db3/orbit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit


class InvalidDatabaseUrl(ValueError):
    pass


DEFAULT_PORT = 3306

Endpoint = tuple[str, int]  # (host name or address, TCP port)


def endpoint_text(endpoint: Endpoint) -> str:
    """``host:port``, an IPv6 address in brackets."""
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class MySQLUrl:
    host: str
    port: int
    user: str
    password: str
    database: str
    unix_socket: str | None = None
    #: The hosts after the first, in the order they are tried.
    more_hosts: tuple[Endpoint, ...] = ()

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Every host of the URL, in order, the first one first."""
        return ((self.host, self.port), *self.more_hosts)

    def redacted(self) -> str:
        auth = f"{self.user}:***@" if self.password else f"{self.user}@"
        hosts = ",".join(endpoint_text(e) for e in self.endpoints)
        return f"mysql://{auth}{hosts}/{self.database}"


@dataclass(frozen=True, slots=True)
class SQLiteUrl:
    path: Path

    def redacted(self) -> str:
        return f"sqlite:///{self.path}"


DatabaseUrl = MySQLUrl | SQLiteUrl


def _endpoint(text: str) -> Endpoint:
    """One ``host[:port]`` of a host list (``[v6::addr]:port`` for IPv6)."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            raise InvalidDatabaseUrl(f"the database URL has a malformed host {text!r}")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
        if not host:
            raise InvalidDatabaseUrl("a host of the database URL is empty")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidDatabaseUrl(
            f"the port of the database URL's host {host!r} is not a number from 1 to 65535"
        )
    return host, int(port_text)


def _hosts(netloc: str) -> tuple[Endpoint, ...]:
    hostlist = netloc.rpartition("@")[2]
    if not hostlist:
        return (("127.0.0.1", DEFAULT_PORT),)
    endpoints = tuple(_endpoint(item.strip()) for item in hostlist.split(","))
    if len(set(endpoints)) != len(endpoints):
        raise InvalidDatabaseUrl("the database URL names the same host twice")
    return endpoints


def parse_database_url(url: str) -> DatabaseUrl:
    """Parse and validate a database URL; the error never repeats a password."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unbalanced "[" of an IPv6 address
        raise InvalidDatabaseUrl("the database URL has a malformed host") from exc
    scheme = parts.scheme.lower()
    if scheme in ("mysql", "mariadb"):
        database = parts.path.lstrip("/")
        if not database or "/" in database:
            raise InvalidDatabaseUrl(
                "a mysql:// URL must name one database: mysql://user@host/orbit"
            )
        (host, port), *more = _hosts(parts.netloc)
        query = parse_qs(parts.query)
        unix_socket = query.get("unix_socket", [None])[0]
        if unix_socket and more:
            raise InvalidDatabaseUrl("a mysql:// URL with unix_socket names one host only")
        return MySQLUrl(
            host=host,
            port=port,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=unquote(database),
            unix_socket=unix_socket,
            more_hosts=tuple(more),
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
