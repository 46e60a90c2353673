"""The console's Litestar app: sign-in, the cookie and CSRF checks, HTML errors, the templates
and the vendored static files. Pages live in :mod:`orbit_server.console.pages`."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import structlog
from litestar import Litestar, Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.exceptions import HTTPException, NotFoundException
from litestar.handlers.base import BaseRouteHandler
from litestar.params import FromQuery
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from orbit_server.clock import to_rfc3339
from orbit_server.console.session import (
    COOKIE,
    CSRF_FIELD,
    READERS,
    Viewer,
    csrf_ok,
    csrf_token,
)
from orbit_server.errors import Forbidden, InvalidRequest, OrbitError, Unauthenticated
from orbit_server.runtime.node import Node

log = structlog.get_logger("orbit.console")

HERE = Path(__file__).parent
PREFIX = "/console"
PUBLIC = "public"  # route option: no sign-in needed
MAX_FORM_BYTES = 64 * 1024


class SignInNeeded(Exception):
    """No usable key in the cookie: off to the sign-in page."""


def node_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Node:
    node: Node = connection.app.state["node"]
    return node


def viewer_of(request: Request[Any, Any, Any]) -> Viewer:
    viewer: Viewer = request.state.viewer
    return viewer


async def form_of(request: Request[Any, Any, Any]) -> dict[str, str]:
    """An urlencoded form's fields (the first value of each)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise InvalidRequest("the form is too large")
    return {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}


