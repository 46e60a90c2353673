"""The reference docs stay in step with the code they describe."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orbit_server.config import describe_settings
from orbit_server.errors import ERROR_TYPES

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def read(relative: str) -> str:
    return (DOCS / relative).read_text()


def test_every_setting_is_in_the_configuration_reference() -> None:
    text = read("reference/configuration.md")
    missing = [env for env, *_ in describe_settings() if f"`{env}`" not in text]
    assert missing == []


def test_every_error_code_is_in_the_error_reference() -> None:
    text = read("reference/errors.md")
    missing = [kind.code for kind in ERROR_TYPES if f"`{kind.code}`" not in text]
    assert missing == []


def test_the_readme_opens_with_the_two_commands() -> None:
    head = (ROOT / "README.md").read_text().split("---")[0]
    assert "scripts/dev" in head and "scripts/test" in head
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test" in ci


@pytest.mark.parametrize("doc", sorted(p.relative_to(ROOT).as_posix() for p in DOCS.rglob("*.md")))
def test_relative_links_resolve(doc: str) -> None:
    path = ROOT / doc
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
        assert (path.parent / target).exists(), f"{doc} links to missing {target}"


def test_decision_records_exist() -> None:
    names = sorted(p.name for p in (DOCS / "decisions").glob("*.md"))
    assert names[:2] == ["0001-storage-seam.md", "0002-http-framework.md"]
