"""Bounds on SQL text, checked on the raw text before sqlglot parses it.

sqlglot's parser and the query binder recurse per level of nesting: 150 nested subqueries, 50
nested parentheses or 60 nested CASE expressions overflow Python's stack (a 40-line
RecursionError traceback instead of a message), and the binder recurses per UNION branch (400
branches overflowed it). Parsing and binding also cost time in proportion to the text, several
times over (each check of a query binds it), so one long query could keep ``dbsp validate``
busy for a minute. A scan of the characters, aware of string literals, quoted names and
comments, measures a text first, in time linear in its length and without recursion:

- ``MAX_QUERY_CHARS``: the length of one ``op: sql`` query (an expression has its own bound,
  ``sql_check.MAX_EXPRESSION_CHARS``);
- ``MAX_NESTING``: parentheses and ``CASE ... END`` open at once (subqueries, calls, grouping);
- ``MAX_SET_OPERATIONS``: ``UNION``/``INTERSECT``/``EXCEPT``/``MINUS`` in one query;
- ``MAX_CHAIN``: ``AND``/``OR`` in one chain (at one level of parentheses): the binder splits a
  condition into its conjuncts recursively (1,500 ANDs overflowed it);
- ``MAX_CIRCUIT_QUERY_CHARS``: all the ``op: sql`` queries of a circuit together (``QueryBudget``),
  so that no file under the 1 MiB bound of circuit files (``yaml_limits.py``) keeps validation
  busy for long: a query beyond the budget is refused, not parsed. (The repository's largest
  circuit holds 4,300 characters of queries.)

Each refusal says where (line and column within the query) and what to do instead.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_QUERY_CHARS = 20_000
MAX_NESTING = 32
MAX_SET_OPERATIONS = 100
MAX_CHAIN = 400
MAX_CIRCUIT_QUERY_CHARS = 64_000
_SET_WORDS = frozenset({"union", "intersect", "except", "minus"})


@dataclass(frozen=True)
class Shape:
    """What the scan measured: the deepest nesting and where it was first reached, and the
    set operations and where the one past the limit is."""

    nesting: int = 0
    nesting_at: int = 0  # offset where the deepest level was first reached
    set_operations: int = 0
    set_operation_at: int = 0  # offset of the first set operation past MAX_SET_OPERATIONS
    chain: int = 0  # the longest AND/OR chain at one level of parentheses
    chain_at: int = 0  # offset of its first operator past MAX_CHAIN


def shape(text: str) -> Shape:
    """Measure ``text`` (one pass; strings, quoted names and comments skipped as Spark reads them)."""
    depth = deepest = deepest_at = sets = sets_at = chain_at = 0
    chains = [0]  # AND/OR so far at each open level
    longest = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            i = _skip_quoted(text, i)
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            i = _skip_comment(text, i)
            continue
        if ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = "" if i and text[i - 1] == "." else text[i:j].lower()  # t.end is a field, not a keyword
            if word == "case":
                depth += 1
                chains.append(0)
            elif word == "end":
                depth = max(0, depth - 1)
                chains = chains[:-1] or [0]
            elif word in ("and", "or"):
                chains[-1] += 1
                if chains[-1] > longest:
                    longest = chains[-1]
                    if longest == MAX_CHAIN + 1:
                        chain_at = i
            elif word in _SET_WORDS:
                sets += 1
                if sets == MAX_SET_OPERATIONS + 1:
                    sets_at = i
            if depth > deepest:
                deepest, deepest_at = depth, i
            i = j
            continue
        if ch == "(":
            depth += 1
            chains.append(0)
            if depth > deepest:
                deepest, deepest_at = depth, i
        elif ch == ")":
            depth = max(0, depth - 1)
            chains = chains[:-1] or [0]
        i += 1
    return Shape(deepest, deepest_at, sets, sets_at, longest, chain_at)


def _skip_quoted(text: str, i: int) -> int:
    """The offset after the literal or quoted name starting at ``i`` (backslash escapes in
    strings, a doubled backquote in a name); the end of the text if it is not closed."""
    quote, j, n = text[i], i + 1, len(text)
    while j < n:
        if text[j] == "\\" and quote != "`":
            j += 2
            continue
        if text[j] == quote:
            if quote == "`" and text.startswith("``", j):
                j += 2
                continue
            return j + 1
        j += 1
    return n


def _skip_comment(text: str, i: int) -> int:
    """The offset after the (possibly nested, as in Spark) bracketed comment starting at ``i``."""
    depth, j, n = 0, i, len(text)
    while j < n:
        if text.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif text.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    return n


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def nesting_problem(text: str, measured: Shape | None = None) -> tuple[str, int] | None:
    """(why, offset) when ``text`` nests deeper than ``MAX_NESTING`` or chains more than
    ``MAX_CHAIN`` AND/OR; None when it does not."""
    s = measured or shape(text)
    if s.chain > MAX_CHAIN:
        return (f"it chains {s.chain} AND/OR at one level; at most {MAX_CHAIN} are allowed (the checker must "
                f"not run out of stack): write a long list of values as IN (...), or keep it in an input and join",
                s.chain_at)
    if s.nesting <= MAX_NESTING:
        return None
    return (f"it nests parentheses and CASE expressions {s.nesting} levels deep; at most {MAX_NESTING} are "
            f"allowed (the checker must not run out of stack): write the inner parts as nodes of their "
            f"own, or flatten them (IN (...) lists, AND/OR chains and CASE branches need no nesting)",
            s.nesting_at)


def query_problem(text: str) -> tuple[str, int] | None:
    """(why, offset) when an ``op: sql`` query is past a bound; None when it may be parsed."""
    if len(text) > MAX_QUERY_CHARS:
        return (f"the query is {len(text):,} characters long; at most {MAX_QUERY_CHARS:,} are allowed: "
                f"split it into nodes (each node's query can read the others), and keep long value lists "
                f"in an input (a join with it replaces IN (...))", 0)
    s = shape(text)
    if s.set_operations > MAX_SET_OPERATIONS:
        return (f"the query has {s.set_operations} UNION/INTERSECT/EXCEPT operations; at most "
                f"{MAX_SET_OPERATIONS} are allowed: split it into nodes (a union_all node takes a list of inputs)",
                s.set_operation_at)
    return nesting_problem(text, s)


class QueryBudget:
    """The characters of query text a circuit may still have parsed (``MAX_CIRCUIT_QUERY_CHARS``)."""

    def __init__(self, limit: int = MAX_CIRCUIT_QUERY_CHARS) -> None:
        self.limit, self.spent = limit, 0

    def spend(self, text: str) -> str | None:
        """Take ``text`` from the budget; why it cannot be parsed when the budget is exceeded."""
        self.spent += len(text)
        if self.spent <= self.limit:
            return None
        return (f"the circuit's queries come to more than {self.limit:,} characters with this one "
                f"({self.spent:,} so far); a circuit holds at most {self.limit:,} characters of op: sql queries: "
                f"split it into several circuits, or keep long value lists in an input")


__all__ = ["MAX_CHAIN", "MAX_CIRCUIT_QUERY_CHARS", "MAX_NESTING", "MAX_QUERY_CHARS", "MAX_SET_OPERATIONS", "QueryBudget", "Shape", "line_col", "nesting_problem",
           "query_problem", "shape"]
