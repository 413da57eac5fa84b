"""Entry point for one task of a DAG run in its own Spark application (spark-submit).

    spark-submit .../stage_main.py --circuit circuits/x.yaml --run-id RUN --step stage --stage joined

The same functions run in-process when the profile uses a local session or Spark Connect.
"""
from __future__ import annotations

import argparse
import json
import sys

from spark_jobs.config import load_config
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit

STEPS = timestep.STEPS


def run_task(circuit: str, run_id: str, step: str, stage: str | None = None, mode: str = "incremental",
             config: str | None = None) -> dict:
    """Run one task of a timestep and return its summary (logged by Airflow)."""
    return timestep.run_task(open_circuit(circuit, load_config(config)), step, run_id, stage, mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--circuit", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--step", required=True, choices=STEPS)
    parser.add_argument("--stage")
    parser.add_argument("--mode", default="incremental", choices=timestep.MODES)
    parser.add_argument("--config")
    args = parser.parse_args(argv)
    summary = run_task(args.circuit, args.run_id, args.step, args.stage, args.mode, args.config)
    print(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
