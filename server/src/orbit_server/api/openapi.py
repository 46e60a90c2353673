"""The OpenAPI document: how it describes errors, bodies, keys and operations; where it lives.

Litestar describes a 400 with its own ``{detail, status_code}`` body, lists no other error, and
marks every request body required. Orbit answers every error in one envelope
(docs/reference/errors.md) and takes some bodies as optional (``JSONBody[X | None] = None``).
So each route declares the errors it can answer, ``responses=error_responses(...)``, and every
route is described by :class:`OrbitOperation` (:func:`describe` sets it for all of them in
``app.build_litestar``), which drops what Litestar adds on its own.

Every route that takes a key declares the ``bearer`` security scheme (:func:`describe`), so the
docs page offers to authorize with one, and every operation id is its handler's name in
camelCase (:func:`operation_id`): ``submit_task`` is ``submitTask``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin, YamlRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPIHeader,
    OpenAPIResponse,
    Operation,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.openapi.spec.enums import OpenAPIType
from litestar.types import Method

from orbit_server import __version__
from orbit_server.api.auth import takes_key
from orbit_server.api.openapi_ui import SwaggerPage
from orbit_server.api.wire import ErrorEnvelope
from orbit_server.errors import (
    Forbidden,
    InvalidRequest,
    OrbitError,
    PayloadTooLarge,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
)

KEYED = (Unauthenticated, Forbidden, Unavailable)
"""A route with roles: the key is checked (401), its roles (403), in the database (503)."""
BODY = (InvalidRequest, PayloadTooLarge, UnsupportedMediaType)
"""A route that reads a JSON body."""

_RETRY_AFTER = OpenAPIHeader(
    schema=Schema(type=OpenAPIType.INTEGER),
    description="Seconds to wait before retrying. An `unavailable` error that is not "
    "`retryable` has none: the outcome is unknown, read the state first.",
)


def error_responses(*kinds: type[OrbitError]) -> dict[int, ResponseSpec]:
    """The error answers of a route, by status, each in Orbit's envelope with its codes."""
    codes: dict[int, list[str]] = {}
    for kind in kinds:
        listed = codes.setdefault(kind.status, [])
        if kind.code not in listed:
            listed.append(kind.code)
    return {
        status: ResponseSpec(
            data_container=ErrorEnvelope,
            generate_examples=False,
            description=f"Error {_either(codes[status])} (docs/reference/errors.md)",
        )
        for status in sorted(codes)
    }


def _either(codes: Iterable[str]) -> str:
    quoted = [f"`{code}`" for code in codes]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


@dataclass
class OrbitOperation(Operation):
    """An operation as Orbit serves it.

    - Litestar's own ``{detail, status_code}`` answer is dropped: a route that can answer 400
      declares it with :func:`error_responses`.
    - A body whose schema admits ``null`` is optional: the request decoder reads a missing or
      empty body as ``null`` (``OrbitRequest.json``).
    - 429 and 503 answers carry ``Retry-After``.
    """

    def __post_init__(self) -> None:
        responses = self.responses or {}
        for status in [s for s, r in responses.items() if _is_litestar_error(r)]:
            del responses[status]
        for status in ("429", "503"):
            answer = responses.get(status)
            if isinstance(answer, OpenAPIResponse) and answer.content:
                answer.headers = {"Retry-After": _RETRY_AFTER}
        body = self.request_body
        if isinstance(body, RequestBody) and all(
            _admits_null(media.schema) for media in body.content.values()
        ):
            body.required = False


def _is_litestar_error(answer: Any) -> bool:
    if not isinstance(answer, OpenAPIResponse) or not answer.content:
        return False
    schemas = [media.schema for media in answer.content.values()]
    return any(
        isinstance(s, Schema) and s.properties is not None and "status_code" in s.properties
        for s in schemas
    )


def _admits_null(schema: Any) -> bool:
    if not isinstance(schema, Schema):
        return False
    if schema.type == OpenAPIType.NULL or (
        isinstance(schema.type, list) and OpenAPIType.NULL in schema.type
    ):
        return True
    return any(_admits_null(option) for option in (schema.one_of or schema.any_of or ()))


BEARER = "bearer"
"""The security scheme of Orbit's API keys: ``Authorization: Bearer <key>``."""


def openapi_config() -> OpenAPIConfig:
    """The document's metadata and where it is served: ``/openapi/openapi.json`` (and
    ``.yaml``, ``.yml``), and the docs page at ``/openapi`` (:class:`SwaggerPage`)."""
    return OpenAPIConfig(
        title="Orbit",
        version=__version__,
        description="Durable tasks (Pulse) and workflows (Weave). See docs/ for the contract.",
        path="/openapi",
        components=Components(
            security_schemes={
                BEARER: SecurityScheme(
                    type="http",
                    scheme="bearer",
                    description="An API key, `ok_<id>_<secret>` (docs/reference/http-api.md).",
                )
            }
        ),
        operation_id_creator=operation_id,
        render_plugins=[JsonRenderPlugin(), YamlRenderPlugin(), SwaggerPage()],
    )


def describe(route: HTTPRouteHandler) -> None:
    """Have ``route`` described as Orbit serves it: by :class:`OrbitOperation`, and with the
    bearer key when it takes one (as the ``authorize`` guard decides)."""
    route.operation_class = OrbitOperation
    if takes_key(route):
        route.security = [{BEARER: []}]


def operation_id(route: HTTPRouteHandler, method: Method, path: list[Any]) -> str:
    """The handler's name in camelCase, ``list_tasks`` → ``listTasks``: stable while the
    handler keeps its name, and unique since every route has its own handler (Litestar refuses
    a document with two equal ids)."""
    first, *rest = route.handler_name.split("_")
    return first + "".join(word.capitalize() for word in rest)
