"""Bounds on a circuit file, checked before the YAML is turned into data.

A circuit file is read by ``dbsp validate`` and by Airflow's DAG processor, so a small hostile
file must not cost much memory or time. YAML aliases (``*name``) repeat a node without copying
it, and the loader composes the node graph in time proportional to the text; what explodes is
turning that graph into data (a 700-byte "billion laughs" file expands to 10^9 strings; merge
keys ``<<: [*a, *a]`` double a mapping per level). So the graph is measured first, sharing
included, and refused when expanding it would exceed ``MAX_VALUES`` values, nest deeper than
``MAX_DEPTH``, or loop (an alias inside its own anchor). Files larger than ``MAX_BYTES`` are
refused before they are parsed. Anchors and aliases within these bounds stay usable.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from spark_jobs.errors import DbspError

MAX_BYTES = 1 << 20  # 1 MiB: the largest example circuit is ~3 KiB
MAX_VALUES = 100_000  # scalars, lists and mappings after expanding aliases
MAX_DEPTH = 64  # nesting of lists and mappings


class FileTooLarge(DbspError, ValueError):
    """A circuit file over ``MAX_BYTES``."""


class TooDeep(DbspError, yaml.MarkedYAMLError):
    """Nesting beyond ``MAX_DEPTH``, found while scanning (before any node is built)."""


class DepthLimit:
    """A mixin for a PyYAML loader that stops scanning at ``MAX_DEPTH`` levels of nesting.

    PyYAML's scanner does work per flow level for every token, and its composer recurses per
    level, so a file of 5,000 ``[`` takes over a minute and then overflows Python's stack; this
    stops it at the first level too many.
    """

    def _check_depth(self) -> None:
        if self.flow_level + len(self.indents) > MAX_DEPTH:  # type: ignore[attr-defined]
            raise TooDeep(problem=f"the YAML is nested more than {MAX_DEPTH} levels deep",
                          problem_mark=self.get_mark())  # type: ignore[attr-defined]

    def fetch_flow_collection_start(self, TokenClass) -> None:  # noqa: N803 - PyYAML's name
        super().fetch_flow_collection_start(TokenClass)  # type: ignore[misc]
        self._check_depth()

    def add_indent(self, column: int) -> bool:
        added = super().add_indent(column)  # type: ignore[misc]
        self._check_depth()
        return added


def read_text(path: str | Path) -> str:
    """The file's text, reading at most ``MAX_BYTES + 1`` bytes (a FIFO or /dev/zero ends too)."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise FileTooLarge(size_problem(len(data), exact=False))
    return data.decode("utf-8")


def size_problem(size: int, exact: bool = True) -> str:
    more = "" if exact else "more than "
    return (f"the circuit file is {more}{size:,} bytes; circuit files are limited to {MAX_BYTES:,} bytes "
            f"(1 MiB)")


def expansion_problem(root: yaml.Node) -> str | None:
    """Why the composed document is too big or deep once aliases are expanded (None if fine).

    One pass over the distinct nodes (each alias target is measured once and reused), so the
    cost is proportional to the text, not to what the aliases would expand to.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    shared = False
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > MAX_VALUES:
                how = " through aliases (*name)" if shared else ""
                return (f"the YAML expands to more than {MAX_VALUES:,} values{how}; a circuit this large is "
                        f"refused: split it into several circuits")
            if depth[key] > MAX_DEPTH:
                return f"the YAML is nested more than {MAX_DEPTH} levels deep"
            continue
        if key in size:  # a node reached a second time: an alias
            shared = True
            continue
        if key in open_nodes:
            return f"an alias refers to a node that contains it (line {node.start_mark.line + 1}): recursive YAML is refused"
        open_nodes.add(key)
        stack.append((node, True))
        shared = shared or any(id(child) in size for child in children)
        stack.extend((child, False) for child in children if id(child) not in size)
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
