"""``python -m tests.slt [options] PATH...``: run .test files (or folders of them), print a table
of accepted / agree / wrong / error / refused per file and the refusal reasons counted; with
``--json FILE`` every query's outcome too. Exit status 1 when any query is wrong or an error."""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from collections import Counter

from tests.slt.runner import Options, run_file


def _files(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(glob.glob(os.path.join(p, "**", "*.test"), recursive=True))
        else:
            out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.slt", description=__doc__)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--oracle", choices=("spark", "duckdb"), default="spark",
                    help="the batch answer every step is compared with (default: Spark SQL)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=64, help="views per circuit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every query's outcome here")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--accept-only", action="store_true", help="only compile each query: accepted / refused")
    ap.add_argument("--sample", type=int, default=1, help="run only every n-th accepted query (by line)")
    ap.add_argument("--subset", type=int, default=1,
                    help="take only every n-th query of a file at all (not compiled, not counted): big files")
    ap.add_argument("--files", type=int, default=1, help="take only every n-th file of a folder (by name)")
    args = ap.parse_args(argv)
    opts = Options(oracle=args.oracle, steps=args.steps, chunk=args.chunk, seed=args.seed, accept_only=args.accept_only,
                   sample=args.sample, subset=args.subset,
                   log=None if args.quiet else (lambda s: print("  " + s, file=sys.stderr, flush=True)))
    oracle = None
    totals: Counter = Counter()
    reasons: Counter = Counter()
    dumps = []
    bad = False
    header = f"{'file':<28}{'queries':>8}{'accepted':>10}{'agree':>8}{'wrong':>7}{'error':>7}{'oracle_err':>11}{'refused':>9}{'unsupp':>8}{'not run':>9}   expected (vs the file)"
    print(header)
    for path in _files(args.paths)[::args.files]:
        started = time.time()
        if oracle is None and not args.accept_only:
            from tests.slt.runner import DuckOracle, SparkOracle

            oracle = SparkOracle() if args.oracle == "spark" else DuckOracle()
        rep = run_file(path, opts, oracle)
        s = rep.summary()
        for k in ("queries", "accepted", "agree", "wrong", "error", "oracle_error", "refused", "unsupported", "not_run"):
            totals[k] += s[k]
        reasons.update(rep.refusals())
        bad |= bool(s["wrong"] or s["error"])
        print(f"{s['file']:<28}{s['queries']:>8}{s['accepted']:>10}{s['agree']:>8}{s['wrong']:>7}{s['error']:>7}"
              f"{s['oracle_error']:>11}{s['refused']:>9}{s['unsupported']:>8}{s['not_run']:>9}   {s['expected']} "
              f"({time.time() - started:.0f} s)", flush=True)
        for o in rep.outcomes:
            if o.status in ("wrong", "error"):
                print(f"    {o.status} line {o.line}: {o.sql.splitlines()[0][:100]}\n      {o.reason[:300]}")
        dumps.append({"summary": s, "unsupported": rep.unsupported,
                      "outcomes": [o.__dict__ for o in rep.outcomes if o.status != "agree" or o.expected == "differ"]})
    q = totals["queries"] or 1
    print(f"{'TOTAL':<28}{totals['queries']:>8}{totals['accepted']:>10}{totals['agree']:>8}{totals['wrong']:>7}"
          f"{totals['error']:>7}{totals['oracle_error']:>11}{totals['refused']:>9}{totals['unsupported']:>8}"
          f"{totals['not_run']:>9}"
          f"   accepted {100 * totals['accepted'] / q:.1f}%")
    if reasons:
        print("refusals by reason:")
        for r, n in reasons.most_common():
            print(f"  {n:>6}  {r}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dumps, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
