"""What every operator command shares: the ``--url``/``--key``/``--json``/``--watch`` options,
the connection, how errors end the command, and the three shapes a command takes — list a
collection, show one object, act on one object.

A new command group (workers, bulk actions) needs only its paths, columns and options:

    list_command(conn, "/v1/things", {"state": state}, THING_COLUMNS, as_json=as_json)
    path = f"/v1/things/{segment(thing_id)}/stop"
    action_command(conn, "POST", path, {}, as_json=as_json, draw=draw_thing)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.text import Text

from orbit_server.cli.http_client import ApiError, OrbitHttp, Params, Unreachable
from orbit_server.cli.render import Column, print_json, show, stack, table, watch

UrlOpt = Annotated[
    str | None,
    typer.Option("--url", envvar="ORBIT_URL", show_envvar=False, help="Server URL [ORBIT_URL]"),
]
KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--key", "--api-key", envvar="ORBIT_API_KEY", show_envvar=False,
        help="API key [ORBIT_API_KEY]",
    ),
]  # fmt: skip
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's JSON, for scripts")]
WatchOpt = Annotated[
    float | None,
    typer.Option(
        "--watch", metavar="[SECONDS]", min=0.1,
        help="Redraw every SECONDS (2 when left out) until Ctrl-C",
    ),
]  # fmt: skip
LimitOpt = Annotated[
    int | None, typer.Option("--limit", min=1, max=500, help="Items per page (server default 50)")
]
CursorOpt = Annotated[str | None, typer.Option("--cursor", help="next_cursor of a page before")]
AllOpt = Annotated[bool, typer.Option("--all", help="Follow next_cursor to the last page")]
ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why, for the audit log")]

DEFAULT_WATCH_S = 2.0
WATCH_FLAG = "--watch"


@dataclass(frozen=True)
class Conn:
    """Where the server is and which key to use, as the options and environment gave them."""

    url: str | None
    key: str | None


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def session(conn: Conn) -> Iterator[OrbitHttp]:
    """A client for ``conn``; the API's errors end the command with ``error: …`` and code 1."""
    if not conn.url:
        raise fail("no server: set ORBIT_URL or pass --url")
    if not conn.url.startswith(("http://", "https://")):
        raise fail("the server URL must start with http:// or https://")
    api = OrbitHttp(conn.url, conn.key)
    try:
        with reporting():
            yield api
    finally:
        api.close()


@contextmanager
def reporting() -> Iterator[None]:
    try:
        yield
    except ApiError as exc:
        raise fail(f"{exc.message} ({exc.code})", 1) from None
    except Unreachable as exc:
        raise fail(str(exc), 1) from None


def parse_json(option: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise fail(f"{option} is not JSON: {exc}") from None


def outcome_body(
    outcome: str, value_field: str, value: str | None, code: str | None, message: str
) -> dict[str, Any]:
    """The body of a resolve: ``{"outcome", value_field}`` or ``{"outcome", "error"}``."""
    if outcome == "succeeded":
        if code is not None:
            raise fail("--error-code goes with --outcome failed")
        return {"outcome": outcome, value_field: parse_json(f"--{value_field}", value)}
    if outcome == "failed":
        if code is None:
            raise fail("--outcome failed needs --error-code")
        if value is not None:
            raise fail(f"--{value_field} goes with --outcome succeeded")
        return {"outcome": outcome, "error": {"code": code, "message": message}}
    raise fail("--outcome is succeeded or failed")


def reason_body(reason: str | None) -> dict[str, Any]:
    return {} if reason is None else {"reason": reason}


@dataclass(frozen=True)
class Listing:
    items: list[Any]
    next_cursor: str | None

    def as_json(self) -> dict[str, Any]:
        return {"items": self.items, "next_cursor": self.next_cursor}


def fetch_list(
    api: OrbitHttp,
    path: str,
    params: Params,
    *,
    follow_all: bool = False,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> Listing:
    """One page of a list, or every page with ``follow_all``; ``keep`` filters the items."""
    if follow_all:
        items = [item for page in api.pages(path, params) for item in page.items]
        found = Listing(items, None)
    else:
        page = api.page(path, params)
        found = Listing(page.items, page.next_cursor)
    if keep is None:
        return found
    return Listing([item for item in found.items if keep(item)], found.next_cursor)


def more_hint(listing: Listing) -> Text | None:
    if not listing.next_cursor:
        return None
    return Text(f"more: add --cursor {listing.next_cursor} (or --all)", style="dim")


def list_command(
    conn: Conn,
    path: str,
    params: Params,
    columns: Sequence[Column],
    *,
    as_json: bool,
    follow_all: bool = False,
    keep: Callable[[dict[str, Any]], bool] | None = None,
    every_s: float | None = None,
    draw: Callable[[Listing], RenderableType] | None = None,
) -> None:
    """GET a list and print it: a table of ``columns`` (or ``draw``'s), or the JSON."""
    refuse_json_watch(as_json, every_s)
    with session(conn) as api:

        def frame() -> RenderableType:
            found = fetch_list(api, path, params, follow_all=follow_all, keep=keep)
            drawn = draw(found) if draw is not None else table(found.items, columns)
            return stack(drawn, more_hint(found))

        if as_json:
            print_json(fetch_list(api, path, params, follow_all=follow_all, keep=keep).as_json())
        elif every_s is not None:
            watching(frame, every_s)
        else:
            show(frame())


def show_command(
    conn: Conn,
    fetch: Callable[[OrbitHttp], Any],
    draw: Callable[[Any], RenderableType],
    *,
    as_json: bool,
    every_s: float | None = None,
) -> None:
    """Fetch one object and print it with ``draw``, or as JSON; redraw it with ``every_s``."""
    refuse_json_watch(as_json, every_s)
    with session(conn) as api:
        if as_json:
            print_json(fetch(api))
        elif every_s is not None:
            watching(lambda: draw(fetch(api)), every_s)
        else:
            show(draw(fetch(api)))


def action_command(
    conn: Conn,
    method: str,
    path: str,
    body: Any,
    *,
    as_json: bool,
    draw: Callable[[Any], RenderableType],
) -> None:
    """POST or PUT an action and print the object the server answers."""
    with session(conn) as api:
        answer = api.request(method, path, body=body)
    if as_json:
        print_json(answer)
    else:
        show(draw(answer))


def refuse_json_watch(as_json: bool, every_s: float | None) -> None:
    if as_json and every_s is not None:
        raise fail("--watch redraws a table; leave out --json")


def watching(frame: Callable[[], RenderableType], every_s: float) -> None:
    """Redraw ``frame`` until Ctrl-C. The first draw's error ends the command; later ones
    (a restarting server) are shown in place of the picture and the watch goes on."""
    first = frame()
    drawn = [first]

    def redraw() -> RenderableType:
        if drawn:
            return drawn.pop()
        try:
            return frame()
        except (ApiError, Unreachable) as exc:
            return Text(f"error: {exc}", style="red")

    watch(redraw, every_s)


def with_watch_default(args: list[str]) -> list[str]:
    """``--watch`` takes an optional value: ``--watch`` alone means every 2 s. The command-line
    library has no options with optional values, so a bare ``--watch`` (not followed by a
    number) is given the default before parsing."""
    out: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return out + args[index:]
        out.append(arg)
        if arg == WATCH_FLAG:
            following = args[index + 1] if index + 1 < len(args) else None
            if following is None or not _is_number(following):
                out[-1] = f"{WATCH_FLAG}={DEFAULT_WATCH_S:g}"
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
