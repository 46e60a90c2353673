"""``orbit audit``: the audit log of the key's scope over the HTTP API."""

from __future__ import annotations

from typing import Annotated

import typer

from orbit_server.cli.operator import (
    AllOpt,
    Conn,
    CursorOpt,
    JsonOpt,
    KeyOpt,
    LimitOpt,
    UrlOpt,
    fail,
    list_command,
)
from orbit_server.cli.render import Column

audit_app = typer.Typer(help="Read the audit log (over HTTP; operator or admin key).")

AUDIT_COLUMNS = [
    Column.of("at", "created_at", no_wrap=True),
    Column.of("actor"),
    Column.of("action"),
    Column("target", lambda e: f"{e.get('target_kind')} {e.get('target_id')}"),
    Column.of("details"),
    Column.of("request", "request_id", no_wrap=True),
]


@audit_app.command("list")
def audit_list(
    target_kind: Annotated[
        str | None, typer.Option("--target-kind", help="task, workflow, queue, schedule or api_key")
    ] = None,
    target_id: Annotated[
        str | None, typer.Option("--target-id", help="The target's id or name")
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List audit records, newest first; --target-kind and --target-id go together."""
    if (target_kind is None) != (target_id is None):
        raise fail("give --target-kind and --target-id together")
    params = {"target_kind": target_kind, "target_id": target_id, "limit": limit,
              "cursor": cursor}  # fmt: skip
    list_command(
        Conn(url, key), "/v1/audit", params, AUDIT_COLUMNS, as_json=as_json,
        follow_all=follow_all,
    )  # fmt: skip
