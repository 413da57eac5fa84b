"""The DAG's ``doc_md``: what a person on the Airflow UI needs to read one circuit's runs.

It shows the circuit as written (YAML), what actually runs each timestep (the ``dbsp explain``
table of the incremental circuit), which task computes which operators, and a Mermaid diagram.
Airflow 3.3's UI renders Markdown but not Mermaid: the diagram stays readable as text and
renders when pasted into GitHub or mermaid.live; ``dbsp draw`` gives PNG/SVG.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from spark_jobs.ir.compile import CompiledCircuit
from spark_jobs.ir.explain import explain_text, insert_only_nodes, symbol
from spark_jobs.ir.graph import Circuit, state_of

TIMESTEP_TEXT = (
    "One DAG run is one DBSP timestep. `plan` freezes the timestep number (last committed + 1) "
    "and the input files of this run; each stage task computes the changes of its operators "
    "into a staging area; `quality_check` runs the circuit's Great Expectations (and the built-in "
    "Z-set checks) on the staged view deltas; `commit` publishes the manifest, the only step that "
    "makes anything visible. Every task is idempotent for its run id, so retries and re-runs "
    "never apply a timestep twice; a failed `fail` expectation leaves the state at the previous "
    "timestep.")


def _fence(lang: str, body: str) -> str:
    """A fenced code block that survives backticks in the body."""
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{lang}\n{body.rstrip()}\n{fence}"


def _label(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def mermaid(circuit: Circuit, stages: Sequence, task_ids: Mapping[str, str]) -> str:
    """The incremental circuit as a Mermaid flowchart, one subgraph per Airflow task."""
    ids = {node.id: f"n{i}" for i, node in enumerate(circuit)}
    lines = ["flowchart LR", "  classDef stateful stroke-width:3px;"]
    for k, s in enumerate(stages):
        lines.append(f"  subgraph t{k}[{_label(task_ids.get(s.name, s.name))}]")
        for nid in s.nodes:
            node = circuit[nid]
            # integrators and delays are named after what they do already: I(x), z(I(x))
            text = nid if node.op in ("integrate", "delay") else f"{symbol(node.op)} {nid}"
            suffix = ":::stateful" if state_of(circuit, node) else ""
            lines.append(f"    {ids[nid]}[{_label(text)}]{suffix}")
        lines.append("  end")
    for node in circuit:
        for i in node.inputs:
            lines.append(f"  {ids[i]} --> {ids[node.id]}")
    for k, (view, nid) in enumerate(circuit.outputs.items()):
        lines.append(f"  v{k}([{_label('view ' + view)}])")
        lines.append(f"  {ids[nid]} --> v{k}")
    return "\n".join(lines)


def task_table(stages: Sequence, task_ids: Mapping[str, str]) -> str:
    """Which operators of the incremental circuit each task computes."""
    rows = ["| task | operators (incremental circuit) | waits for |", "|---|---|---|"]
    rows.append("| `plan` | freezes timestep and input files | - |")
    for s in stages:
        ops = ", ".join(f"`{n}`" for n in s.nodes)
        ups = ", ".join(f"`{task_ids.get(u, u)}`" for u in s.upstream) or "`plan`"
        rows.append(f"| `{task_ids.get(s.name, s.name)}` | {ops} | {ups} |")
    rows.append("| `quality_check` | Great Expectations + Z-set checks on the staged view deltas | all stages |")
    rows.append("| `commit` | publishes the manifest (atomic) | `quality_check` |")
    return "\n".join(rows)


def dag_doc(path: str, compiled: CompiledCircuit, stages: Sequence, task_ids: Mapping[str, str],
            submission: str) -> str:
    """Markdown for ``DAG.doc_md``."""
    spec = compiled.spec
    parts = [f"# Circuit `{spec.name}`"]
    if spec.description:
        parts.append(spec.description)
    parts += [
        TIMESTEP_TEXT,
        "**Trigger with** `mode` = `incremental` (default) or `full_refresh` (rebuild all state "
        "from the retained input files, also after editing the circuit; the committed view deltas "
        "are new view - old view).",
        f"**Circuit file:** `{path}`  \n**Schedule:** `{spec.schedule or 'none (manual or triggered)'}`"
        f"  \n**Spark:** {submission}  \n**Fingerprint:** `{compiled.fingerprint}`",
        "## Tasks", task_table(stages, task_ids),
        "## Incremental circuit (`dbsp explain`)",
        _fence("text", explain_text(compiled.incremental, f"Incremental circuit of {spec.name}",
                                    insert_only_nodes(compiled.optimized))),
        "## Diagram (Mermaid; bold = keeps state)",
        _fence("mermaid", mermaid(compiled.incremental, stages, task_ids)),
        "## Circuit YAML", _fence("yaml", spec.text),
    ]
    return "\n\n".join(parts) + "\n"
