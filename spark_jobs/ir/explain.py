"""Human-readable views of a compiled circuit: a table (`dbsp explain`) and Graphviz DOT (`dbsp draw`)."""
from __future__ import annotations

from typing import Sequence

from spark_jobs.ir.bounds import state_bounds
from spark_jobs.ir.graph import Circuit, Node, state_of
from spark_jobs.ir.operator import is_insert_only, operator


def symbol(op: str) -> str:
    """How operator ``op`` is drawn (its ``Operator.symbol``)."""
    return operator(op).symbol


def linearity(node: Node) -> str:
    return operator(node.op).linearity


def state_role(circuit: Circuit, node: Node) -> str | None:
    """What the state of ``node`` is for, in the user's terms."""
    kind = state_of(circuit, node)
    if kind is None:
        why = operator(node.op).explain_state
        return why(circuit, node) if why is not None else None
    role = operator(node.op).state.role  # type: ignore[union-attr]
    return role(circuit, node) if role is not None else f"{kind} of {node.origin!r}"


def insert_only_nodes(query: Circuit) -> list[str]:
    """The nodes of a query circuit whose value only grows (``operator.is_insert_only``)."""
    return [n.id for n in query if is_insert_only(query, n.id)]


def explain_text(circuit: Circuit, title: str = "", insert_only: Sequence[str] = ()) -> str:
    """A table of every operator: inputs, linearity and the state it keeps; then the state, the
    views and ``insert_only``, the streams that only grow (``insert_only_nodes`` of the query)."""
    rows = [("node", "op", "linear", "inputs", "state")]
    for node in circuit:
        rows.append((node.id, symbol(node.op) + ("" if node.op == symbol(node.op) else f" ({node.op})"),
                     linearity(node), ", ".join(node.inputs) or "-", state_role(circuit, node) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [title] if title else []
    for i, r in enumerate(rows):
        lines.append("  " + "  ".join(r[j].ljust(widths[j]) for j in range(4)) + "  " + r[4])
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths) + "  " + "-" * 5)
    stateful = [n for n in circuit if state_of(circuit, n)]
    lines.append("")
    lines.append(f"State kept between timesteps: {len(stateful)} operator(s)")
    bounds = state_bounds(circuit)
    for n in stateful:
        lines.append(f"  {n.id}: {state_role(circuit, n)}")
        if n.id in bounds:  # rows no future on-time row can change: dropped at compaction
            lines.append(f"    bounded by the watermark: {bounds[n.id].describe()}")
    lines.append("Views: " + ", ".join(f"{v} <- {nid}" for v, nid in circuit.outputs.items()))
    if insert_only:
        lines.append("Insert-only (append_only inputs, no delete reaches them): " + ", ".join(insert_only))
    for scope in (n for n in circuit if n.op == "scope"):
        lines += ["", *_scope_text(scope)]
    for loop in (n for n in circuit if n.op == "iterate"):
        from spark_jobs.ir.ops.iterate import loop_text

        lines += ["", *loop_text(loop)]
    return "\n".join(lines)


def _scope_text(scope: Node) -> list[str]:
    """The nested circuit of a recursive scope: its inner clock, back edges and state."""
    body: Circuit = scope.body
    incremental = bool(scope.param("incremental"))
    ports = ", ".join(f"δ0({name})" for name in scope.inputs) or "-"
    lines = [f"Recursive scope {scope.id!r}: a fixed point over an inner clock (iterations i = 0, 1, ...); "
             f"at most {scope.param('max_iterations')} iterations (settings.max_iterations)",
             f"  reads {ports}; value = ∫ (sum over i) of {body.outputs[scope.param('outputs')[0]]!r}"
             + (", per timestep: the change of the fixed point" if incremental else "")]
    rows = [("  node", "op", "inputs", "note")]
    for n in body:
        note = operator(n.op).note
        rows.append((f"  {n.id}", symbol(n.op), ", ".join(n.inputs) or "-",
                     note.format(source=n.param("source"))))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += ["  ".join(r[j].ljust(widths[j]) for j in range(3)) + "  " + r[3] for r in rows]
    traces = [n for n in body if n.op == "integrate_nested"]
    if incremental:
        lines.append(f"  State of {scope.id!r}: {len(traces)} per-iteration trace(s) + its depth (where the "
                     f"last timestep's loop stopped):")
        lines += [f"    {scope.id}/{n.id}: 2-D deltas of {n.inputs[0]!r} by iteration, looked up by "
                  f"{', '.join(n.param('keys') or ())}" for n in traces]
        lines.append("  Stops at the first iteration whose back edges carry no change and beyond which no "
                     "trace row matches this timestep's changes; grows with (iterations × changes).")
    return lines


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def incremental_form(inc: Circuit, node_id: str) -> str:
    """How the incremental circuit computes the change of query node ``node_id``, and what it keeps."""
    n = inc[node_id]
    form = operator(n.op).delta_form
    return form(inc, n) if form is not None else symbol(n.op)


def sql_lowering_text(query: Circuit, inc: Circuit) -> str:
    """For every ``sql`` node: each operator it was lowered to, the SQL fragment it implements,
    then its incremental form (what it does with a change, what state it reads)."""
    origins = list(dict.fromkeys(n.origin for n in query if n.param("sql") is not None))
    if not origins:
        return ""
    lines = ["SQL nodes, as lowered (operator, the SQL it implements, its incremental form):"]
    for origin in origins:
        lines.append(f"  {origin}:")
        for n in query:
            if n.origin != origin or n.param("sql") is None:
                continue
            lines.append(f"    {n.id}  {symbol(n.op)}  {_short(n.param('sql'))}")
            if n.id in inc:
                lines.append(f"        Δ: {incremental_form(inc, n.id)}")
    return "\n".join(lines)


def to_dot(circuit: Circuit, title: str = "") -> str:
    """Graphviz DOT in the paper's box-and-arrow style (stateful operators drawn bold)."""
    def q(s: str) -> str:
        return '"' + s.replace('"', '\\"') + '"'

    lines = [f"digraph {q(circuit.name)} {{", "  rankdir=LR;", '  node [shape=box, fontname="Helvetica"];']
    if title:
        lines.append(f"  label={q(title)}; labelloc=t;")
    for node in circuit:
        label = symbol(node.op)
        detail = node.id if node.op != "input" else f"Δ{node.id}" if "^Δ" in circuit.name else node.id
        if node.param("sql"):  # the SQL fragment an sql node's operator implements
            detail += "\n" + _short(node.param("sql"), 40)
        attrs = [f"label={q(label + chr(10) + detail)}"]
        if node.op == "input":
            attrs.append("shape=plaintext")
        if state_of(circuit, node):
            attrs.append("penwidth=2.5")
        if node.op == "plus":
            attrs.append("shape=circle")
        lines.append(f"  {q(node.id)} [{', '.join(attrs)}];")
        for i in node.inputs:
            lines.append(f"  {q(i)} -> {q(node.id)};")
    for view, nid in circuit.outputs.items():
        lines.append(f"  {q('view:' + view)} [label={q(view)}, shape=plaintext];")
        lines.append(f"  {q(nid)} -> {q('view:' + view)};")
    lines.append("}")
    return "\n".join(lines)
