"""Human-readable views of a compiled circuit: a table (`dbsp explain`) and Graphviz DOT (`dbsp draw`)."""
from __future__ import annotations

from spark_jobs.ir.graph import BILINEAR_OPS, LINEAR_OPS, Circuit, Node, state_of

SYMBOLS = {
    "input": "in", "map": "map", "filter": "σ", "plus": "+", "negate": "−", "join": "⋈",
    "distinct": "distinct", "aggregate": "agg", "integrate": "I", "delay": "z⁻¹",
    "differentiate": "D", "distinct_h": "H", "aggregate_linear": "agg(linear)",
    "aggregate_touched": "agg(touched)", "scope": "fix (recursive scope)",
    "delta0": "δ0", "feedback": "z⁻¹ (iteration)", "integrate_nested": "I (per iteration)",
    "join_nested": "⋈ (2-D)", "distinct_nested": "H (2-D)",
}

NESTED_NOTE = {
    "delta0": "δ0: the outer value enters at iteration 0",
    "feedback": "z⁻¹ on the inner clock: reads iteration i-1 of {source!r}",
    "join_nested": "Δ(a⋈b) in 2-D: 4 terms over (this/earlier timestep) × (this/earlier iteration)",
    "distinct_nested": "distinct in 2-D: touched tuples only, 4 looked-up values each",
    "integrate_nested": "state: one trace, rows tagged _iter = i, summed over timesteps",
}


def linearity(node: Node) -> str:
    if node.op in LINEAR_OPS or node.op in ("delta0", "feedback"):
        return "linear"
    if node.op in BILINEAR_OPS or node.op == "join_nested":
        return "bilinear"
    if node.op in ("integrate", "delay", "differentiate"):
        return "linear (stream)"
    return "non-linear"


def state_role(circuit: Circuit, node: Node) -> str | None:
    """What the state of ``node`` is for, in the user's terms."""
    kind = state_of(circuit, node)
    if kind is None:
        return None
    if node.op != "integrate":
        return f"{kind} of {node.origin!r}"
    users: list[str] = []
    readers = circuit.consumers(node.id)
    for reader in list(readers):
        if reader.op == "delay":
            readers.extend(circuit.consumers(reader.id))
    for reader in readers:
        if reader.op == "join":
            side = "left" if circuit[reader.inputs[0]].inputs == (node.id,) else "right"
            users.append(f"{side} side of join {reader.origin!r}")
        elif reader.op == "distinct_h":
            users.append(f"distinct {reader.origin!r}")
        elif reader.op == "aggregate_touched":
            users.append(f"integrated input of aggregate {reader.origin!r}")
        elif reader.op not in ("delay",):
            users.append(f"{reader.op} {reader.origin!r}")
    if circuit[node.inputs[0]].param("bag"):
        users.insert(0, "the bag check: deletes must not exceed inserts")
    seen = list(dict.fromkeys(users))
    return f"integral of {node.inputs[0]!r}" + (f" (for {', '.join(seen)})" if seen else "")


def explain_text(circuit: Circuit, title: str = "") -> str:
    """A table of every operator: inputs, linearity and the state it keeps."""
    rows = [("node", "op", "linear", "inputs", "state")]
    for node in circuit:
        rows.append((node.id, SYMBOLS.get(node.op, node.op) + ("" if node.op == SYMBOLS.get(node.op) else f" ({node.op})"),
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
    for n in stateful:
        lines.append(f"  {n.id}: {state_role(circuit, n)}")
    lines.append("Views: " + ", ".join(f"{v} <- {nid}" for v, nid in circuit.outputs.items()))
    for scope in (n for n in circuit if n.op == "scope"):
        lines += ["", *_scope_text(scope)]
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
        note = NESTED_NOTE.get(n.op, "linear: applied to the delta as is" if n.op in LINEAR_OPS else "")
        rows.append((f"  {n.id}", SYMBOLS.get(n.op, n.op), ", ".join(n.inputs) or "-",
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
    if n.op == "plus" and n.inputs and all(i.startswith(node_id + "[") for i in n.inputs):
        delays = [j for t in n.inputs for j in inc[t].inputs if inc[j].op == "delay"]
        traces = list(dict.fromkeys(inc[j].inputs[0] for j in delays))
        return ("Δl⋈Δr + z⁻¹(I l)⋈Δr + Δl⋈z⁻¹(I r): joins the change with the other side's integral; "
                f"reads {', '.join(traces)}")
    if n.op == "distinct_h":
        return f"H: looks up only the changed tuples in {inc[n.inputs[1]].inputs[0]}, emits sign flips"
    if n.op == "aggregate_linear":
        return "per-group running totals from the change (state: the totals of the touched groups)"
    if n.op == "aggregate_touched":
        return (f"recomputes only the groups in the change from {n.inputs[1]}, keeps its previous "
                f"output per group")
    if n.op in LINEAR_OPS:
        return "the same operator on the change (linear, no state)"
    if n.op == "scope":
        return (f"the fixed point on 2-D changes (timestep × iteration, section 6): "
                f"{state_of(inc, n)}; see 'Recursive scope {n.id!r}' above")
    return SYMBOLS.get(n.op, n.op)


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
            lines.append(f"    {n.id}  {SYMBOLS.get(n.op, n.op)}  {_short(n.param('sql'))}")
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
        label = SYMBOLS.get(node.op, node.op)
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
