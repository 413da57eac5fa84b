"""`make demo`: watch incremental view maintenance work on the example circuit.

Generates a few batches of order changes and customer snapshots for
circuits/revenue_by_region.yaml under data/demo, runs one timestep per batch with the CLI (in one
process, so Spark starts once), and prints each view change next to the view itself.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

from spark_jobs.cli.main import main as dbsp
from spark_jobs.config import PROJECT_ROOT
from spark_jobs.examples.generators import RevenueGenerator

CIRCUIT = str(PROJECT_ROOT / "circuits" / "revenue_by_region.yaml")


def banner(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)), flush=True)


def run(data_root: str, batches: int) -> int:
    if os.path.exists(data_root):
        shutil.rmtree(data_root)
    common = ["--data-root", data_root]
    banner("The circuit, compiled to its incremental form (dbsp explain)")
    dbsp(["explain", CIRCUIT, *common])
    gen = RevenueGenerator(data_root)
    for _ in range(batches):
        info = gen.write_batch()
        banner(f"Batch {info['batch']}: +{info['inserted_orders']} orders, -{info['deleted_orders']} orders, "
               f"new customers snapshot ({info['customers']} customers)")
        if dbsp(["step", CIRCUIT, *common]) != 0:
            return 1
        print("\nChange of by_region in this timestep (dbsp show --delta): -1 = old row, +1 = new row")
        dbsp(["show", CIRCUIT, "by_region", "--delta", *common])
        print("by_region now (dbsp show):")
        dbsp(["show", CIRCUIT, "by_region", *common])
    banner("Largest and smallest paid order per region")
    dbsp(["show", CIRCUIT, "order_extremes", *common])
    banner("State kept between timesteps (dbsp status)")
    dbsp(["status", CIRCUIT, *common])
    print(f"\nEverything is under {data_root}. Try: .venv/bin/dbsp show {CIRCUIT} big_spenders --data-root {data_root}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str(PROJECT_ROOT / "data" / "demo"))
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args(argv)
    return run(args.data_root, args.batches)


if __name__ == "__main__":
    sys.exit(main())
