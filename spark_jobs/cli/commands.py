"""The `dbsp` subcommands. Each takes the parsed arguments and returns an exit code."""
from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from spark_jobs.cli import render
from spark_jobs.config import Config, load_config
from spark_jobs.errors import EXIT_FAILED, EXIT_QUALITY, DbspError
from spark_jobs.ir.explain import explain_text, insert_only_nodes, sql_lowering_text, to_dot
from spark_jobs.runtime.circuit import compile_file, find_circuit_file, open_circuit
from spark_jobs.spec import CircuitError, load_circuit, validate_file
from spark_jobs.spec.shared_inputs import shared_folder_warnings


class UserError(DbspError):
    """A problem the user can fix, found by the CLI itself; printed without a traceback."""
    exit_code = EXIT_FAILED

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config, data_root=args.data_root)


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def circuit_expressions(spec) -> dict[str, list[str]]:
    """Node name -> the expression strings it holds (to name the node an error comes from)."""
    out: dict[str, list[str]] = {}

    def add(nodes) -> None:
        for n in nodes.values():
            out[n.name] = [e for e in [n.where, *(x for _, x in n.columns), *(a.arg for a in n.aggregates)] if e]
            add(n.body)
    add(spec.nodes)
    return out


def command_for(args: argparse.Namespace, command: str, *extra: str) -> str:
    """A `dbsp` command line on the same circuit, as it can be pasted: the circuit as the user
    named it (a path works as well as a name) and the same profile and data root."""
    words = ["dbsp", command, args.circuit, *extra]
    for flag, value in (("--config", getattr(args, "config", None)), ("--data-root", getattr(args, "data_root", None))):
        if value:
            words += [flag, value]
    return shlex.join(words)


def reset_command(args: argparse.Namespace) -> str:
    """The `dbsp reset` that rebuilds this circuit's state (see ``command_for``)."""
    return command_for(args, "reset", "--yes")


def state_version_warning(circuit: str, state_fingerprint: str | None, circuit_fingerprint: str,
                          reset: str) -> str | None:
    """The warning `show` and `status` print when the committed state was built by another
    version of the circuit (its fingerprint differs from the circuit file's); None otherwise."""
    if state_fingerprint is None or state_fingerprint == circuit_fingerprint:
        return None
    return (f"warning: the committed state of {circuit!r} belongs to another version of the circuit "
            f"(state fingerprint {state_fingerprint}, the circuit file now has {circuit_fingerprint}): "
            f"what follows is the old circuit's result. Rebuild it with `{reset}`.")


def _warn_if_other_version(rt, args: argparse.Namespace) -> None:
    manifest = rt.committed.manifest()  # no Spark
    warning = state_version_warning(rt.name, manifest.fingerprint if manifest else None, rt.compiled.fingerprint,
                                    reset_command(args))
    if warning:
        _err(warning)


@contextmanager
def _user_errors(args: argparse.Namespace | None = None, opened: dict | None = None) -> Iterator[None]:
    """Turn the errors a user can act on into one clear message. ``args``: the command's, to print
    a reset command that can be pasted; ``opened`` (filled by the command once it has opened the
    circuit: {"rt": runtime}) lets a data error name its node.

    An error of the project says itself whether it is the user's to act on and how the command
    ends (``DbspError.exit_code``, ``user_message``; ``spark_jobs/errors.py``): no list of classes
    here, and no import of the modules that define them (commands that read committed state
    import no pyspark)."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, DbspError) and exc.exit_code is not None:  # None: a signal or a bug
            message = exc.user_message(reset_command(args) if args is not None else None)
            if exc.exit_code == EXIT_QUALITY:  # and the input files behind the failing rows
                message += _culprits(exc, (opened or {}).get("rt"))
            raise UserError(message, exit_code=exc.exit_code) from None
        if isinstance(exc, FileNotFoundError):
            raise UserError(str(exc)) from None
        # a value that broke Spark's arithmetic: one line, not a Java trace
        if "pyspark" not in sys.modules:  # no Spark ran: not a data error
            raise
        from spark_jobs.runtime.errors import analysis_error, data_error

        rt = (opened or {}).get("rt")
        expressions = circuit_expressions(rt.compiled.spec) if rt is not None else {}
        message = data_error(exc, expressions) or analysis_error(exc, expressions)
        if message is None:
            raise
        raise UserError(message) from None


def _culprits(exc, rt) -> str:
    """The input files behind the failing rows (the step's files are still pending: nothing was
    committed), as the DAG's quality_check task names them."""
    if exc.context:
        return "\n" + exc.context
    if rt is None:
        return ""
    from spark_jobs.runtime.culprits import explain_failure, pending_plan

    try:
        text = explain_failure(rt, pending_plan(rt), exc.report)
    except Exception:  # noqa: BLE001 - naming files is a courtesy; the gate's verdict stands
        return ""
    return "\n" + text if text else ""


