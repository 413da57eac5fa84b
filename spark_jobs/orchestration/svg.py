"""The incremental circuit as an SVG picture, drawn in pure Python (no graphviz on the machine).

Layout, top to bottom (Airflow's docs modal is narrow and scrolls down): operators in rows by
their longest distance from an input, ordered within a row by the mean position of their
predecessors (fewer crossings); an edge that skips rows passes through a waypoint in each row
it crosses, so it runs between boxes, not through them. One box per operator, coloured by its
stage (under ``per_stage`` a stage is an Airflow task), a thick border where the operator keeps
state between timesteps, views as rounded boxes at the bottom, a legend saying what the colours
mean in the circuit's orchestration mode (wrapped to the picture's width). The picture has its
size in pixels and a ``viewBox``; the DAG docs link to it, and a browser opens it at that size
(a wide circuit scrolls rather than shrinking its labels).
"""
from __future__ import annotations

from html import escape
from typing import Mapping, Sequence

from spark_jobs.ir.explain import symbol
from spark_jobs.ir.graph import Circuit, state_of

PALETTE = ("#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe", "#cffafe", "#fee2e2", "#e5e7eb",
           "#d9f99d", "#fde68a")
CHAR_W, BOX_H, GAP_X, GAP_Y, WAY_W, PAD, FONT = 7.2, 30, 18, 34, 10, 16, 12
MIN_WIDTH = 480  # the legend wraps to at least this width


def _label(circuit: Circuit, node_id: str) -> str:
    node = circuit[node_id]
    if node.op in ("integrate", "delay"):
        return node_id  # named after what they do already: I(x), z(I(x))
    return f"{symbol(node.op)} {node_id}"


def _layers(circuit: Circuit) -> dict[str, int]:
    layer: dict[str, int] = {}
    for node in circuit:  # topological order
        layer[node.id] = max((layer[i] + 1 for i in node.inputs), default=0)
    return layer


def _routes(layer: dict[str, int], width: dict[str, float], edges: list[tuple[str, str]]
            ) -> tuple[dict[tuple[str, str], list[str]], dict[str, list[str]]]:
    """Waypoints of every edge (one per row it crosses) and every box's predecessors."""
    routes: dict[tuple[str, str], list[str]] = {}
    preds: dict[str, list[str]] = {key: [] for key in layer}
    for src, dst in edges:
        hops, prev = [], src
        for row in range(layer[src] + 1, layer[dst]):
            way = f"~{src}>{dst}@{row}"
            layer[way], width[way], preds[way] = row, WAY_W, [prev]
            hops.append(way)
            prev = way
        preds[dst].append(prev)
        routes[(src, dst)] = hops
    return routes, preds


def _place(layer: dict[str, int], width: dict[str, float], preds: dict[str, list[str]]
           ) -> tuple[dict[str, tuple[float, float]], float]:
    """Top-left corner of every box and waypoint, and the widest row's width."""
    rows: dict[int, list[str]] = {}
    for key, row in layer.items():
        rows.setdefault(row, []).append(key)
    centre: dict[str, float] = {}
    for row in sorted(rows):  # barycentre order, then left to right
        members = rows[row]
        if row > 0:
            members.sort(key=lambda k: sum(centre[p] for p in preds[k]) / max(len(preds[k]), 1))
        x = 0.0
        for key in members:
            centre[key] = x + width[key] / 2
            x += width[key] + GAP_X
    row_width = {row: sum(width[k] for k in m) + GAP_X * (len(m) - 1) for row, m in rows.items()}
    widest = max(row_width.values(), default=0.0)
    pos = {}
    for row, members in rows.items():
        shift = PAD + (widest - row_width[row]) / 2
        for key in members:
            pos[key] = (shift + centre[key] - width[key] / 2, PAD + row * (BOX_H + GAP_Y))
    return pos, widest


def _legend(heading: str, names: list[tuple[str, str]], width: float, top: float) -> tuple[list[str], float]:
    """What the colours mean (``heading``, one line) and one swatch per colour, wrapped to
    ``width``; returns the SVG elements and the height used."""
    out = [f'<text x="{PAD}" y="{top + 10:.0f}" font-weight="bold">{escape(heading)}</text>'] if heading else []
    x, y = PAD, top + (18 if heading else 0)
    for name, fill in [*names, ("", "")]:
        item = 16 + len(name or "(thick border: keeps state)") * CHAR_W + 14
        if x > PAD and x + item > width - PAD:
            x, y = PAD, y + 18
        if name:
            out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="12" height="12" fill="{fill}" stroke="#333"/>'
                       f'<text x="{x + 16:.0f}" y="{y + 10:.0f}">{escape(name)}</text>')
        else:
            out.append(f'<text x="{x:.0f}" y="{y + 10:.0f}" fill="#444">(thick border: keeps state)</text>')
        x += item
    return out, y + 18 - top


