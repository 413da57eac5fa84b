"""The set operators of Table 1 of the paper, as the YAML ops ``union``, ``difference`` and
``intersect`` are compiled (``spec/ops/sets.py`` names these functions): from plus, negate, join
and distinct. They add ``distinct``s for set semantics; the consolidation pass
(``ir/optimize.py``) removes the ones that are not needed. No IR operator of their own.
"""
from __future__ import annotations

from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.spec.model import NodeSpec


def from_union(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    """UNION: distinct(a + b + ...)."""
    total = c.add(make_node(f"{n.name}.sum", "plus", n.references, cols[n.name], origin=n.name))
    return c.add(make_node(n.name, "distinct", [total.id], cols[n.name], is_set=True))


def _set_of(c: Circuit, ref: str, owner: str, side: str) -> str:
    """``ref`` as a set: itself if it already is one, else a new distinct node."""
    if c[ref].is_set:
        return ref
    node = make_node(f"{owner}.distinct_{side}", "distinct", [ref], c[ref].columns, origin=owner, is_set=True)
    return c.add(node).id


def from_difference(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    """EXCEPT: distinct(distinct(a) - distinct(b)); inner distincts make it right for bags too."""
    left = _set_of(c, n.left, n.name, "left")
    right = _set_of(c, n.right, n.name, "right")
    neg = c.add(make_node(f"{n.name}.neg", "negate", [right], c[right].columns, origin=n.name))
    total = c.add(make_node(f"{n.name}.sum", "plus", [left, neg.id], cols[n.name], origin=n.name))
    return c.add(make_node(n.name, "distinct", [total.id], cols[n.name], is_set=True))


def from_intersect(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    """INTERSECT: a join of the two sets on every column, nulls equal (SQL set semantics)."""
    left = _set_of(c, n.left, n.name, "left")
    right = _set_of(c, n.right, n.name, "right")
    lcols = c[left].columns
    return c.add(make_node(n.name, "join", [left, right], cols[n.name], is_set=True,
                           left_keys=lcols, right_keys=lcols, null_safe=True,
                           left_out=tuple(zip(lcols, lcols)), right_out=()))
