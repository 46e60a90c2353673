"""The benchmark runner cannot rot: its smoke mode runs in the suite (tiny sizes), on the
suite's own MariaDB, whose data is on tmpfs when there is room: hence ``--allow-tmpfs``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.databases import MySQLServerForTests

ROOT = Path(__file__).resolve().parents[3]


async def run_bench(
    mysql_server: MySQLServerForTests, out: Path, scenario: str, timeout: float,
    allow_tmpfs: bool = True,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python -m bench <scenario> --smoke`` against a database of the test server."""
    name = await mysql_server.create()
    try:
        return subprocess.run(
            [sys.executable, "-m", "bench", scenario, "--smoke", "--url",
             mysql_server.url_for(name), "--out", str(out),
             *(["--allow-tmpfs"] if allow_tmpfs else [])],
            cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    finally:
        await mysql_server.drop(name)


def storage_recorded(out: Path, scenario: str) -> dict[str, Any]:
    """The report of ``scenario`` says where the database keeps its data and how durably:
    answers the JSON's database facts."""
    [document] = [json.loads(p.read_text()) for p in out.glob(f"{scenario}-*.json")]
    [markdown] = [p.read_text() for p in out.glob(f"{scenario}-*.md")]
    facts: dict[str, Any] = document["machine"]["database"]
    storage = facts["storage"]
    assert storage["server"] == "external server" and storage["datadir"] != "unknown"
    assert f"`{storage['datadir']}` on **{storage['filesystem']}**" in markdown
    for name in ("innodb_flush_log_at_trx_commit", "innodb_doublewrite"):
        assert f"{name}={facts[name]}" in markdown
    assert "buffer pool" in markdown and "log file" in markdown
    if storage["filesystem"] in ("tmpfs", "ramfs"):
        assert "Warning" in markdown and "warning" in document
    return facts


def reported(done: subprocess.CompletedProcess[str], kind: str) -> list[dict[str, Any]]:
    """The ``{"<kind>": {...}}`` lines a scenario printed, in order."""
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [line[kind] for line in lines if kind in line]


async def test_the_claim_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "claim", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    first = json.loads(done.stdout.splitlines()[0])
    assert first["backlog"] == 300 and first["measured"] == 100
    assert first["claim_us_per_task"] > 0
    reports = sorted(tmp_path.glob("claim-*.md"))
    assert len(reports) == 1 and "| backlog |" in reports[0].read_text()
    storage_recorded(tmp_path, "claim")


async def test_the_runner_refuses_a_database_on_tmpfs(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    harness = mysql_server.harness
    shm = "/dev/shm/"  # noqa: S108 - only compared with the data directory
    if harness is None or not str(harness.data_dir).startswith(shm):
        pytest.skip("the test server's data is not on tmpfs here")
    done = await run_bench(mysql_server, tmp_path, "claim", timeout=120, allow_tmpfs=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "tmpfs" in done.stderr and "--allow-tmpfs" in done.stderr
    assert not list(tmp_path.glob("claim-*"))  # nothing measured, nothing reported


async def test_the_throughput_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "throughput", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    baselines, runs = reported(done, "baseline"), reported(done, "throughput")
    assert [b["per_transaction"] for b in baselines] == [100, 1]
    assert all(b["tasks_per_s"] > 0 for b in baselines)
    assert [(r["mode"], r["tasks"]) for r in runs] == [("burn-down", 200), ("steady", 200)]
    assert all(r["tasks_per_s"] > 0 for r in runs)
    reports = sorted(tmp_path.glob("throughput-*.md"))
    assert len(reports) == 1 and "of batched baseline" in reports[0].read_text()
    storage_recorded(tmp_path, "throughput")


async def test_the_latency_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "latency", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = reported(done, "latency")
    assert [(r["placement"], r["tasks"]) for r in runs] == [("same node", 20), ("cross node", 20)]
    assert all(0 < r["start_p50_ms"] <= r["result_p99_ms"] for r in runs)
    assert len(sorted(tmp_path.glob("latency-*.md"))) == 1
    storage_recorded(tmp_path, "latency")


async def test_the_memory_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "memory", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = reported(done, "memory")
    assert run["tasks"] > 0 and run["succeeded"] == run["tasks"]
    assert 0 < run["baseline_mib"] <= run["max_mib"]
    [report] = sorted(tmp_path.glob("memory-*.md"))
    assert "| seconds | MiB |" in report.read_text()
    storage_recorded(tmp_path, "memory")


def test_the_memory_benchmark_breaks_its_own_database_only(tmp_path: Path) -> None:
    """``--outages`` stops the runner's private server during the run (the load goes on, its
    refused submits counted); a server given by ``--url`` is never stopped."""
    command = [sys.executable, "-m", "bench", "memory", "--smoke", "--out", str(tmp_path),
               "--outages", "1", "--outage-s", "1"]  # fmt: skip
    refused = subprocess.run([*command, "--url", "mysql://root@127.0.0.1:1/none"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert refused.returncode == 2 and "no --url" in refused.stdout
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = reported(done, "memory")
    assert len(run["outages"]) == 1 and run["outage_s"] == 1
    assert run["succeeded"] >= run["tasks"] > 0
    [report] = sorted(tmp_path.glob("memory-*.md"))
    assert "1 database outages of 1 s each" in report.read_text()


async def test_the_schedules_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "schedules", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = reported(done, "schedules")
    assert [(r["mode"], r["schedules"], r["periods"]) for r in runs] == [
        ("phased", 50, 3),
        ("aligned", 50, 3),
    ]
    for run in runs:
        assert run["fired"] > 0 and run["duplicates"] == 0
        assert run["per_schedule_max"] <= run["periods"]  # no slot fired twice
        assert run["tasks"] == run["fired_total"]  # one task per fired slot
        assert run["passes"] > 0 and run["rows_per_pass_max"] <= run["batch"]
    assert runs[1]["spread_s"] == 0  # aligned: every schedule fires at the same instant
    [report] = sorted(tmp_path.glob("schedules-*.md"))
    assert "| rows per pass p50 |" in report.read_text()
    storage_recorded(tmp_path, "schedules")


async def test_the_workflows_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "workflows", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = reported(done, "workflows")
    assert (run["instances"], run["steps"], run["paced_instances"]) == (20, 100, 10)
    assert run["steps_per_s"] > 0 and run["hop_p50_ms"] > 0 and run["advance_p50_ms"] > 0
    assert run["largest_advancement_rows"] > 0
    [report] = sorted(tmp_path.glob("workflows-*.md"))
    assert "| paced" in report.read_text() and "| burst" in report.read_text()
    storage_recorded(tmp_path, "workflows")


async def test_the_peer_workload_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "peer-workload", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [raw] = reported(done, "peer_raw")
    runs = reported(done, "peer")
    assert [(r["capacity"], r["tasks"], r["single"], r["batch"]) for r in runs] == [
        (8, 200, 50, 50)
    ]
    for row in (raw, *runs):
        assert row["tasks"] == 200
        assert all(row[f"{k}_per_s"] > 0 for k in ("single", "batch", "drain", "total"))
    assert raw["cpu_us_per_single"] is None  # no Orbit server in the raw row
    assert runs[0]["cpu_us_per_single"] >= 0 and runs[0]["cpu_us_per_drained"] >= 0
    targets = reported(done, "peer_target")
    assert len(targets) == 6 and all(t["met"] in (True, False) for t in targets)
    [report] = sorted(tmp_path.glob("peer-workload-*.md"))
    text = report.read_text()
    assert "| raw database |" in text and "| Orbit, capacity 8 |" in text
    assert text.count("| met |") + text.count("| missed |") == 6
    storage_recorded(tmp_path, "peer-workload")


async def test_the_console_benchmark_runs_and_reports(
    mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    done = await run_bench(mysql_server, tmp_path, "console", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seeded = reported(done, "console_seeded")
    assert [s.get("tasks", s.get("workflows")) for s in seeded] == [2000, 200]
    pages = reported(done, "console_page")
    assert len(pages) == 17 and {p["page"] for p in pages} >= {"overview", "workflow", "audit log"}
    for page in pages:
        assert page["requests"] == 3 and 0 < page["median_ms"] <= page["p95_ms"] <= page["max_ms"]
        assert page["within"] == (page["max_ms"] <= 300)
    [report] = sorted(tmp_path.glob("console-*.md"))
    text = report.read_text()
    assert "| ≤ 300 ms |" in text and "`/console/inbox`" in text
    storage_recorded(tmp_path, "console")