def legend_for(stages: Sequence, task_ids: Mapping[str, str], per_step: bool) -> tuple[str, list[str]]:
    """What a colour means in each orchestration mode: under ``per_stage`` the Airflow task that
    computes the operator (``inputs.<name>`` / ``stages.<name>``); under ``per_step`` the one
    task ``timestep`` runs every stage, so a colour is a stage of that task (its log has a table
    per stage), named once each, not the task's name over and over."""
    if per_step:
        return ('Colour: a stage of the one task "timestep" (per_step)',
                [f"{'input' if s.kind == 'input' else 'stage'} {s.name}" for s in stages])
    return ("Colour: the Airflow task computing it (per_stage)", [task_ids.get(s.name, s.name) for s in stages])


def circuit_svg(circuit: Circuit, stages: Sequence, task_ids: Mapping[str, str], title: str = "",
                per_step: bool = False) -> str:
    """The SVG text of ``circuit`` with its operators coloured by stage (``stages[i].nodes``) and
    a legend saying what the colours mean under the circuit's orchestration mode (``legend_for``)."""
    layer = _layers(circuit)
    views = list(circuit.outputs.items())
    width = {n.id: len(_label(circuit, n.id)) * CHAR_W + 18 for n in circuit}
    last = max(layer.values(), default=0) + 1
    for view, _ in views:
        width[f"view:{view}"] = len(f"view {view}") * CHAR_W + 24
        layer[f"view:{view}"] = last
    edges = [(i, n.id) for n in circuit for i in n.inputs] + [(nid, f"view:{v}") for v, nid in views]
    routes, preds = _routes(layer, width, edges)
    pos, widest = _place(layer, width, preds)
    total_w = max(widest + 2 * PAD, MIN_WIDTH)
    if widest + 2 * PAD < MIN_WIDTH:  # centre a narrow graph above the legend
        pos = {k: (x + (MIN_WIDTH - widest - 2 * PAD) / 2, y) for k, (x, y) in pos.items()}
    graph_h = PAD + (last + 1) * (BOX_H + GAP_Y) - GAP_Y
    heading, names = legend_for(stages, task_ids, per_step)
    legend, legend_h = _legend(heading, [(name, PALETTE[k % len(PALETTE)]) for k, name in enumerate(names)],
                               total_w, graph_h + 14)
    total_h = graph_h + 14 + legend_h + PAD
    colour = {nid: PALETTE[k % len(PALETTE)] for k, s in enumerate(stages) for nid in s.nodes}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {total_w:.0f} {total_h:.0f}" '
           f'width="{total_w:.0f}" height="{total_h:.0f}" '
           f'font-family="sans-serif" font-size="{FONT}" role="img" aria-label="{escape(title or "circuit")}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>']
    if title:
        out.append(f"<title>{escape(title)}</title>")

    def mid_x(key: str) -> float:
        return pos[key][0] + width[key] / 2

    for (src, dst), hops in routes.items():  # edges first, boxes on top
        points = [(mid_x(src), pos[src][1] + BOX_H)]
        for way in hops:  # through the row: in at its top, out at its bottom
            points += [(mid_x(way), pos[way][1]), (mid_x(way), pos[way][1] + BOX_H)]
        points.append((mid_x(dst), pos[dst][1]))
        d = f"M {points[0][0]:.1f} {points[0][1]:.1f}"
        for (x1, y1), (x2, y2) in zip(points, points[1:]):
            mid = (y1 + y2) / 2
            d += f" C {x1:.1f} {mid:.1f}, {x2:.1f} {mid:.1f}, {x2:.1f} {y2:.1f}"
        out.append(f'<path d="{d}" fill="none" stroke="#555" stroke-width="1.2" marker-end="url(#arrow)"/>')
    for node in circuit:
        x0, y0 = pos[node.id]
        stateful = state_of(circuit, node) is not None
        out.append(f'<g><title>{escape(node.id)} ({escape(node.op)})'
                   f'{" - keeps state" if stateful else ""}</title>'
                   f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{width[node.id]:.1f}" height="{BOX_H}" rx="4" '
                   f'fill="{colour.get(node.id, "#f3f4f6")}" stroke="#333" stroke-width="{3 if stateful else 1}"/>'
                   f'<text x="{mid_x(node.id):.1f}" y="{y0 + BOX_H / 2 + 4:.1f}" '
                   f'text-anchor="middle">{escape(_label(circuit, node.id))}</text></g>')
    for view, _ in views:
        key = f"view:{view}"
        x0, y0 = pos[key]
        out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{width[key]:.1f}" height="{BOX_H}" rx="15" '
                   f'fill="#fff" stroke="#111" stroke-width="1.5"/><text x="{mid_x(key):.1f}" '
                   f'y="{y0 + BOX_H / 2 + 4:.1f}" text-anchor="middle" font-weight="bold">view {escape(view)}</text>')
    out += legend
    out.append("</svg>")
    return "\n".join(out)
