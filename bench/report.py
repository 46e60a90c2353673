"""Writing a scenario's report: ``<scenario>-<time>.json`` and ``.md`` in the report folder,
each with the machine, Python, the database's version and durability settings, and where its
data lives (``bench.storage``)."""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.storage import describe, on_memory


def write(
    out: Path, scenario: str, title: str, facts: dict[str, Any], data: dict[str, Any],
    body: list[str],
) -> Path:  # fmt: skip
    """``data`` goes into the JSON beside the machine; ``body`` (Markdown lines) follows the
    title, the machine line and the database line. ``facts`` are ``Databases.facts``: a
    report without them would not say what it measured. Answers the Markdown file."""
    if "storage" not in facts:
        raise ValueError("a report needs the database's facts, with where its data lives")
    memory = on_memory(facts)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "database": facts,
    }
    document: dict[str, Any] = {"scenario": scenario, "machine": machine}
    if memory:
        document["warning"] = _MEMORY_WARNING
    document.update(data)
    (out / f"{scenario}-{stamp}.json").write_text(json.dumps(document, indent=2))
    lines = [
        f"# {title} ({stamp})",
        "",
        *([f"> **Warning: {_MEMORY_WARNING}**", ""] if memory else []),
        f"Machine: {machine['cpus']} CPUs, Python {machine['python']}, {machine['platform']}.",
        "",
        describe(facts),
        "",
        *body,
    ]
    path = out / f"{scenario}-{stamp}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


_MEMORY_WARNING = (
    "the database's data is on a memory filesystem (measured with --allow-tmpfs): commits "
    "never wait for a disk, so these figures and ratios flatter every system measured"
)
