"""Run timesteps of the paper example in its own process against a profile (used by test_cluster).

    python -m tests.cluster_driver PROFILE DATA_ROOT STEPS [--seed N]

Writes one batch of changes before each step, runs the step, prints one line per commit.
"""
from __future__ import annotations

import sys

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import PaperExampleGenerator
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step


def main(profile: str, data_root: str, steps: int) -> int:
    rt = open_circuit(str(PROJECT_ROOT / "circuits" / "paper_example.yaml"), load_config(profile, data_root=data_root))
    gen = PaperExampleGenerator(data_root)
    for _ in range(steps):
        gen.write_batch(inserts=40, deletes=10)
        report = run_step(rt)
        print(f"committed {report.timestep}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