def _cross_site(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    """A POST that the browser says comes from another site (``Sec-Fetch-Site``), or whose
    ``Origin`` is not this server: refused, the sign-in form's included."""
    site = connection.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = connection.headers.get("origin")
    if origin is None or origin == "null":
        return origin == "null"
    host = connection.headers.get("host", "")
    return origin.split("://", 1)[-1] != host


async def guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """Every page but sign-in: a usable key in the cookie; every POST: from this site, with
    the form's CSRF token (checked before anything changes)."""
    if isinstance(connection, Request) and connection.method == "POST" and _cross_site(connection):
        raise Forbidden("this form was not sent by the console")
    if handler.opt.get(PUBLIC):
        return
    key = connection.cookies.get(COOKIE)
    if not key:
        raise SignInNeeded()
    try:
        principal = await node_of(connection).keys.authenticate(key)
    except Unauthenticated:
        raise SignInNeeded() from None
    if not principal.roles & READERS:  # a worker's key reads nothing over the API either
        raise SignInNeeded()
    request_id = "con_" + secrets.token_hex(8)
    connection.state.viewer = Viewer(principal, csrf_token(key), request_id)
    if isinstance(connection, Request) and connection.method == "POST":
        form = await form_of(connection)
        if not csrf_ok(key, form.get(CSRF_FIELD)):
            raise Forbidden("this form is out of date or was not sent by the console")
        connection.state.form = form


def form(request: Request[Any, Any, Any]) -> dict[str, str]:
    found: dict[str, str] = request.state.form
    return found


def page(
    name: str, request: Request[Any, Any, Any], *, status_code: int = 200, **context: Any
) -> Template:
    """A page, with what every page needs: the viewer, the current path, a note from the
    action that led here."""
    return Template(
        template_name=name,
        status_code=status_code,
        context={"viewer": getattr(request.state, "viewer", None), "path": request.url.path,
                 "note": _note(request), **context},
    )  # fmt: skip


def back(request: Request[Any, Any, Any], to: str, note: str | None = None) -> Redirect:
    """After a POST: see the result on a page (POST-redirect-GET), with a note on it. The
    note is signed for the signed-in key, so a link from elsewhere cannot put words on a
    console page."""
    if note:
        signed = note_signature(viewer_of(request).csrf, note)
        to += ("&" if "?" in to else "?") + f"note={quote(note)}&sig={signed}"
    return Redirect(path=to, status_code=303)


def note_signature(csrf: str, note: str) -> str:
    return hmac.new(csrf.encode(), note.encode(), hashlib.sha256).hexdigest()[:32]


def _note(request: Request[Any, Any, Any]) -> str | None:
    note = request.query_params.get("note")
    viewer = getattr(request.state, "viewer", None)
    if not note or viewer is None:
        return None
    given = request.query_params.get("sig") or ""
    return note if hmac.compare_digest(note_signature(viewer.csrf, note), given) else None


def _sign_in_redirect(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    target = request.url.path if request.method == "GET" else PREFIX
    return Redirect(path=f"{PREFIX}/sign-in?next={quote(target)}", status_code=303)


def _error_page(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, OrbitError):
        status, code, message = exc.status, exc.code, exc.message
    elif isinstance(exc, NotFoundException):
        status, code, message = 404, "not_found", "no such page"
    elif isinstance(exc, HTTPException):
        status, code, message = exc.status_code, "invalid_request", str(exc.detail)
    else:
        log.error("console page failed", path=request.url.path, exc_info=exc)
        status, code, message = 500, "internal", "something went wrong; the server log says what"
    return page("error.html", request, status_code=status, code=code, message=message)


@get(f"{PREFIX}/sign-in", opt={PUBLIC: True}, include_in_schema=False)
async def sign_in_page(
    request: Request[Any, Any, Any], next: FromQuery[str | None] = None
) -> Template:
    return page("sign_in.html", request, next=_safe_next(next), error=None)


@post(f"{PREFIX}/sign-in", opt={PUBLIC: True}, include_in_schema=False, status_code=303)
async def sign_in(request: Request[Any, Any, Any]) -> Response[Any]:
    fields = await form_of(request)
    key = fields.get("key", "").strip()
    target = _safe_next(fields.get("next"))
    try:
        principal = await node_of(request).keys.authenticate(key)
    except Unauthenticated:
        return page("sign_in.html", request, status_code=401, next=target,
                    error="This key is not valid.")  # fmt: skip
    if not principal.roles & READERS:
        return page("sign_in.html", request, status_code=403, next=target,
                    error="This key has none of the roles that read: submitter, operator, "
                    "admin.")  # fmt: skip
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    secure = request.url.scheme == "https" or forwarded == "https"
    cookie = Cookie(key=COOKIE, value=key, httponly=True, samesite="strict", secure=secure,
                    path=PREFIX)  # fmt: skip
    return Redirect(path=target, status_code=303, cookies=[cookie])


@post(f"{PREFIX}/sign-out", include_in_schema=False, status_code=303)
async def sign_out(request: Request[Any, Any, Any]) -> Response[Any]:
    gone = Cookie(key=COOKIE, value="", max_age=0, httponly=True, samesite="strict", path=PREFIX)
    return Redirect(path=f"{PREFIX}/sign-in", status_code=303, cookies=[gone])


def _safe_next(target: str | None) -> str:
    """Only a path of the console itself (never another site)."""
    if target and target.startswith(PREFIX + "/") and not target.startswith("//"):
        return target
    return PREFIX + "/"


def _ago(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return ""
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    if seconds < 0:
        return "in " + _span(-seconds)
    return _span(seconds) + " ago"


def _span(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.0f}d"


def _duration_ms(ms: int | None) -> str:
    return "" if ms is None else _span(ms / 1000)


def _upto(count: int, most: int | None) -> str:
    """A count that stopped past ``most``: "1,000+"."""
    return f"{most:,}+" if most is not None and count > most else f"{count:,}"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _engine(engine: JinjaTemplateEngine) -> None:
    env = engine.engine
    env.filters["ts"] = lambda m: to_rfc3339(m) or ""
    env.filters["ago"] = _ago
    env.filters["ms"] = _duration_ms
    env.filters["pretty"] = _json
    env.filters["upto"] = _upto
    env.globals["CSRF_FIELD"] = CSRF_FIELD
    env.globals["PREFIX"] = PREFIX


class ServerTiming:
    """Says in each answer how long the server took to make it (``Server-Timing: app;dur=…``,
    in milliseconds, up to the answer's first byte): what the console bench reads, and what a
    browser's developer tools show."""

    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = time.perf_counter()

        async def timed(message: Any) -> None:
            if message["type"] == "http.response.start":
                took = (time.perf_counter() - started) * 1000
                headers = [
                    *message.get("headers", []),
                    (b"server-timing", f"app;dur={took:.1f}".encode()),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, timed)


def build_console(node: Node) -> ServerTiming:
    """The console of ``node``: pages, sign-in, static files."""
    from orbit_server.console.pages import ROUTES

    static = create_static_files_router(
        path=f"{PREFIX}/static", directories=[HERE / "static"], opt={PUBLIC: True},
        include_in_schema=False, cache_control=None,
    )  # fmt: skip
    app = Litestar(
        route_handlers=[sign_in_page, sign_in, sign_out, static, *ROUTES],
        guards=[guard],
        exception_handlers={SignInNeeded: _sign_in_redirect, Exception: _error_page},
        template_config=TemplateConfig(
            directory=HERE / "templates",
            engine=JinjaTemplateEngine,
            engine_callback=_engine,
        ),
        state={"node": node},  # type: ignore[arg-type]
        openapi_config=None,
        debug=False,
        logging_config=None,
    )
    return ServerTiming(app)
