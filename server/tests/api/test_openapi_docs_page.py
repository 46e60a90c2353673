"""The API docs page works offline: it loads nothing but files this server serves itself."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import httpx2
import pytest

from orbit_server.api.openapi_ui import ASSETS
from tests.api.test_error_contract import assert_error

PAGES = ["/openapi", "/openapi/swagger"]
FETCHED = ("src", "href", "data-openapi-url")  # the last: the document the page's script loads
MEDIA_TYPES = {".css": "text/css", ".js": "text/javascript", ".json": "application/vnd.oai"}


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in FETCHED and value is not None]


def references(page: str) -> list[str]:
    """Every URL that the page makes the browser fetch."""
    parser = _References()
    parser.feed(page)
    return parser.urls


def same_origin(url: str) -> bool:
    parts = urlsplit(url)
    return url.startswith("data:") or (
        not parts.scheme and not parts.netloc and url.startswith("/")
    )


def fetched(page: str) -> list[str]:
    return [url for url in references(page) if not url.startswith("data:")]


@pytest.mark.parametrize("path", PAGES)
async def test_the_page_references_only_its_own_origin(http: httpx2.AsyncClient, path: str) -> None:
    response = await http.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    urls = references(response.text)
    assert [url for url in urls if not same_origin(url)] == []
    assert "http://" not in response.text and "https://" not in response.text
    names = {urlsplit(url).path.rsplit("/", 1)[-1] for url in urls}
    assert {"swagger-ui.css", "swagger-ui-bundle.js", "swagger-init.js", "openapi.json"} <= names


@pytest.mark.parametrize("path", PAGES)
async def test_everything_the_page_references_is_served(
    http: httpx2.AsyncClient, path: str
) -> None:
    page = (await http.get(path)).text
    for url in fetched(page):
        response = await http.get(url)
        assert response.status_code == 200, url
        suffix = "." + urlsplit(url).path.rsplit(".", 1)[-1]
        assert response.headers["content-type"].startswith(MEDIA_TYPES[suffix]), url
        assert response.content, url


async def test_the_page_loads_assets_that_load_nothing_else(http: httpx2.AsyncClient) -> None:
    """A stylesheet could still import fonts from elsewhere; Swagger UI's does not."""
    page = (await http.get("/openapi")).text
    for url in fetched(page):
        if urlsplit(url).path.endswith(".css"):
            css = (await http.get(url)).text
            assert "@import" not in css
            assert all(
                u.startswith(("data:", '"data:', "'data:"))
                for u in re.findall(r"url\(([^)]*)\)", css)
            )


async def test_a_versioned_asset_may_be_cached_for_good(http: httpx2.AsyncClient) -> None:
    page = (await http.get("/openapi")).text
    for url in fetched(page):
        if "/assets/" in url:
            cache = (await http.get(url)).headers["cache-control"]
            assert "immutable" in cache, url
    bare = await http.get("/openapi/assets/swagger-ui.css")
    assert bare.status_code == 200 and bare.headers["cache-control"] == "no-cache"


@pytest.mark.parametrize("name", sorted(ASSETS))
async def test_every_shipped_file_is_served(http: httpx2.AsyncClient, name: str) -> None:
    response = await http.get(f"/openapi/assets/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == ASSETS[name][1]
    assert response.content


async def test_an_unknown_asset_is_not_found(http: httpx2.AsyncClient) -> None:
    assert_error(await http.get("/openapi/assets/swagger-ui.js.map"), 404, "not_found", "protocol")


@pytest.mark.parametrize(
    ("path", "media_type"),
    [
        ("/openapi/openapi.json", "application/vnd.oai.openapi+json"),
        ("/openapi/openapi.yaml", "application/vnd.oai.openapi"),
        ("/openapi/openapi.yml", "application/vnd.oai.openapi"),
    ],
)
async def test_the_document_stays_where_it_was(
    http: httpx2.AsyncClient, path: str, media_type: str
) -> None:
    response = await http.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == media_type
    assert "/v1/tasks" in response.text
