"""The DAG's ``doc_md``: what a person on the Airflow UI needs to read one circuit's runs.

Airflow 3.3 shows it behind the book icon of the DAG page, as Markdown without raw HTML and
without ``data:`` URLs. So the incremental circuit is drawn as an SVG when the DAG is parsed
(``svg.py``), written once under ``$AIRFLOW_HOME/dbsp/docs/<dag>-<hash>.svg``, and linked: the
dbsp plugin serves it (``/dbsp/docs/...``, same origin as the UI, behind its login) at full size.
(Shown inline, the modal shrank a 500 px picture to 300 px: 7 px labels, measured in Chromium.)
Tables are kept narrow (the modal is ~800 px wide): tasks, the state each operator keeps,
then the YAML.
"""
from __future__ import annotations

import hashlib
import os
from typing import Mapping, Sequence

from spark_jobs.ir.compile import CompiledCircuit
from spark_jobs.ir.explain import state_role, symbol
from spark_jobs.ir.graph import state_of

DOCS_URL = "/dbsp/docs"  # served by spark_jobs/orchestration/plugin.py
DOCS_DIR_ENV = "DBSP_DOCS_DIR"


def docs_dir() -> str:
    """Where parse-time SVGs go: $DBSP_DOCS_DIR, else $AIRFLOW_HOME/dbsp/docs."""
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.environ.get(DOCS_DIR_ENV) or os.path.join(home, "dbsp", "docs")


def svg_file_name(dag_id: str, svg: str) -> str:
    return f"{dag_id}-{hashlib.sha1(svg.encode()).hexdigest()[:12]}.svg"


def publish_svg(dag_id: str, svg: str) -> str:
    """Write the SVG once (content-addressed name, atomic rename); returns its URL path."""
    name = svg_file_name(dag_id, svg)
    folder = docs_dir()
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        try:
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, f".{name}.{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(svg)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: the image is missing, the rest of the docs stands
    return f"{DOCS_URL}/{name}"


def _fence(lang: str, body: str) -> str:
    """A fenced code block that survives backticks in the body."""
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{lang}\n{body.rstrip()}\n{fence}"


def _timestep_text(per_step: bool) -> str:
    if per_step:
        return (
            "One DAG run is one DBSP timestep, run by one task, `timestep`, in one process: it plans the "
            "timestep (last committed + 1) and the input files of this run (the task ends as skipped when "
            "no input has a new file), runs every operator stage (its log shows each stage's table as the "
            "stage ends), the quality gate (the circuit's Great Expectations and the built-in Z-set checks "
            "on the view deltas), and commits the manifest, the only step that makes anything visible, "
            "then updates the view Assets. Retries never apply a timestep twice; a failed `fail` "
            "expectation leaves the state at the previous timestep and the task's log starts with the "
            "failed check and the input files behind its rows. The run's note shows the timestep and the "
            "rows each view gained and lost.")
    return (
        "One DAG run is one DBSP timestep. `plan` freezes the timestep number (last committed + 1) "
        "and the input files of this run, and skips the rest of the run when no input has a new "
        "file; each `inputs.<name>` / `stages.<node>` task computes the changes of its operators into a "
        "staging area; `quality_check` runs the circuit's Great Expectations "
        "(and the built-in Z-set checks) on the staged view deltas; `commit` publishes the "
        "manifest, the only step that makes anything visible, and updates the view Assets. "
        "Retries never apply a timestep twice; a failed `fail` expectation leaves the state at the "
        "previous timestep. The run's note shows the timestep and the rows each view gained and lost.")


def task_table(stages: Sequence, task_ids: Mapping[str, str], per_step: bool) -> str:
    """Which operators of the incremental circuit each task (``per_stage``) or each phase of the
    one task ``timestep`` (``per_step``) computes."""
    if per_step:
        rows = ["| phase of task `timestep` | computes |", "|---|---|", "| plan | timestep and input files |"]
        rows += [f"| {'input' if s.kind == 'input' else 'stage'} {s.name} | " + ", ".join(f"`{n}`" for n in s.nodes)
                 + " |" for s in stages]
        rows += ["| check | expectations + Z-set checks |", "| commit | manifest (atomic), view Assets |"]
        return "\n".join(rows)
    rows = ["| task | computes |", "|---|---|", "| `plan` | timestep and input files |"]
    for s in stages:
        ups = ", ".join(f"`{task_ids.get(u, u)}`" for u in s.upstream) or "`plan`"
        ops = ", ".join(f"`{n}`" for n in s.nodes)
        rows.append(f"| `{task_ids.get(s.name, s.name)}` | {ops} (after {ups}) |")
    rows.append("| `quality_check` | expectations + Z-set checks |")
    rows.append("| `commit` | manifest (atomic), view Assets |")
    return "\n".join(rows)


def state_table(compiled: CompiledCircuit) -> str:
    circuit = compiled.incremental
    rows = ["| operator | op | state kept between timesteps |", "|---|---|---|"]
    for node in circuit:
        if state_of(circuit, node):
            rows.append(f"| `{node.id}` | {symbol(node.op)} | {state_role(circuit, node)} |")
    return "\n".join(rows) if len(rows) > 2 else "No operator keeps state: every operator is linear."


def dag_doc(path: str, compiled: CompiledCircuit, stages: Sequence, task_ids: Mapping[str, str],
            submission: str, image_url: str | None = None) -> str:
    """Markdown for ``DAG.doc_md``."""
    spec = compiled.spec
    per_step = spec.orchestration.tasks == "per_step"
    schedule = spec.schedule or "none"
    if spec.schedule_assets:
        schedule = f"{schedule}; assets: " + ", ".join(f"`{a}`" for a in spec.schedule_assets)
    parts = [f"# Circuit `{spec.name}`"]
    if spec.description:
        parts.append(spec.description)
    parts.append("## Incremental circuit")
    if image_url:  # first; a link, not an image: the modal shrinks a picture until its labels cannot be read
        parts.append(f"**[Open the picture of the incremental circuit]({image_url})** (full size, its own page).")
    colours = ("by stage, every stage a phase of the one task `timestep`" if per_step
               else "by the Airflow task that computes them")
    parts += [
        f"Boxes are operators of the incremental circuit, coloured {colours}; a thick border keeps "
        "state. `dbsp explain` prints the same circuit as text.",
        "## A run",
        _timestep_text(per_step),
        "**Trigger → Run Parameters:** `mode` = `incremental` (default) or `full_refresh` (rebuild "
        "all state from the retained input files, also after editing the circuit; the committed view "
        "deltas are new view − old view), or `recompute` (the views recomputed from the integrated "
        "inputs the state keeps), or `apply_change` (after editing the circuit: unchanged nodes keep "
        "their state, new and changed ones are rebuilt from the state; `settings.on_change: bootstrap` "
        "does it in every run).",
        f"- **Circuit file:** `{path}`\n- **Schedule:** {schedule}\n- **Tasks:** `{spec.orchestration.tasks}`"
        f"\n- **Spark:** {submission}\n- **Fingerprint:** `{compiled.fingerprint}`",
    ]
    parts += ["## Tasks", task_table(stages, task_ids, per_step),
              "## State", state_table(compiled),
              "## Circuit YAML", _fence("yaml", spec.text)]
    return "\n\n".join(parts) + "\n"