LOG4J_CLI = Path(__file__).resolve().parents[2] / "config" / "log4j2-cli.properties"


def _quiet_spark(rt, verbose: bool) -> None:
    """Spark logs a failed task's Java stack trace at ERROR (and PySpark the query context of a
    failed expression, with the stack again); the CLI says what went wrong itself. A local
    driver started later logs errors only and prints no start-up banner (``LOG4J_CLI``)."""
    if verbose:
        return
    if LOG4J_CLI.exists() and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        os.environ["PYSPARK_SUBMIT_ARGS"] = (f'--driver-java-options "-Dlog4j2.configurationFile=file:{LOG4J_CLI}" '
                                             "pyspark-shell")
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    rt.quiet_spark("FATAL")  # applied if and when a step starts Spark


def cmd_validate(args: argparse.Namespace) -> int:
    try:  # not _user_errors(): its imports (Spark, Great Expectations) would triple validate's time
        roots = _config(args).allowed_input_roots
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the profile: {exc}") from None
    failed, loaded = 0, []
    for path in args.files:
        problems = validate_file(path, roots)
        spec = None
        if not problems:
            spec = load_circuit(path, roots)
            loaded.append((path, spec))
            if args.data_root:  # the folders too, when the user names the data root
                from spark_jobs.runtime.input_folders import folder_problems

                problems = folder_problems(path, spec, args.data_root)
        if problems:
            failed += 1
            for p in problems:
                print(p)
        else:
            print(f"{path}: ok")
    for warning in shared_folder_warnings(loaded + _neighbours(args, roots, loaded), [p for p, _ in loaded]):
        print(warning)
    return 1 if failed else 0


def _neighbours(args: argparse.Namespace, roots, loaded: list) -> list:
    """The other circuits of the profile's circuits folder (they share the data root), loaded
    quietly: a broken neighbour is its own file's problem."""
    try:
        folder = Path(_config(args).circuits_dir)
    except (OSError, ValueError):
        return []
    named = {os.path.realpath(p) for p, _ in loaded}
    out = []
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        if os.path.realpath(path) in named:
            continue
        try:
            out.append((str(path), load_circuit(str(path), roots)))
        except CircuitError:
            pass
    return out


def _compiled(args: argparse.Namespace):
    with _user_errors(args):
        config = _config(args)
        return compile_file(find_circuit_file(args.circuit, config), config.allowed_input_roots)


def cmd_explain(args: argparse.Namespace) -> int:
    compiled = _compiled(args)
    growing = insert_only_nodes(compiled.optimized)
    if args.query:
        print(explain_text(compiled.optimized, f"Query circuit of {compiled.spec.name} (after distinct consolidation)",
                           growing))
        print()
    print(explain_text(compiled.incremental,
                       f"Incremental circuit of {compiled.spec.name} (fingerprint {compiled.fingerprint})", growing))
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


def _published(report) -> int:
    """Exit code of a committed step: 1 when a view could not be published (the step is
    committed all the same; the next step or `dbsp publish` retries)."""
    if report.published is not None and report.published.failed:
        _err("the timestep is committed, but publishing failed; `dbsp publish` (or the next step) retries")
        return 1
    return 0


def cmd_step(args: argparse.Namespace) -> int:
    from spark_jobs.runtime.step import run_step
    from spark_jobs.runtime.writer import process_lease

    opened: dict = {}
    with _user_errors(args, opened):
        rt = opened["rt"] = open_circuit(args.circuit, _config(args))
        with process_lease(rt):  # before Spark starts: a second writer is refused at once
            _quiet_spark(rt, args.verbose)
            report = run_step(rt, progress=_err, full_refresh=args.full_refresh,
                              recompute=bool(getattr(args, "recompute", False)),
                              apply_change=bool(getattr(args, "apply_change", False)))
    print(render.step_report(report))
    return _published(report)


