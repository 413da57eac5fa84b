"""Run every hostile mutation of the example circuits through the validator (longer than CI).

    .venv/bin/python scripts/hostile_circuits.py [--kind KIND ...] [--source FILE ...] [--limit N]

Prints the count per kind and every failure (a crash, a slow check, a hostile file accepted, a
problem without file, line or node); exits 1 if any. CI runs a fixed sample of the same
mutations (tests/test_hostile_circuits.py).
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.circuit_mutations import all_mutations, judge  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", action="append", help="only these kinds (e.g. wrong_type, hostile_sql)")
    parser.add_argument("--source", action="append", help="only mutations of these example files")
    parser.add_argument("--limit", type=int, default=None, help="at most N mutations per kind")
    args = parser.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for m in all_mutations():
            if (args.kind and m.kind not in args.kind) or (args.source and m.source not in args.source):
                continue
            if args.limit is not None and counts[m.kind] >= args.limit:
                continue
            counts[m.kind] += 1
            if why := judge(m, Path(tmp)):
                failures.append(f"{m.kind}: {m.source}: {m.what}: {why}")
    for kind, n in sorted(counts.items()):
        print(f"{kind:16} {n:6}")
    print(f"{sum(counts.values())} mutations in {time.monotonic() - started:.0f} s; {len(failures)} failures")
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
