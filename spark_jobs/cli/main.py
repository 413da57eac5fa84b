"""`dbsp`: validate, explain, draw, step, plan-change, run, status, show and reset circuits by hand.

Everything a command prints as its result goes to stdout; progress and Spark's chatter go to
stderr, so `dbsp show ... --format csv > view.csv` gives a clean file.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from spark_jobs.cli import commands
from spark_jobs.errors import EXIT_CLOSED_PIPE, EXIT_INTERRUPTED


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="profile name (local, connect, cluster) or path to a profile YAML "
                                         "(default: $DBSP_CONFIG or config/local.yaml)")
    parser.add_argument("--data-root", help="where inputs, state and outputs live (overrides the profile)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dbsp", description="Incremental view maintenance (DBSP) on Spark.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check circuit YAML files; exit 1 on any error")
    p.add_argument("files", nargs="+", metavar="FILE")
    _common(p)

    p = sub.add_parser("explain", help="print the incremental circuit: operators, linearity, state")
    p.add_argument("circuit", metavar="CIRCUIT", help="YAML file or circuit name")
    p.add_argument("--query", action="store_true", help="also print the query circuit before incrementalization")
    _common(p)

    p = sub.add_parser("draw", help="render the query and incremental circuits (Graphviz DOT, or PNG/SVG with dot)")
    p.add_argument("circuit", metavar="CIRCUIT")
    p.add_argument("--which", choices=("query", "incremental", "both"), default="both")
    p.add_argument("--format", choices=("dot", "png", "svg"), default="dot")
    p.add_argument("-o", "--output", help="file to write (default: stdout for dot; CIRCUIT.<format> otherwise)")
    _common(p)

    p = sub.add_parser("step", help="run one timestep and print the rows inserted/deleted per input and view")
    p.add_argument("circuit", metavar="CIRCUIT")
    p.add_argument("--full-refresh", action="store_true",
                   help="rebuild all state from the retained input files (also after editing the circuit); "
                        "the committed view deltas are new view minus old view")
    p.add_argument("--recompute", action="store_true",
                   help="recompute the views from the integrated inputs the state keeps (not the input files), "
                        "whatever the cost model says; committed as new view minus old view")
    p.add_argument("--apply-change", action="store_true",
                   help="the circuit was edited since its state was committed: keep the state of the nodes the "
                        "edit did not touch and rebuild the others from the state (`dbsp plan-change` shows which)")
    p.add_argument("-v", "--verbose", action="store_true", help="keep Spark's own error logs on stderr")
    _common(p)

    p = sub.add_parser("plan-change", help="after editing a circuit: which nodes keep their state, which are new, "
                                           "rebuilt or removed, and what each rebuild reads (changes nothing)")
    p.add_argument("circuit", metavar="CIRCUIT")
    _common(p)

    p = sub.add_parser("run", help="run up to N timesteps, stopping when no input has pending changes")
    p.add_argument("circuit", metavar="CIRCUIT")
    p.add_argument("--steps", type=int, default=1, metavar="N")
    p.add_argument("--apply-change", action="store_true",
                   help="the circuit was edited since its state was committed: the first step keeps the state of "
                        "the nodes the edit did not touch and rebuilds the others from the state, as `dbsp step "
                        "--apply-change` (`dbsp plan-change` shows which)")
    p.add_argument("-v", "--verbose", action="store_true", help="keep Spark's own error logs on stderr")
    _common(p)

    p = sub.add_parser("status", help="last committed timestep and the size of every operator's state")
    p.add_argument("circuit", metavar="CIRCUIT")
    _common(p)

    p = sub.add_parser("show", help="print a view (or its delta) at a committed timestep")
    p.add_argument("circuit", metavar="CIRCUIT")
    p.add_argument("view", metavar="VIEW")
    p.add_argument("--at", type=int, metavar="T", help="timestep (default: last committed)")
    p.add_argument("--delta", action="store_true", help="print the change of timestep T instead of the view")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--limit", type=int, default=None, help="at most this many rows (table format only)")
    _common(p)

    p = sub.add_parser("gc", help="remove history past the retention settings: old view deltas, "
                                  "consumed input files, manifests")
    p.add_argument("circuit", metavar="CIRCUIT")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    _common(p)

    p = sub.add_parser("publish", help="bring the circuit's published Delta tables up to the last committed timestep")
    p.add_argument("circuit", metavar="CIRCUIT")
    _common(p)

    p = sub.add_parser("reset", help="delete all state, outputs and published tables of a circuit (inputs are kept)")
    p.add_argument("circuit", metavar="CIRCUIT")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _common(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        handler = getattr(commands, f"cmd_{args.command.replace('-', '_')}")
        try:
            code = int(handler(args) or 0)
        except commands.UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = exc.exit_code
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _reader_went_away()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _reader_went_away() -> int:
    """The reader of stdout (or stderr) closed it, as `dbsp explain X | head` does: stop quietly.

    Both streams are pointed at /dev/null so that Python's flush at exit does not raise again.
    Nothing half-done is left behind: a step commits with its manifest, after its work.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a replaced stream without a file descriptor
            pass
    os.close(devnull)
    return EXIT_CLOSED_PIPE  # what a Unix tool whose reader went away (`| head`) exits with


if __name__ == "__main__":
    sys.exit(main())
