"""Expressions of a query as the author wrote them, with only the column references replaced.

Spark must run what was written and checked: sqlglot normalizes when it prints a tree
(``to_date(s, 'yyyy-MM-dd')`` loses its format, ``regexp_extract(s, r, 1)`` its group), which
would silently change results. So an expression of a query reaches the IR as a *splice* of the
query text: the expression's own characters, with each column reference (and each aggregate or
subquery the plan computed as a column) replaced by the backquoted column it resolved to.

sqlglot keeps the position of names, literals and function names, not of whole expressions; an
expression's extent is found from the tokens: the smallest token range around its positioned
parts that parses to the same tree.
"""
from __future__ import annotations

import bisect
from typing import Callable

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from .errors import SqlError, describe

DIALECT = "spark"
_MAX_WIDEN = 24  # tokens an expression may have around its positioned parts (CAST(x AS DECIMAL(10, 2)))


def _bare(node: exp.Expression) -> exp.Expression:
    """The tree without type annotations sqlglot adds while parsing (for comparing trees)."""
    copy = node.copy()
    for sub in copy.walk():
        sub.args.pop("_type", None)
    return copy


def _positioned(node: exp.Expression) -> bool:
    """Whether any part of ``node`` has a position in the text (names, literals, functions)."""
    return any("start" in s.meta for s in node.walk())


class Source:
    """A query's text and tokens; finds where a parsed expression is, and splices it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = Dialect.get_or_raise(DIALECT).tokenize(text)
        self.starts = [t.start for t in self.tokens]
        self.ends = [t.end for t in self.tokens]
        self._spans: dict[int, tuple[int, int] | None] = {}

    def span(self, node: exp.Expression) -> tuple[int, int] | None:
        """(first, last) character of ``node`` in the text, or None when it cannot be located."""
        if id(node) in self._spans:
            return self._spans[id(node)]
        found = self._find(node)
        self._spans[id(node)] = found
        return found

    def _find(self, node: exp.Expression) -> tuple[int, int] | None:
        marks = [(s.meta["start"], s.meta["end"]) for s in node.walk() if "start" in s.meta and "end" in s.meta]
        if not marks:
            return None
        lo, hi = min(m[0] for m in marks), max(m[1] for m in marks)
        i = bisect.bisect_left(self.starts, lo)
        j = bisect.bisect_left(self.ends, hi)
        if i >= len(self.tokens) or j >= len(self.tokens) or self.starts[i] != lo or self.ends[j] != hi:
            return None
        target = _bare(node)
        for width in range(_MAX_WIDEN + 1):
            for left in range(width + 1):
                a, b = i - left, j + width - left
                if a < 0 or b >= len(self.tokens):
                    continue
                if not self._balanced(a, b):
                    continue  # sqlglot forgives a missing ')' that Spark's parser does not
                snippet = self.text[self.starts[a]:self.ends[b] + 1]
                try:
                    parsed = sqlglot.parse_one(snippet, read=DIALECT)
                except (ParseError, TokenError, ValueError, RecursionError):
                    continue
                if _bare(parsed) == target:
                    return self.starts[a], self.ends[b]
        return None

    def _balanced(self, a: int, b: int) -> bool:
        """Whether tokens ``a..b`` close every parenthesis they open, in order."""
        depth = 0
        for token in self.tokens[a:b + 1]:
            if token.token_type == TokenType.L_PAREN:
                depth += 1
            elif token.token_type == TokenType.R_PAREN:
                depth -= 1
                if depth < 0:
                    return False
        return depth == 0

    def splice(self, node: exp.Expression, replace: Callable[[exp.Expression], str | None]) -> str:
        """``node``'s text with each outermost ``sub`` for which ``replace(sub)`` gives a text
        replaced by that text."""
        top = replace(node)
        if top is not None:
            return top
        where = self.span(node)
        if where is None and not _positioned(node):
            # TRUE, NULL, NOT FALSE, CAST(NULL AS INT): sqlglot keeps no position of these, and
            # prints them as written (no function, whose arguments printing could change)
            return node.sql(dialect=DIALECT)
        if where is None:
            raise SqlError(f"cannot find the text of '{describe(node)}' in the query (write it without "
                           f"line breaks inside names or literals)", node)
        edits: list[tuple[int, int, str]] = []
        stack = list(node.iter_expressions())
        while stack:
            sub = stack.pop()
            text = replace(sub)
            if text is None:
                stack.extend(sub.iter_expressions())
                continue
            at = self.span(sub)
            if at is None or at[0] < where[0] or at[1] > where[1]:
                raise SqlError(f"cannot find the text of '{describe(sub)}' in the query", sub)
            edits.append((at[0], at[1], text))
        out, pos = [], where[0]
        for start, end, text in sorted(edits):
            if start < pos:
                raise SqlError(f"overlapping parts in '{describe(node)}'", node)
            out.append(self.text[pos:start])
            out.append(text)
            pos = end + 1
        out.append(self.text[pos:where[1] + 1])
        return "".join(out)
