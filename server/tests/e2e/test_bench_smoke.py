"""The benchmark runner cannot rot: its smoke mode runs in the suite (tiny sizes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.databases import MySQLServerForTests

ROOT = Path(__file__).resolve().parents[3]


async def test_the_claim_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    name = await mysql_server.create()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench", "claim", "--smoke", "--url", mysql_server.url_for(name),
             "--out", str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        await mysql_server.drop(name)
    assert done.returncode == 0, done.stderr[-2000:]
    first = json.loads(done.stdout.splitlines()[0])
    assert first["backlog"] == 300 and first["measured"] == 100
    assert first["claim_us_per_task"] > 0
    reports = sorted(tmp_path.glob("claim-*.md"))
    assert len(reports) == 1 and "| backlog |" in reports[0].read_text()
