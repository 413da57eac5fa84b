"""The relational while loop of section 7.6 of the paper: ``x := init; while x changes: x := Q(x)``.

``iterate`` (inputs: ``init``, then the outer relations its body reads; params: body, a query
Circuit whose ``input`` nodes are the loop variable (``loop``) and those outer relations
(``imports``, in the order of inputs[1:]); output, the body node whose value is the next
iteration; max_iterations). Its value is that of the paper's while loop: apply the body to the
previous iteration's value, starting from ``init``, until an iteration changes nothing; a loop
that still changes after ``max_iterations`` applications fails the step.

Unlike ``scope`` (a least fixed point of a monotone body, semi-naive on 2-D deltas), the body may
hold any operator: aggregates, distinct, antijoins and differences of the loop, top-k, maps
computing new values.

**Incremental form** (Algorithm 4.6 with nested time, the paper's section 6 applied to the while
loop): the loop is a stream over iterations ``x_0 = init, x_i = Q(x_(i-1))``, and across
timesteps each iteration's value changes by ``Δx_i``. Iteration ``i`` of a timestep evaluates
Q^Δ, the body's own incremental circuit, on ``Δx_(i-1)`` and the imports' changes, with the
body's state *as of iteration i at the previous timestep* (each stateful body node keeps one trace
per iteration, ``<node>/<i>/<state>``; loop-invariant ones one trace, ``<node>/<state>``): that
gives ``Δx_i``. The per-iteration differences ``D_i = x_i - x_(i-1)`` are kept too (one trace
with an ``_iter`` column, ``<node>/diff``), so the step knows where the loop stops now (``x_i =
x_(i-1)`` iff ``D_i + Δx_i - Δx_(i-1) = 0``) without reading whole values, and the depth
(``<node>/depth``): past it the previous values are all equal, so iteration ``i > depth`` reads the
state of ``depth``. The view's change is ``Δx_k`` (minus the ``D_j`` of the iterations the loop no
longer runs, when it stops earlier than before). A step with no change of the loop's inputs does
nothing. The kernels run this on either engine, over the same traces (a step on one engine
continues from the state the other wrote); a step without that state (the first, a recompute)
runs the loop from ``init`` over the integrated inputs and writes it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node, make_node, state_of
from spark_jobs.ir.operator import NONLINEAR, Operator, State, operator, register
from spark_jobs.spec.model import NodeSpec, dependency_order

KERNELS = "spark_jobs.executor.kernels.iterate"
DIFF, DEPTH, VALUE = "diff", "depth", "value"
# the row groups of the body's state traces (``StateUpdate.row_group_bytes``; the store's default
# is 256 KiB): a step looks each iteration's state up by the few keys its change holds, and with
# 256 KiB groups (~10k rows) a few keys fall in most groups of a trace: a 10-edge step on 100k
# edges read 7-9 MB of the loop's 11 MB; with 32 KiB groups (profiled) 3-5.5 MB
BODY_ROW_GROUP_BYTES = 32 * 1024
_BODIES: dict[int, tuple[Circuit, Circuit]] = {}


def rule_iterate(b: Builder, node: Node, deltas: list[str]) -> str:
    """The loop on the inputs' changes (``deltas``) and, to run it from scratch, their integrals."""
    integrals = [b.integral(d) for d in deltas]
    params = node.params + (("incremental", True),)
    return b.add(node.with_(inputs=tuple(deltas) + tuple(integrals), params=params))


def incremental_body(node: Node) -> Circuit:
    """Q^Δ of the node's body (computed once per body)."""
    from spark_jobs.ir.incrementalize import incrementalize

    body = node.param("body")
    cached = _BODIES.get(id(body))
    if cached is None or cached[0] is not body:
        cached = (body, incrementalize(body))
        _BODIES[id(body)] = cached
    return cached[1]


def body_states(node: Node) -> dict[str, bool]:
    """Stateful nodes of the body's Q^Δ -> whether their state differs per iteration (it depends
    on the loop variable) or is the same at every iteration (loop-invariant: one trace)."""
    inc = incremental_body(node)
    loop = node.param("loop")
    variant: set[str] = set()
    for n in inc:
        if n.id == loop or any(i in variant for i in n.inputs):
            variant.add(n.id)
    return {n.id: n.id in variant for n in inc if state_of(inc, n) is not None}


def trace_kinds(node: Node, rest: str) -> str:
    """The kind of trace ``<node>/<rest>``: a body state's (per iteration ``<i>/<state>`` or
    shared ``<state>``), else a Z-set (diff, depth, value)."""
    head, _, tail = rest.partition("/")
    sid = tail if head.isdigit() and tail else rest
    inc = incremental_body(node)
    if sid in inc:
        state = operator(inc[sid].op).state
        return state.kind if state is not None else "zset"
    return "zset"


def _state(circuit: Circuit, node: Node) -> str:
    states = body_states(node)
    variant = sum(states.values())
    return (f"per iteration i: the body's state at i ({variant} trace(s) per iteration, "
            f"{len(states) - variant} shared), the changes D_i = x_i - x_(i-1), the depth and the value")


def _uses(circuit: Circuit, node: Node, position: int) -> str:
    return f"iterate {node.origin!r} (to run the loop from scratch: a first step, a recompute)"


