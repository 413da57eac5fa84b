"""The note of a DAG run: what the timestep changed, readable on the run's page in the UI.

Written by the dbsp plugin's listener (``plugin.py``) when a run of a dbsp DAG ends, from what
its tasks returned (XCom): the commit's summary, or the plan of a skipped run. Markdown, at most
1000 characters (Airflow's limit for notes).
"""
from __future__ import annotations

from spark_jobs.orchestration.links import quality_url

MAX_NOTE = 1000
MAX_VIEWS = 12


def success_note(dag_id: str, commit: dict | None, plan: dict | None) -> str | None:
    """A committed timestep (``commit``), or a run skipped because no input had new files."""
    if commit and commit.get("timestep") is not None:
        views = list((commit.get("views") or {}).items())
        ins = sum(int(c.get("inserted") or 0) for _, c in views)
        dels = sum(int(c.get("deleted") or 0) for _, c in views)
        lines = [f"**timestep {commit['timestep']}** ({commit.get('mode', 'incremental')}) committed: "
                 f"+{ins} / −{dels} rows in {len(views)} view(s)", "",
                 "| view | rows inserted | rows deleted |", "|---|---:|---:|"]
        lines += [f"| {v} | {c.get('inserted', 0)} | {c.get('deleted', 0)} |" for v, c in views[:MAX_VIEWS]]
        if len(views) > MAX_VIEWS:
            lines.append(f"| … {len(views) - MAX_VIEWS} more | | |")
        lines += [""] + source_lines(plan) + [f"[quality report]({quality_url(dag_id)})"]
        return _fit(lines)
    if plan and plan.get("empty"):
        return (f"**no new input files**: timestep {plan.get('timestep')} skipped, nothing committed "
                f"(the circuit stays at timestep {int(plan.get('timestep') or 1) - 1})")
    if plan and plan.get("already_committed"):
        return f"timestep {plan.get('timestep')} was already committed by this run"
    return None


def source_lines(plan: dict | None) -> list[str]:
    """What the run read of table sources: each Delta input's version and each PostgreSQL input's
    log position (the ones its commit recorded), from the plan's frozen items."""
    from spark_jobs.executor.sources.delta_log import version_of
    from spark_jobs.executor.sources.pg_log import lsn_text, position_of

    out = []
    for name, items in ((plan or {}).get("inputs") or {}).items():
        for item in items[-1:]:
            label, base = str(item.get("name", "")), item.get("base")
            if (v := version_of(label)) is not None:
                since = f" (changes since version {base})" if base is not None else " (whole table)"
                out.append(f"input `{name}`: Delta version {v}{since}")
            elif (lsn := position_of(label)) is not None:
                since = f" (changes since {lsn_text(int(base))})" if base is not None else " (snapshot)"
                out.append(f"input `{name}`: PostgreSQL log position {lsn_text(lsn)}{since}")
    return out + ([""] if out else [])


def failure_note(dag_id: str, plan: dict | None, failed: list[str], phase: str | None = None) -> str:
    """A run that failed at ``failed`` (task ids); ``phase``: where a one-task timestep stopped."""
    what = f"timestep {plan['timestep']} ({plan.get('mode', 'incremental')})" if plan else "this run"
    where = ", ".join(f"`{t}`" for t in failed) or "a task"
    if phase:
        where += f" ({phase})"
    gate = " — the quality gate stopped the commit" if "quality_check" in failed or phase == "check" else ""
    return _fit([f"**{what} failed** at {where}{gate}; nothing was committed "
                 "(the circuit stays at its last committed timestep).", "",
                 f"[quality report]({quality_url(dag_id)})"])


def _fit(lines: list[str]) -> str:
    text = "\n".join(lines)
    return text if len(text) <= MAX_NOTE else text[:MAX_NOTE - 1] + "…"
