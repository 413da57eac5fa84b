"""What the tasks of a DAG run write to their logs: plain text tables, one log line per row.

Airflow 3 shows each log record as one line; JSON dumps of summaries (with ``\\u`` escapes for
the operator symbols) were hard to read, so every task ends with a table made for people:
operators with rows in and out, state rows read and written, and seconds; one PASS/WARN/FAIL
line per quality check; rows inserted and deleted per view.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> list[str]:
    """Aligned columns; ``right`` lists the columns aligned right (numbers)."""
    cells = [[str(h) for h in header]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]]


def stage_lines(summary: dict) -> list[str]:
    """The table of one stage: every incremental operator it ran. Narrow (short headers, the
    timing on its own line), so that a line fits Airflow's log panel beside its timestamp."""
    if "operators" not in summary:
        return [f"stage {summary.get('stage')}: {summary.get('skipped') or summary.get('note') or 'nothing done'}"]
    head = f"stage {summary['stage']} (timestep {summary['timestep']}, {summary['mode']}): {summary['seconds']:.2f} s"
    if summary.get("note"):
        head += f" [{summary['note']}]"
    rows = [(o["operator"], o["op"], o["rows_in"], o["rows_out"], o["state_read"], o["state_written"],
             f"{o['seconds']:.2f}") for o in summary["operators"]]
    lines = [head, f"  {summary['spark_seconds']:.2f} s in its Spark job; results staged as {summary['staged_as']}",
             *table(("operator", "op", "rows in", "out", "state read", "written", "s"), rows,
                    right=(2, 3, 4, 5, 6))]
    for name, info in (summary.get("inputs") or {}).items():
        files = info.get("files") or []
        late = f"; {info['late']}" if info.get("late") else ""  # timed inputs: late rows, watermark
        lines.append(f"input {name}: {len(files)} file(s), +{info.get('inserted')} / -{info.get('deleted')} rows{late}")
    for view, info in (summary.get("views") or {}).items():
        lines.append(f"view {view}: +{info.get('inserted')} / -{info.get('deleted')} rows (staged, not committed yet)")
    return lines + note_lines(summary)


def stages_line(summary: dict) -> str:
    """One line after a one-task timestep's stages (each stage's table was logged as it ended)."""
    if summary.get("skipped"):
        return f"stages: {summary['skipped']}"
    return f"stages: {len(summary.get('stages') or [])} stage(s) in {float(summary.get('seconds') or 0):.2f} s"


def note_lines(summary: dict) -> list[str]:
    """The notes of a task, as `dbsp step` prints them (moved data root, quarantined rows, views
    a full refresh started again)."""
    return [f"note: {n}" for n in summary.get("notes") or []]


def plan_lines(plan: dict) -> list[str]:
    if plan.get("already_committed"):
        return [f"timestep {plan['timestep']} was already committed by this run: nothing to do"]
    rows = [(name, len(files), ", ".join(f["path"].rsplit("/", 1)[-1] for f in files[:5])
             + (f" (+{len(files) - 5} more)" if len(files) > 5 else ""))
            for name, files in plan["inputs"].items()]
    way = plan.get("path") or {}  # incremental or recomputed, and why (the cost model: runtime/cost.py)
    chosen = [f"mode: {way.get('mode')}: {way['mode_reason']}"] if way.get("mode_reason") else []
    return [f"timestep {plan['timestep']} ({plan['mode']}):", *table(("input", "new files", "files"), rows, right=(1,)),
            *chosen, *note_lines(plan)]


def commit_lines(summary: dict) -> list[str]:
    rows = [(view, c["inserted"], c["deleted"]) for view, c in summary.get("views", {}).items()]
    head = f"committed timestep {summary['timestep']} ({summary['mode']})"
    if summary.get("note"):
        head += f" [{summary['note']}]"
    return [head, *table(("view", "rows inserted", "rows deleted"), rows, right=(1, 2)),
            f"quality report: {summary.get('quality_report')}", *note_lines(summary)]
