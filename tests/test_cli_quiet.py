"""A quiet CLI: `dbsp step` on local Spark prints no Spark start-up banner, and each line once."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def test_a_step_on_spark_prints_no_banner_and_each_line_once(tmp_path):
    shutil.copy(ROOT / "circuits" / "examples" / "my_view.yaml", tmp_path / "my_view.yaml")
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "DBSP_CONFIG")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    subprocess.run([sys.executable, "-m", "spark_jobs.examples.generators", "--data-root", str(data / "my_view")],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    # small first steps run in-process now: a profile that sends every step to Spark starts the JVM
    profile = tmp_path / "spark.yaml"
    profile.write_text((ROOT / "config" / "local.yaml").read_text().replace("engine: auto ", "engine: spark"))
    out = subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", "step", str(tmp_path / "my_view.yaml"),
                          "--data-root", str(data), "--config", str(profile)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "engine: Spark" in text  # the step ran on Spark, so a JVM started
    for banner in ("Using Spark's default log4j profile", "Setting default log level", "To adjust logging level",
                   "NativeCodeLoader"):
        assert banner not in text, text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert len([line for line in lines if "published timestep(s)" in line]) == 1, text
    # a long phase says what it got as it goes: files and rows read, views being checked
    assert "timestep 1: read input orders: 1 file(s), 60 rows" in lines, text
    assert "timestep 1: read input customers: 1 file(s)," in text and "checking view deltas (1 view(s), 1 input(s) with expectations)" in text, text