def cmd_plan_change(args: argparse.Namespace) -> int:
    """Reads manifests only: no Spark, nothing written."""
    from spark_jobs.runtime.change import plan_change

    with _user_errors(args):
        rt = open_circuit(args.circuit, _config(args))
        plan = plan_change(rt)
        if plan is None:
            last = rt.committed.last_committed()
            print(f"circuit {rt.name}: " + ("nothing committed yet: the first step loads every node" if last == 0
                                            else f"unchanged since timestep {last}: nothing to apply"))
            return 0
        print("\n".join(plan.lines({n.id: n.origin for n in rt.compiled.incremental})))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.runtime.step import pending_inputs, run_step
    from spark_jobs.runtime.writer import process_lease

    opened: dict = {}
    with _user_errors(args, opened):
        rt = opened["rt"] = open_circuit(args.circuit, _config(args))
        with process_lease(rt):  # one lease for every step of the run, taken before Spark starts
            _quiet_spark(rt, args.verbose)
            for i in range(args.steps):
                if i > 0 and not any(pending_inputs(rt).values()):
                    _err(f"no input has pending changes; stopping after {i} step(s)")
                    break
                _err(f"[{i + 1}/{args.steps}] {rt.name}: running timestep {rt.store.last_committed() + 1}")
                # an edit is applied by the first step; later ones find the circuit unchanged
                report = run_step(rt, progress=_err, apply_change=i == 0 and bool(getattr(args, "apply_change", False)))
                print(render.step_report(report))
                if _published(report):
                    return 1
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Reads manifests (and the published tables' logs) only: no Spark."""
    from spark_jobs.publish import table_states

    with _user_errors(args):
        rt = open_circuit(args.circuit, _config(args))
        _warn_if_other_version(rt, args)
        print(render.status(rt, table_states(rt.config, rt.compiled.spec)))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Reads the committed view with pyarrow (``state.arrow_read``): no Spark, no JVM."""
    from spark_jobs.state.arrow_read import read_delta, read_view

    with _user_errors(args):
        rt = open_circuit(args.circuit, _config(args))
        if args.view not in rt.compiled.spec.outputs:
            raise UserError(f"{rt.name} has no view {args.view!r}; views: {', '.join(rt.compiled.spec.outputs)}")
        store = rt.committed
        last = store.last_committed()
        if last == 0:
            raise UserError(f"{rt.name} has no committed timestep yet; run `{command_for(args, 'step')}` first")
        _warn_if_other_version(rt, args)
        at = args.at if args.at is not None else last
        if not 1 <= at <= last:
            raise UserError(f"timestep {at} is not committed (last committed: {last})")
        table = read_delta(store, args.view, at) if args.delta else read_view(store, args.view, at)
        columns = rt.compiled.incremental[rt.compiled.incremental.outputs[args.view]].columns
        rows = render.table_rows(table, columns)
        sys.stdout.write(render.rows(rows, list(columns), args.format, args.limit))
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    """Retention by hand (the same as after every commit); reads manifests and lists files: no Spark."""
    from contextlib import nullcontext

    from spark_jobs.runtime.retention import apply_retention
    from spark_jobs.runtime.writer import process_lease

    with _user_errors(args):
        rt = open_circuit(args.circuit, _config(args))
        with nullcontext() if args.dry_run else process_lease(rt):  # removing history is writing
            print(apply_retention(rt, rt.committed, dry_run=args.dry_run).text())
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    """Bring the published tables up to the last committed timestep (no Spark): repairs a crash
    between a commit and its publish, or publishes after `views.enabled` was switched on."""
    from spark_jobs.publish import publish_views

    from spark_jobs.publish.postgres_sink import describe_results, sink_views  # imports no Spark

    with _user_errors(args):
        rt = open_circuit(args.circuit, _config(args))
        report = publish_views(rt, progress=_err)
        sunk = sink_views(rt.compiled.spec, rt.committed, _err)  # database sinks (outputs.<view>.sink) too
    print("\n".join([report.summary(), *describe_results(sunk)]))
    return 1 if report.failed else 0


def cmd_reset(args: argparse.Namespace) -> int:
    config = _config(args)
    with _user_errors(args):
        path = find_circuit_file(args.circuit, config)
        compiled = compile_file(path, config.allowed_input_roots)
        name = compiled.spec.name
    from spark_jobs.publish import published_tables, removal_problems, remove_tables
    from spark_jobs.runtime.circuit import state_root
    from spark_jobs.state.fs import filesystem_for

    from spark_jobs.state.lease import Lease, new_owner

    root = state_root(config, name)
    fs = filesystem_for(root)
    root = fs.normalize(root)
    with _user_errors():
        tables = published_tables(config, compiled.spec)
    refused = removal_problems(config, compiled.spec)
    if fs.is_link(root):
        refused.append(f"its state folder {root} is a symbolic link (to {os.path.realpath(root)}), not its own")
    if refused:
        raise UserError(f"refusing to reset {name}: " + "; ".join(refused) + "; nothing was deleted")
    if not fs.exists(root) and not tables:
        print(f"{name}: nothing to reset ({root} does not exist)")
        return 0
    what = ", ".join([root] + tables)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError(f"refusing to delete {what} without confirmation; pass --yes")
        answer = input(f"Delete all state, outputs and published tables of {name} ({what})? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted")
            return 1
    if fs.exists(root):
        with _user_errors():
            Lease(fs, root, new_owner(), circuit=name).acquire()  # never under a running writer
    fs.remove_tree(root)  # the lease goes with it
    with _user_errors():
        remove_tables(config, compiled.spec)
    print(f"{name}: state, outputs and published tables removed ({what}); the next step starts from "
          f"timestep 1 and re-reads every input file still in the inbox")
    return 0
