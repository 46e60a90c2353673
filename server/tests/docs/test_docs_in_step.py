"""The reference docs stay in step with the code they describe."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from orbit_server.config import describe_settings
from orbit_server.errors import ERROR_TYPES
from orbit_server.weave.expr import VARIABLES, compile_expression

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


QUOTE = re.compile(r"<!-- quote: (?P<path>\S+) -->\n```python\n(?P<code>.*?)\n```", re.S)
EXAMPLES = sorted(p for p in (ROOT / "sdk" / "examples").glob("*.py") if p.name != "__init__.py")


def quotes() -> list[tuple[str, str, str]]:
    """Every code block marked ``<!-- quote: path -->``: (doc, quoted path, code)."""
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        doc = path.relative_to(ROOT).as_posix()
        found += [(doc, m["path"], m["code"]) for m in QUOTE.finditer(path.read_text())]
    return found


@pytest.mark.parametrize(("doc", "source", "code"), quotes())
def test_quoted_code_is_the_text_of_its_file(doc: str, source: str, code: str) -> None:
    """STYLE rule 11: docs quote the tested examples. A quote is whole lines of the file, as
    they are there (only their common indentation may be taken off)."""
    lines = (ROOT / source).read_text().splitlines()
    size = len(code.splitlines())
    windows = ("\n".join(lines[at : at + size]) for at in range(len(lines) - size + 1))
    assert any(textwrap.dedent(window) == code for window in windows), (
        f"{doc} quotes text that {source} does not hold:\n{code}"
    )


@pytest.mark.parametrize("example", [p.name for p in EXAMPLES])
def test_every_example_is_quoted_in_the_docs(example: str) -> None:
    assert f"sdk/examples/{example}" in {source for _, source, _ in quotes()}


def test_the_cel_examples_of_the_workflow_guide_evaluate() -> None:
    """Each expression of the guide's "CEL in brief" table compiles as the server compiles
    definitions, and evaluates over data of the shape it reads."""
    text = read("workflows.md").split("### CEL in brief", 1)[1].split("\n\n", 2)[1]
    cells = [row.split(" | ")[0].removeprefix("| ") for row in text.splitlines()[2:]]
    sources = [s.replace("\\|", "|") for cell in cells for s in cell.strip("`").split("`, `")]
    data = {
        "input": {
            "amount": 1200, "currency": "EUR", "order_id": "o-17", "country": "DE", "count": "3",
            "ordered_at": "2030-01-01T10:00:00Z",
            "items": [{"sku": "a-1", "qty": 2, "gift": False}],
        },
        "steps": {
            "approve": {"output": "ana", "error": None, "state": "succeeded"},
            "charge": {"output": None, "error": {"code": "card_declined", "message": ""},
                       "state": "failed"},
        },
    }  # fmt: skip
    assert len(sources) >= 15
    for source in sources:
        compile_expression(source, VARIABLES | {"result"}).evaluate(data)


def metric_names() -> set[str]:
    """Every metric a node exports, as Prometheus names it (counters with ``_total``)."""
    from orbit_server.observability.metrics import Metrics

    return {
        family.name + ("_total" if family.type == "counter" else "")
        for family in Metrics().registry.collect()
    }


def test_every_metric_is_in_the_metrics_reference() -> None:
    text = read("reference/metrics.md")
    assert sorted(name for name in metric_names() if f"`{name}`" not in text) == []


def test_the_grafana_dashboard_uses_only_metrics_that_exist() -> None:
    import json

    dashboard = json.loads((DOCS / "grafana" / "orbit-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert exprs
    used = {name for expr in exprs for name in re.findall(r"\borbit_[a-z_]+", expr)}
    known = metric_names()
    known |= {f"{name}_bucket" for name in known}  # histograms' series
    assert sorted(used - known) == []
    shown = {name.removesuffix("_bucket") for name in used}
    for wanted in (
        "orbit_queue_tasks", "orbit_queue_task_events_total",
        "orbit_queue_oldest_pending_age_seconds", "orbit_worker_slots_free",
        "orbit_schedule_fire_lag_seconds", "orbit_workflow_advancement_lag_seconds",
        "orbit_queue_unserved_tasks", "orbit_http_requests_total", "orbit_database_up",
    ):  # fmt: skip
        assert wanted in shown, wanted
