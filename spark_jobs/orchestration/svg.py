"""The incremental circuit as an SVG picture, drawn in pure Python (no graphviz on the machine).

Layout: operators in columns by their longest distance from an input (data flows left to
right), ordered within a column by the mean row of their predecessors (fewer crossings), one
box per operator coloured by the Airflow task that computes it, a thick border where the
operator keeps state between timesteps, views as rounded boxes at the right, edges as curves
with arrow heads. The picture scales to its container (``viewBox``, ``width=100%``), so it
fits Airflow's docs modal.
"""
from __future__ import annotations

from html import escape
from typing import Mapping, Sequence

from spark_jobs.ir.explain import SYMBOLS
from spark_jobs.ir.graph import Circuit, state_of

PALETTE = ("#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe", "#cffafe", "#fee2e2", "#e5e7eb",
           "#d9f99d", "#fde68a")
CHAR_W, BOX_H, COL_GAP, ROW_GAP, PAD, FONT = 7.2, 34, 60, 18, 16, 12


def _label(circuit: Circuit, node_id: str) -> str:
    node = circuit[node_id]
    if node.op in ("integrate", "delay"):
        return node_id  # named after what they do already: I(x), z(I(x))
    return f"{SYMBOLS.get(node.op, node.op)} {node_id}"


def _layers(circuit: Circuit) -> dict[str, int]:
    layer: dict[str, int] = {}
    for node in circuit:  # topological order
        layer[node.id] = max((layer[i] + 1 for i in node.inputs), default=0)
    return layer


def circuit_svg(circuit: Circuit, stages: Sequence, task_ids: Mapping[str, str], title: str = "") -> str:
    """The SVG text of ``circuit`` with its operators coloured by stage (``stages[i].nodes``)."""
    layer = _layers(circuit)
    views = list(circuit.outputs.items())
    width_of = {n.id: len(_label(circuit, n.id)) * CHAR_W + 20 for n in circuit}
    last = max(layer.values(), default=0) + 1
    for view, _ in views:
        width_of[f"view:{view}"] = len(f"view {view}") * CHAR_W + 24
        layer[f"view:{view}"] = last
    edges = [(i, n.id) for n in circuit for i in n.inputs] + [(nid, f"view:{v}") for v, nid in views]
    # an edge that skips columns runs through a waypoint in each column it crosses, so that it is
    # ordered with the boxes there and passes between them, not through them
    routes: dict[tuple[str, str], list[str]] = {}
    preds: dict[str, list[str]] = {key: [] for key in layer}
    for src, dst in edges:
        hops, prev = [], src
        for col in range(layer[src] + 1, layer[dst]):
            way = f"~{src}>{dst}@{col}"
            layer[way], width_of[way] = col, 0.0
            preds[way] = [prev]
            hops.append(way)
            prev = way
        preds[dst].append(prev)
        routes[(src, dst)] = hops
    columns: dict[int, list[str]] = {}
    for key, col in layer.items():
        columns.setdefault(col, []).append(key)
    row: dict[str, float] = {}
    for col in sorted(columns):
        members = columns[col]
        if col > 0:
            members.sort(key=lambda k: sum(row[p] for p in preds[k]) / max(len(preds[k]), 1))
        for i, key in enumerate(members):
            row[key] = float(i)
    col_x, col_w, x = {}, {}, PAD
    for col in sorted(columns):
        col_x[col], col_w[col] = x, max(width_of[k] for k in columns[col])
        x += col_w[col] + COL_GAP
    step = {k: (BOX_H + ROW_GAP if not k.startswith("~") else BOX_H * 0.6) for k in layer}
    heights = {col: sum(step[k] for k in members) for col, members in columns.items()}
    tallest = max(heights.values(), default=BOX_H)
    pos = {}
    for col, members in columns.items():
        y = PAD + (tallest - heights[col]) / 2
        for key in members:
            pos[key] = (col_x[col], y)
            y += step[key]
    legend = [(task_ids.get(s.name, s.name), PALETTE[k % len(PALETTE)]) for k, s in enumerate(stages)]
    legend_w = PAD + sum(16 + len(name) * CHAR_W + 14 for name, _ in legend) + 26 * CHAR_W
    width = max(x - COL_GAP + PAD, legend_w)
    height = PAD * 2 + tallest + 30
    colour = {nid: PALETTE[k % len(PALETTE)] for k, s in enumerate(stages) for nid in s.nodes}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" width="100%" '
           f'font-family="sans-serif" font-size="{FONT}" role="img" aria-label="{escape(title or "circuit")}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>']
    if title:
        out.append(f"<title>{escape(title)}</title>")

    def centre_y(key: str) -> float:
        return pos[key][1] + (BOX_H / 2 if not key.startswith("~") else 0)

    for (src, dst), hops in routes.items():  # edges first, boxes on top
        points = [(pos[src][0] + width_of[src], centre_y(src))]
        for way in hops:  # through the column: in at its left edge, out at its right edge
            points += [(pos[way][0], centre_y(way)), (pos[way][0] + col_w[layer[way]], centre_y(way))]
        points.append((pos[dst][0], centre_y(dst)))
        d = f"M {points[0][0]:.1f} {points[0][1]:.1f}"
        for (x1, y1), (x2, y2) in zip(points, points[1:]):
            mid = (x1 + x2) / 2
            d += f" C {mid:.1f} {y1:.1f}, {mid:.1f} {y2:.1f}, {x2:.1f} {y2:.1f}"
        out.append(f'<path d="{d}" fill="none" stroke="#555" stroke-width="1.2" marker-end="url(#arrow)"/>')
    for node in circuit:
        x0, y0 = pos[node.id]
        stateful = state_of(circuit, node) is not None
        out.append(f'<g><title>{escape(node.id)} ({escape(node.op)})'
                   f'{" - keeps state" if stateful else ""}</title>'
                   f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{width_of[node.id]:.1f}" height="{BOX_H}" rx="4" '
                   f'fill="{colour.get(node.id, "#f3f4f6")}" stroke="#333" stroke-width="{3 if stateful else 1}"/>'
                   f'<text x="{x0 + width_of[node.id] / 2:.1f}" y="{y0 + BOX_H / 2 + 4:.1f}" '
                   f'text-anchor="middle">{escape(_label(circuit, node.id))}</text></g>')
    for view, _ in views:
        key = f"view:{view}"
        x0, y0 = pos[key]
        out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{width_of[key]:.1f}" height="{BOX_H}" rx="16" '
                   f'fill="#fff" stroke="#111" stroke-width="1.5"/><text x="{x0 + width_of[key] / 2:.1f}" '
                   f'y="{y0 + BOX_H / 2 + 4:.1f}" text-anchor="middle" font-weight="bold">view {escape(view)}</text>')
    legend_y, lx = height - 22, PAD
    for name, fill in legend:
        out.append(f'<rect x="{lx}" y="{legend_y}" width="12" height="12" fill="{fill}" '
                   f'stroke="#333"/><text x="{lx + 16}" y="{legend_y + 10}">{escape(name)}</text>')
        lx += 16 + len(name) * CHAR_W + 14
    out.append(f'<text x="{lx}" y="{legend_y + 10}" fill="#444">(thick border: keeps state)</text>')
    out.append("</svg>")
    return "\n".join(out)
