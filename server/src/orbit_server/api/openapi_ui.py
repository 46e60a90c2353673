"""The API docs page: Swagger UI from files shipped in the package, so it works offline.

Litestar's own pages load their scripts, styles, fonts and favicon from public CDNs: where the
server has no internet access they stay blank. :class:`SwaggerPage` serves the page at
``/openapi`` and ``/openapi/swagger``, and everything the page loads at
``/openapi/assets/{file}``; the browser fetches nothing from another origin.

``static/swagger-ui/`` holds files of swagger-ui-dist 5.35.0 (npm registry), unchanged: the
bundle, its stylesheet and their licences (``LICENSE``, ``NOTICE`` and the bundle's third-party
notices). To update it, ``npm pack swagger-ui-dist@<version>`` and copy those five files.
``static/swagger-init.js`` is Orbit's own: it starts Swagger UI on the page.
"""

from __future__ import annotations

import hashlib
from html import escape
from importlib import resources
from typing import Any

from litestar import Request, Response, get
from litestar.exceptions import NotFoundException
from litestar.openapi.plugins import OpenAPIRenderPlugin
from litestar.params import FromPath, FromQuery
from litestar.router import Router

ASSET_ROUTE = "orbit-openapi-asset"
"""The name of the route serving the page's files, for ``route_reverse``."""

# Litestar adds "; charset=utf-8" to text types.
_JS = "text/javascript"
_TEXT = "text/plain"
ASSETS: dict[str, tuple[str, str]] = {
    "swagger-ui-bundle.js": ("swagger-ui/swagger-ui-bundle.js", _JS),
    "swagger-ui.css": ("swagger-ui/swagger-ui.css", "text/css"),
    "swagger-init.js": ("swagger-init.js", _JS),
    # The bundle's first line points to its notices, relative to the bundle's own URL.
    "swagger-ui-bundle.js.LICENSE.txt": ("swagger-ui/swagger-ui-bundle.js.LICENSE.txt", _TEXT),
    "LICENSE": ("swagger-ui/LICENSE", _TEXT),
    "NOTICE": ("swagger-ui/NOTICE", _TEXT),
}
"""What ``/openapi/assets/{file}`` serves: file → (path under ``static/``, media type)."""

_IMMUTABLE = "public, max-age=31536000, immutable"


class _StaticFiles:
    """The files of :data:`ASSETS`, read once, on first use, with a digest of each.

    The page asks for ``{file}?v={digest}``: a browser may keep that URL for good, since new
    content gets a new URL."""

    def __init__(self) -> None:
        self._content: dict[str, bytes] = {}

    def content(self, name: str) -> bytes:
        if name not in self._content:
            path, _ = ASSETS[name]
            self._content[name] = (
                resources.files("orbit_server.api").joinpath("static", path).read_bytes()
            )
        return self._content[name]

    def digest(self, name: str) -> str:
        return hashlib.sha256(self.content(name)).hexdigest()[:16]


class SwaggerPage(OpenAPIRenderPlugin):
    """Swagger UI at ``/openapi`` and ``/openapi/swagger``, its files at ``/openapi/assets``."""

    def __init__(self) -> None:
        super().__init__(path=["/", "/swagger"], favicon="", style="")
        self._files = _StaticFiles()

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        def url(file: str) -> str:
            path = request.app.route_reverse(ASSET_ROUTE, file=file)
            return escape(f"{path}?v={self._files.digest(file)}")

        title = escape(f"{openapi_schema['info']['title']} API")
        document = escape(self.get_openapi_json_route(request))
        # No inline script, and no favicon request (the empty data: URL).
        return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{url("swagger-ui.css")}">
<style>body {{ margin: 0; background: #fafafa; }}</style>
</head>
<body>
<div id="swagger-ui" data-openapi-url="{document}"></div>
<script src="{url("swagger-ui-bundle.js")}"></script>
<script src="{url("swagger-init.js")}"></script>
</body>
</html>
""".encode()

    def receive_router(self, router: Router) -> None:
        files = self._files

        @get("/assets/{file:str}", name=ASSET_ROUTE, sync_to_thread=False)
        def asset(file: FromPath[str], v: FromQuery[str | None] = None) -> Response[bytes]:
            if file not in ASSETS:
                raise NotFoundException
            _, media_type = ASSETS[file]
            cache = _IMMUTABLE if v == files.digest(file) else "no-cache"
            return Response(
                files.content(file), media_type=media_type, headers={"Cache-Control": cache}
            )

        router.register(asset)
