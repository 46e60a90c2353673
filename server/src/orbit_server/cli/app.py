"""The ``orbit`` command (API.md "Command line and configuration")."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from orbit_server import __version__
from orbit_server.cli.audit import audit_app
from orbit_server.cli.bulk import bulk_app, tasks_bulk, workflows_bulk
from orbit_server.cli.operator import with_watch_default
from orbit_server.cli.queues import queues_app
from orbit_server.cli.schedules import schedules_app
from orbit_server.cli.tasks import tasks_app
from orbit_server.cli.workers import workers_app
from orbit_server.cli.workflows import workflows_app
from orbit_server.config import Settings, SettingsError, describe_settings

T = TypeVar("T")

app = typer.Typer(
    name="orbit",
    help="Orbit: durable tasks and workflows on MySQL/MariaDB or SQLite.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
keys_app = typer.Typer(help="Create, list and revoke API keys (talks to the database directly).")
app.add_typer(keys_app, name="keys")
# The operator commands talk to a running server over HTTP (ORBIT_URL, ORBIT_API_KEY).
app.add_typer(tasks_app, name="tasks")
app.add_typer(queues_app, name="queues")
app.add_typer(workflows_app, name="workflows")
app.add_typer(schedules_app, name="schedules")
app.add_typer(audit_app, name="audit")
app.add_typer(workers_app, name="workers")
app.add_typer(bulk_app, name="bulk")
tasks_app.command("bulk")(tasks_bulk)
workflows_app.command("bulk")(workflows_bulk)

EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def settings_epilog(skip: frozenset[str] = frozenset()) -> str:
    """The setting flags a command takes beside its own options, for its ``--help``."""
    lines = [
        f"  {flag} [{env}, default {default or 'none'}]: {doc}"
        for env, flag, default, doc in describe_settings()
        if flag not in skip
    ]
    # "\b" keeps click from re-wrapping the lines into one paragraph.
    return "Every setting is also a flag (flags win over ORBIT_* variables):\n\n\b\n" + "\n".join(
        lines
    )


OWN_FLAGS = frozenset({"--host", "--port", "--node-id", "--database-url", "--roles"})

HostOpt = Annotated[str | None, typer.Option("--host", help="Address to bind [ORBIT_HOST]")]
PortOpt = Annotated[
    int | None, typer.Option("--port", help="Port to bind; 0 picks a free one [ORBIT_PORT]")
]
DbOpt = Annotated[
    str | None, typer.Option("--database-url", help="mysql://… or sqlite:///… [ORBIT_DATABASE_URL]")
]
DEV_DATA_DIR = Path(".orbit")
DEV_DB_FILE = "orbit.db"
DataDirOpt = Annotated[
    Path, typer.Option("--data-dir", help="Where the SQLite file and dev key live")
]
KeysDataDirOpt = Annotated[
    Path,
    typer.Option("--data-dir", help="`orbit dev`'s data dir, used when no database URL is given"),
]


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def parse_extra_flags(args: list[str]) -> dict[str, str]:
    """Every setting is also a flag: ``--lease-ms 60000`` or ``--lease-ms=60000``."""
    from dataclasses import fields

    known = {f.name for f in fields(Settings)}
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise fail(f"unexpected argument {arg!r}")
        name, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise fail(f"{arg} needs a value")
            i += 1
            value = args[i]
        key = name.replace("-", "_")
        if key not in known:
            raise fail(f"unknown option {arg.split('=')[0]} (see docs/reference/configuration.md)")
        out[key] = value
        i += 1
    return out


def load_settings(flags: dict[str, Any], defaults: dict[str, Any] | None = None) -> Settings:
    try:
        return Settings.load(flags=flags, defaults=defaults)
    except SettingsError as exc:
        raise fail(str(exc)) from None


def run(coro_factory: Callable[[], Awaitable[T]]) -> T:
    try:
        import uvloop

        return uvloop.run(coro_factory())  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(coro_factory())  # type: ignore[arg-type]


def require_database_url(settings: Settings) -> None:
    if not settings.database_url:
        raise fail("no database: set ORBIT_DATABASE_URL or pass --database-url")


def dev_database_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir.resolve() / DEV_DB_FILE}"


def keys_settings(database_url: str | None, data_dir: Path) -> Settings:
    """The database of ``orbit keys``: the URL given, else the SQLite file of ``orbit dev`` in
    ``data_dir`` when there is one, so that keys work against a dev server as they are."""
    settings = load_settings({"database_url": database_url})
    if settings.database_url:
        return settings
    if (data_dir / DEV_DB_FILE).is_file():
        return load_settings({"database_url": dev_database_url(data_dir)})
    raise fail(
        "no database: set ORBIT_DATABASE_URL or pass --database-url "
        f"(or --data-dir of an `orbit dev`; there is no {data_dir / DEV_DB_FILE})"
    )


@app.command()
def version() -> None:
    """Print the server version."""
    typer.echo(__version__)


@app.command(
    context_settings=EXTRA,
    epilog=settings_epilog(frozenset({"--host", "--port", "--database-url"})),
)
def dev(
    ctx: typer.Context,
    host: HostOpt = None,
    port: PortOpt = None,
    data_dir: DataDirOpt = DEV_DATA_DIR,
    testing: Annotated[
        bool,
        typer.Option(
            "--testing",
            help="Test mode: a clock tests move forward (POST /v1/dev/clock:advance) and "
            "throwaway environments (POST /v1/dev/environments)",
        ),
    ] = False,
) -> None:
    """One process on an embedded SQLite file, migrated automatically (for development)."""
    from orbit_server.cli.serve import serve_dev

    extra = parse_extra_flags(ctx.args)
    if "database_url" in extra:
        raise fail("orbit dev always uses its own SQLite file in --data-dir; use `orbit server`")
    # The embedded file wins over ORBIT_DATABASE_URL: dev must never migrate a shared database.
    flags = {"host": host, "port": port, **extra, "database_url": dev_database_url(data_dir)}
    settings = load_settings(flags)
    raise typer.Exit(run(lambda: serve_dev(settings, data_dir.resolve(), testing=testing)))


@app.command(context_settings=EXTRA, epilog=settings_epilog(OWN_FLAGS))
def server(
    ctx: typer.Context,
    host: HostOpt = None,
    port: PortOpt = None,
    node_id: Annotated[str | None, typer.Option("--node-id", help="[ORBIT_NODE_ID]")] = None,
    database_url: DbOpt = None,
    roles: Annotated[
        str | None, typer.Option("--roles", help="Comma-separated roles or 'all' [ORBIT_ROLES]")
    ] = None,
) -> None:
    """Production server; refuses a database schema that is not current."""
    from orbit_server.cli.serve import serve_production

    flags = {
        "host": host,
        "port": port,
        "node_id": node_id,
        "database_url": database_url,
        "roles": roles,
        **parse_extra_flags(ctx.args),
    }
    settings = load_settings(flags, defaults={"host": "0.0.0.0"})  # noqa: S104
    require_database_url(settings)
    if settings.processes > 1:
        from orbit_server.cli.serve import supervise_processes

        raise typer.Exit(supervise_processes(settings))
    raise typer.Exit(run(lambda: serve_production(settings)))


@app.command()
def migrate(database_url: DbOpt = None) -> None:
    """Apply pending migrations (safe to run from several places at once)."""
    from orbit_server.cli.admin import migrate_database

    settings = load_settings({"database_url": database_url})
    require_database_url(settings)
    raise typer.Exit(run(lambda: migrate_database(settings)))


@app.command()
def openapi(
    output: Annotated[Path | None, typer.Option("--output", help="Write to a file")] = None,
) -> None:
    """Print the OpenAPI document of the HTTP API."""
    from orbit_server.api.app import openapi_document

    text = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)


@app.command()
def status(
    url: Annotated[
        str | None, typer.Option("--url", envvar="ORBIT_URL", help="Server URL [ORBIT_URL]")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="ORBIT_API_KEY", help="Key to check [ORBIT_API_KEY]"),
    ] = None,
) -> None:
    """Ask a running server whether it is ready, and whose the API key is."""
    from orbit_server.cli.status import show_status

    if not url:
        raise fail("no server: set ORBIT_URL or pass --url")
    raise typer.Exit(show_status(url, api_key))


@app.command("config", context_settings=EXTRA, epilog=settings_epilog())
def show_config(ctx: typer.Context) -> None:
    """Validate the configuration (environment and flags) and print it, secrets masked."""
    settings = load_settings(parse_extra_flags(ctx.args))
    typer.echo(json.dumps(settings.public_dict(), indent=2, default=str))


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant the key belongs to")],
    environment: Annotated[str, typer.Option("--environment", help="Environment, e.g. prod")],
    role: Annotated[
        list[str], typer.Option("--role", help="submitter, worker, operator or admin; repeatable")
    ],
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", help="Restrict a worker key to queues; repeatable"),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="A label for people")] = None,
    database_url: DbOpt = None,
    data_dir: KeysDataDirOpt = DEV_DATA_DIR,
) -> None:
    """Create a key; the key itself is printed alone on the last line (shown once)."""
    from orbit_server.cli.admin import create_key

    settings = keys_settings(database_url, data_dir)
    raise typer.Exit(
        run(lambda: create_key(settings, tenant, environment, role, queue or None, name))
    )


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option("--tenant")] = None,
    environment: Annotated[str | None, typer.Option("--environment")] = None,
    output: Annotated[str, typer.Option("--output", help="table or json")] = "table",
    database_url: DbOpt = None,
    data_dir: KeysDataDirOpt = DEV_DATA_DIR,
) -> None:
    """List keys (never their secrets)."""
    from orbit_server.cli.admin import list_keys

    settings = keys_settings(database_url, data_dir)
    raise typer.Exit(run(lambda: list_keys(settings, tenant, environment, output)))


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (from `orbit keys list`)")],
    database_url: DbOpt = None,
    data_dir: KeysDataDirOpt = DEV_DATA_DIR,
) -> None:
    """Revoke a key at once; requests with it answer 401 from then on."""
    from orbit_server.cli.admin import revoke_key

    settings = keys_settings(database_url, data_dir)
    raise typer.Exit(run(lambda: revoke_key(settings, key_id)))


def main() -> None:
    try:
        app(args=with_watch_default(sys.argv[1:]))
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