def _delta_form(circuit: Circuit, node: Node) -> str:
    return ("each iteration i runs the body's incremental circuit on the change of iteration i-1, with the "
            "body's state at iteration i of the previous timestep; the loop stops where x_i = x_(i-1) now; "
            "a change of an outer relation the body reads reaches every iteration up to the old depth, a "
            "change of init only as far as it propagates (on Spark one job per iteration reached: its results "
            "computed together, to the driver while small)")


def loop_text(node: Node) -> list[str]:
    """``dbsp explain``: the loop's body, the state it keeps and what a step may recompute."""
    body: Circuit = node.param("body")
    incremental = bool(node.param("incremental"))
    lines = [f"While loop {node.id!r} (section 7.6): x_0 = {node.inputs[0]!r}, x_i = body(x_(i-1)) until "
             f"x_i = x_(i-1); at most {node.param('max_iterations')} iterations (settings.max_iterations), "
             f"past which the step fails and commits nothing",
             f"  the body reads x as {node.param('loop')!r}" + (f" and {', '.join(node.param('imports'))}"
                                                              if node.param("imports") else "")
             + f"; the next x is {body.outputs['value']!r}"]
    rows = [("  node", "op", "inputs")] + [(f"  {n.id}", n.op, ", ".join(n.inputs) or "-") for n in body]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines += [r[0].ljust(widths[0]) + "  " + r[1].ljust(widths[1]) + "  " + r[2] for r in rows]
    if incremental:
        states = body_states(node)
        lines.append(f"  State of {node.id!r}: per iteration i, the body's state at i "
                     f"({', '.join(f'{node.id}/<i>/{s}' for s, v in states.items() if v) or 'none'}); shared by all "
                     f"iterations ({', '.join(f'{node.id}/{s}' for s, v in states.items() if not v) or 'none'}); "
                     f"{node.id}/{DIFF} (D_i = x_i - x_(i-1), by iteration), {node.id}/{DEPTH} (where the last "
                     f"loop stopped) and {node.id}/{VALUE} (its value). State grows with iterations × the body's state.")
        reads = ", ".join(node.param("imports")) or "none"
        lines.append("  A step (in-process or on Spark, over the same traces) runs iteration i on the change of "
                     "iteration i-1 against the body's state at i, and stops where x_i = x_(i-1) now. A change of "
                     f"init alone costs the iterations it reaches; a change of what the body reads from outside "
                     f"({reads}) reaches every iteration up to where the last loop stopped (each iteration joins it "
                     "with its own state), so such a step runs all of them, each on the changed rows and the state "
                     "rows they look up: its work is the depth times the change, not the whole state, but it "
                     "never skips iterations. A deletion that lengthens many shortest paths changes many rows in "
                     "many iterations and costs them. On Spark each iteration reached costs one job: its change, "
                     "the comparison and the body's state deltas computed together (to the driver as local "
                     "relations while they are small, else one local checkpoint), and the commit writes those "
                     "rows, a trace per iteration and body state; a small change is still cheaper in-process. "
                     "The body's state traces have 32 KiB row groups, so a lookup of a few keys reads a few "
                     "groups. A first step and a recompute rerun the loop "
                     "from init over the integrated inputs and rewrite the per-iteration state.")
    return lines


ITERATE = register(Operator(
    "iterate", arity=None, linearity=NONLINEAR, symbol="while", consolidated=True,
    summary="the relational while loop (section 7.6): x := init; x := body(x) until it stops changing",
    state=State(_state), keeps_state=lambda c, n: bool(n.param("incremental")), trace_kinds=trace_kinds,
    incremental=rule_iterate, uses=_uses, delta_form=_delta_form,
    kernels={"spark": f"{KERNELS}:spark", "arrow": f"{KERNELS}:arrow"}))


# ---- the YAML op compiled to it (spec/ops/iterate.py names this function) ---------------------

def from_iterate(c: Circuit, n: NodeSpec, cols: dict, ctx: Any) -> Node:
    """The body as its own query circuit: the loop variable and the outer relations it reads are
    its ``input`` nodes; its nodes are translated as any node is (``Translation.body``)."""
    from spark_jobs.ir.optimize import consolidate_distinct
    from spark_jobs.spec.columns import body_columns

    own = tuple(cols[n.name])
    inner = {**cols, **body_columns(ctx.spec, n.name), n.name: own}
    body = Circuit(f"{n.name}.body", inputs={n.name: own})
    body.add(make_node(n.name, "input", out=own, name=n.name))
    imports: list[str] = []

    def ref(name: str | None) -> str | None:
        if name is None or name == n.name or name in n.body:
            return name
        if name not in imports:
            imports.append(name)
            body.inputs[name] = tuple(c[name].columns)
            body.add(make_node(name, "input", out=c[name].columns, is_set=c[name].is_set, name=name))
        return name

    for name in dependency_order(n.body):
        spec = n.body[name]
        for r in spec.references:
            ref(r)
        ctx.body(body, replace(spec, input=ref(spec.input)), inner)
    output = n.outputs[0]
    body.outputs = {"value": output}
    body = consolidate_distinct(body)
    return c.add(make_node(n.name, "iterate", [n.input, *imports], own, body=body, loop=n.name,
                           imports=tuple(imports), output=output, max_iterations=ctx.max_iterations))
