"""Writing a scenario's report: ``<scenario>-<time>.json`` and ``.md`` in the report folder,
each with the machine, Python and database version and durability settings of the run."""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def write(
    out: Path, scenario: str, title: str, facts: dict[str, Any], data: dict[str, Any],
    body: list[str],
) -> Path:  # fmt: skip
    """``data`` goes into the JSON beside the machine; ``body`` (Markdown lines) follows the
    title and the machine line. Answers the Markdown file."""
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "database": facts,
    }
    document = {"scenario": scenario, "machine": machine, **data}
    (out / f"{scenario}-{stamp}.json").write_text(json.dumps(document, indent=2))
    lines = [
        f"# {title} ({stamp})",
        "",
        f"Machine: {machine['cpus']} CPUs, Python {machine['python']}, {machine['platform']}; "
        f"database {facts.get('version')}, innodb_flush_log_at_trx_commit="
        f"{facts.get('innodb_flush_log_at_trx_commit')}, sync_binlog={facts.get('sync_binlog')}.",
        "",
        *body,
    ]
    path = out / f"{scenario}-{stamp}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
