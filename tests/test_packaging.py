"""Packaging invariants: the lock keeps the pins that matter (pyspark and pyspark-client share files), and the CLI entry
point is where the code expects it."""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        assert m, f"requirements.lock line is not an exact pin: {raw!r}"
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)


def test_lock_pins_pyspark_420_matching_pyspark_client():
    pins = _lock()
    assert pins.get("pyspark") == "4.2.0"
    # pyspark-client installs into pyspark's own folder: it must be the very same version.
    if "pyspark-client" in pins:
        assert pins["pyspark-client"] == pins["pyspark"]


def test_lock_pins_pandas_below_3():
    major = int(_lock()["pandas"].split(".")[0])
    assert major < 3


def test_lock_has_the_core_stack():
    pins = _lock()
    for name in ("apache-airflow", "apache-airflow-providers-apache-spark", "great-expectations",
                 "pyyaml", "jsonschema", "duckdb", "matplotlib", "pytest"):
        assert name in pins, f"{name} missing from requirements.lock"


def test_console_script_points_to_cli_main():
    assert _pyproject()["project"]["scripts"]["dbsp"] == "spark_jobs.cli.main:main"


def test_pyproject_basics():
    proj = _pyproject()["project"]
    assert proj["name"] == "dbsp-spark"
    assert proj["requires-python"] == ">=3.11,<3.12"
    deps = " ".join(proj["dependencies"])
    assert "pandas" in deps and "<3" in deps


def test_installed_pyspark_matches_lock():
    """The environment we run in has the locked pyspark (catches the pyspark-client overwrite)."""
    import importlib.metadata as md
    import importlib.util

    want = _lock()["pyspark"]
    assert md.version("pyspark") == want
    pkg = Path(list(importlib.util.find_spec("pyspark").submodule_search_locations)[0])
    version_py = (pkg / "version.py").read_text(encoding="utf-8")
    assert f'"{want}"' in version_py or f"'{want}'" in version_py
    assert list((pkg / "jars").glob(f"spark-core_*-{want}.jar")), "Spark jars do not match the lock"


def test_make_test_installs_chromium_for_the_browser_test_before_pytest(tmp_path):
    """The README's test command (`make test`, also CI's) brings Debian's Chromium itself, so the
    browser test runs on a fresh machine instead of skipping."""
    import subprocess

    dry = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = [ln for ln in dry.splitlines() if "ensure_chromium.sh" in ln or "-m pytest" in ln]
    assert lines and "ensure_chromium.sh" in lines[0] and "-m pytest" in lines[-1], dry
    script = ROOT / "scripts" / "ensure_chromium.sh"
    present = tmp_path / "chromium"
    present.write_text("#!/bin/sh\n")
    present.chmod(0o755)
    run = subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin", "DBSP_CHROMIUM": str(present)},
                         capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == "", run.stdout  # installed: a silent no-op
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DBSP_CHROMIUM": str(tmp_path / "none"), "DBSP_NO_BROWSER": "1"})
    assert run.returncode == 0 and "browser test will be skipped" in run.stdout, run.stdout


def test_the_installer_shows_its_summary_not_its_package_list():
    """`make demo` on a fresh clone: uv's "Resolved/Installed N packages" lines, not one line per
    package; the command's exit status is kept (scripts/bootstrap.sh: summary_only)."""
    import subprocess

    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    function = re.search(r"^summary_only\(\) \{.*?^\}", script, re.S | re.M).group(0)
    fake = ("fake() { echo 'Resolved 3 packages in 1ms'; echo 'Installed 2 packages in 2ms' >&2; "
            "echo ' + pyspark==4.1.0'; echo ' - old==1'; echo ' ~ dbsp-spark==0.1'; return $1; }")
    for status in (0, 3):
        out = subprocess.run(["bash", "-c", f"set -euo pipefail\n{function}\n{fake}\nsummary_only fake {status} || "
                              "echo \"failed $?\""], capture_output=True, text=True)
        lines = out.stdout.splitlines()
        assert lines[:2] == ["Resolved 3 packages in 1ms", "Installed 2 packages in 2ms"], out
        assert not [line for line in lines if line.startswith((" +", " -", " ~"))], lines
        assert (lines[2:] == ["failed 3"]) if status else (lines[2:] == [] and out.returncode == 0), out


def test_the_installer_summary_with_the_real_uv(tmp_path):
    """The same filter around the project's own uv (.venv/bin/uv), installing one pinned package
    offline from uv's cache (filled by `make install`) into a scratch venv: real uv output keeps
    its "Installed 1 package" summary and loses its " + pyyaml==..." line."""
    import subprocess

    uv = Path(sys.executable).parent / "uv"
    assert uv.exists(), f"{uv}: the project's venv has no uv (scripts/bootstrap.sh installs it)"
    pin = next(line for line in (ROOT / "requirements.lock").read_text().splitlines() if line.startswith("pyyaml=="))
    subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(tmp_path / "v")], check=True)
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    function = re.search(r"^summary_only\(\) \{.*?^\}", script, re.S | re.M).group(0)
    command = f"summary_only {uv} pip install --offline --python {tmp_path / 'v' / 'bin' / 'python'} {pin}"
    out = subprocess.run(["bash", "-c", f"set -euo pipefail\n{function}\n{command}"], capture_output=True, text=True)
    assert out.returncode == 0, out
    lines = out.stdout.splitlines()
    assert any(re.match(r"Installed 1 package in ", line) for line in lines), lines
    assert not [line for line in lines if line.startswith((" +", " -", " ~"))], lines
