"""The two distributions as a user installs them: both wheels build, carry the licence, and the
SDK's wheel installed alone into a clean environment brings no server code, SQL or storage
driver (SPEC E5)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# Distributions that only the server may bring: its code, its web stack, its database driver.
SERVER_ONLY = {"orbit-server", "litestar", "uvicorn", "asyncmy", "structlog", "typer", "jinja2",
               "prometheus-client", "cronsim", "cel-expr-python"}  # fmt: skip


def _uv() -> str:
    found = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    if not Path(found).exists():
        pytest.skip("uv is not installed (scripts/bootstrap installs it)")
    return found


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    for project in ("sdk", "server"):
        subprocess.run([_uv(), "build", "--wheel", "--quiet", "--out-dir", str(out),
                        str(ROOT / project)], check=True, timeout=120)  # fmt: skip
    return {w.name.split("-")[0]: w for w in out.glob("*.whl")}


def test_both_wheels_carry_the_licence_and_only_their_own_package(
    wheels: dict[str, Path],
) -> None:
    for name, package in (("orbit_sdk", "orbit_sdk/"), ("orbit_server", "orbit_server/")):
        names = zipfile.ZipFile(wheels[name]).namelist()
        assert any(n.endswith("licenses/LICENSE") for n in names), name
        code = [n for n in names if ".dist-info/" not in n]
        assert code and all(n.startswith(package) for n in code), name
    sdk = zipfile.ZipFile(wheels["orbit_sdk"]).namelist()
    assert not [n for n in sdk if n.endswith(".sql")]


def test_the_sdk_wheel_installs_alone_without_server_code(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)],
                   check=True, timeout=120)  # fmt: skip
    python = venv / "bin" / "python"
    subprocess.run([_uv(), "pip", "install", "--quiet", "--python", str(python),
                    str(wheels["orbit_sdk"])], check=True, timeout=300)  # fmt: skip
    installed = subprocess.run([_uv(), "pip", "list", "--python", str(python), "--format",
                                "freeze"], check=True, capture_output=True, text=True,
                               timeout=60).stdout  # fmt: skip
    names = {line.split("==")[0].lower() for line in installed.split()}
    assert "orbit-sdk" in names
    assert not names & SERVER_ONLY
    probe = (
        "import importlib.util, orbit_sdk, orbit_sdk.worker\n"
        "assert importlib.util.find_spec('orbit_server') is None\n"
        "print(orbit_sdk.Client.__name__)\n"
    )
    ran = subprocess.run(
        [str(python), "-c", probe], check=False, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "Client"
    worker = subprocess.run([str(venv / "bin" / "orbit-worker"), "--help"], check=False,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert worker.returncode == 0 and "usage" in worker.stdout.lower()
