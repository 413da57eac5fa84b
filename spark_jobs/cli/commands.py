"""The `dbsp` subcommands. Each takes the parsed arguments and returns an exit code."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

from spark_jobs.cli import render
from spark_jobs.config import Config, load_config
from spark_jobs.ir.explain import explain_text, sql_lowering_text, to_dot
from spark_jobs.runtime.circuit import compile_file, find_circuit_file, open_circuit
from spark_jobs.spec import CircuitError, validate_file


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config, data_root=args.data_root)


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn the errors a user can act on into one clear message."""
    from spark_jobs.executor.recursion import RecursionLimitExceeded
    from spark_jobs.executor.session import ConnectServerUnreachable
    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.quality import ExpectationConfigError, QualityGateFailed
    from spark_jobs.state import FingerprintMismatch

    try:
        yield
    except CircuitError as exc:
        raise UserError(str(exc)) from None
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None
    except (FingerprintMismatch, RecursionLimitExceeded, ConnectServerUnreachable) as exc:
        raise UserError(str(exc)) from None
    except QualityGateFailed as exc:
        raise UserError(f"quality gate failed; nothing was committed:\n{exc.report.summary()}", exit_code=3) from None
    except ExpectationConfigError as exc:
        raise UserError(str(exc)) from None
    except InputRefused as exc:
        lines = ["input refused; nothing was committed and the files were left in place:"]
        lines += [f"  {path}: {reason}" for path, reason in exc.problems]
        raise UserError("\n".join(lines), exit_code=2) from None


def cmd_validate(args: argparse.Namespace) -> int:
    try:  # not _user_errors(): its imports (Spark, Great Expectations) would triple validate's time
        roots = _config(args).allowed_input_roots
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the profile: {exc}") from None
    failed = 0
    for path in args.files:
        problems = validate_file(path, roots)
        if problems:
            failed += 1
            for p in problems:
                print(p)
        else:
            print(f"{path}: ok")
    return 1 if failed else 0


def _compiled(args: argparse.Namespace):
    with _user_errors():
        config = _config(args)
        return compile_file(find_circuit_file(args.circuit, config), config.allowed_input_roots)


def cmd_explain(args: argparse.Namespace) -> int:
    compiled = _compiled(args)
    if args.query:
        print(explain_text(compiled.optimized, f"Query circuit of {compiled.spec.name} (after distinct consolidation)"))
        print()
    print(explain_text(compiled.incremental,
                       f"Incremental circuit of {compiled.spec.name} (fingerprint {compiled.fingerprint})"))
    lowering = sql_lowering_text(compiled.optimized, compiled.incremental)
    if lowering:
        print()
        print(lowering)
    return 0


def cmd_draw(args: argparse.Namespace) -> int:
    compiled = _compiled(args)
    graphs = {}
    if args.which in ("query", "both"):
        graphs["query"] = to_dot(compiled.optimized, f"{compiled.spec.name}: query circuit")
    if args.which in ("incremental", "both"):
        graphs["incremental"] = to_dot(compiled.incremental, f"{compiled.spec.name}: incremental circuit")
    if args.format == "dot" and not args.output:
        print("\n".join(graphs.values()))
        return 0
    if args.format != "dot" and shutil.which("dot") is None:
        raise UserError("rendering PNG/SVG needs Graphviz's `dot` (apt-get install -y graphviz); "
                        "`--format dot` works without it")
    base = args.output or compiled.spec.name
    for which, dot in graphs.items():
        out = base if len(graphs) == 1 and args.output else f"{base}.{which}.{args.format}"
        if args.format == "dot":
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(dot + "\n")
        else:
            subprocess.run(["dot", f"-T{args.format}", "-o", out], input=dot.encode(), check=True)
        print(out)
    return 0


def cmd_step(args: argparse.Namespace) -> int:
    from spark_jobs.runtime.step import run_step

    with _user_errors():
        rt = open_circuit(args.circuit, _config(args))
        report = run_step(rt, progress=_err)
    print(render.step_report(report))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.runtime.step import pending_inputs, run_step

    with _user_errors():
        rt = open_circuit(args.circuit, _config(args))
        for i in range(args.steps):
            if i > 0 and not any(pending_inputs(rt).values()):
                _err(f"no input has pending changes; stopping after {i} step(s)")
                break
            _err(f"[{i + 1}/{args.steps}] {rt.name}: running timestep {rt.store.last_committed() + 1}")
            report = run_step(rt, progress=_err)
            print(render.step_report(report))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with _user_errors():
        rt = open_circuit(args.circuit, _config(args))
        print(render.status(rt))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _user_errors():
        rt = open_circuit(args.circuit, _config(args))
        if args.view not in rt.compiled.spec.outputs:
            raise UserError(f"{rt.name} has no view {args.view!r}; views: {', '.join(rt.compiled.spec.outputs)}")
        last = rt.store.last_committed()
        if last == 0:
            raise UserError(f"{rt.name} has no committed timestep yet; run `dbsp step {args.circuit}` first")
        at = args.at if args.at is not None else last
        if not 1 <= at <= last:
            raise UserError(f"timestep {at} is not committed (last committed: {last})")
        df = rt.store.read_output_delta(args.view, at) if args.delta else rt.store.read_view(args.view, at)
        columns = rt.compiled.incremental[rt.compiled.incremental.outputs[args.view]].columns
        rows = render.collect_consolidated(df, columns)
        sys.stdout.write(render.rows(rows, list(columns), args.format, args.limit))
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    config = _config(args)
    with _user_errors():
        path = find_circuit_file(args.circuit, config)
        name = compile_file(path, config.allowed_input_roots).spec.name
    from spark_jobs.runtime.circuit import state_root
    from spark_jobs.state.fs import filesystem_for

    root = state_root(config, name)
    fs = filesystem_for(root)
    root = fs.normalize(root)
    if not fs.exists(root):
        print(f"{name}: nothing to reset ({root} does not exist)")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError(f"refusing to delete {root} without confirmation; pass --yes")
        answer = input(f"Delete all state and outputs of {name} under {root}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted")
            return 1
    fs.remove_tree(root)
    print(f"{name}: state and outputs removed ({root}); the next step starts from timestep 1 "
          f"and re-reads every input file still in the inbox")
    return 0
