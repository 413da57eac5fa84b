"""Parse one Spark SQL query with sqlglot (Spark dialect), without Spark.

``parse_query`` returns the query's tree and the circuit names its FROM clauses read (inputs or
nodes: what the node depends on), or the syntax error with its position inside the query.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from .errors import Position, SqlError

DIALECT = "spark"

# statements that are not a query: named in the refusal
_STATEMENTS = {exp.Insert: "INSERT", exp.Delete: "DELETE", exp.Update: "UPDATE", exp.Create: "CREATE",
               exp.Drop: "DROP", exp.Merge: "MERGE", exp.Command: "a command", exp.Set: "SET",
               exp.Use: "USE", exp.Describe: "DESCRIBE", exp.Alter: "ALTER"}


TIME_WINDOW_FUNCTION = "__wndw"  # what a time window ``window(`` is read as: the same length, so positions hold


def mask_time_windows(text: str) -> str:
    """``text`` with each call ``window(`` (Spark's time window, which the parser would take for a
    WINDOW clause) renamed to ``TIME_WINDOW_FUNCTION(``, found from its tokens (never inside a
    string or a comment); every other character, and so every position, unchanged."""
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
    except (TokenError, ValueError):
        return text
    out = text
    for tok, nxt in zip(tokens, tokens[1:]):
        if tok.text.lower() == "window" and nxt.text == "(" and tok.end - tok.start + 1 == len(TIME_WINDOW_FUNCTION):
            out = out[:tok.start] + TIME_WINDOW_FUNCTION + out[tok.end + 1:]
    return out


def _after_time_window(text: str, line: int, col: int) -> bool:
    """Whether ``window(...)`` ends just before column ``col`` (0-based) of ``line``."""
    lines = text.splitlines()
    before = lines[line - 1][:col].rstrip() if 0 < line <= len(lines) else ""
    masked = mask_time_windows(before)
    return before.endswith(")") and TIME_WINDOW_FUNCTION in masked and "(" in masked.rsplit(TIME_WINDOW_FUNCTION, 1)[1]


@dataclass(frozen=True)
class ParsedQuery:
    """A query as parsed: its tree, and the circuit relations it reads (in order of use)."""

    text: str
    tree: exp.Query | None
    tables: tuple[str, ...] = ()
    error: SqlError | None = field(default=None, compare=False)
    # a SELECT without FROM reads one row: a global count(*) over this input of the circuit
    # (set by the loader, which knows the inputs; ``needs_one_row``), listed in ``tables`` too
    one_row: str | None = None
    # the bound plans, kept with the query they bind (``sql.node.bind_node``): validation's column,
    # type, expression and time checks and the IR's lowering all read one plan. Each is kept with
    # the columns of the relations the binder looked up, so a query bound against other columns
    # is bound again, never answered with a stale plan.
    plans: dict = field(default_factory=dict, compare=False, repr=False)


def parse_query(text: str) -> ParsedQuery:
    """Parse ``text`` as exactly one SELECT-style query; syntax problems become ``error``."""
    try:
        trees = [t for t in sqlglot.parse(mask_time_windows(text), read=DIALECT) if t is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line, col = first.get("line") or 1, first.get("col") or 1
        what = first.get("description") or str(exc)
        near = first.get("highlight")
        width = len(near) if isinstance(near, str) else 0
        if isinstance(near, str) and near.upper() == "AS" and _after_time_window(text, line, col - width):
            what = ("a GROUP BY item cannot be named (Spark SQL refuses GROUP BY window(...) AS w too): write "
                    "GROUP BY window(...) and select window.start / window.end")
            return ParsedQuery(text, None, error=SqlError(what, Position(line, max(1, col - width + 1))))
        return ParsedQuery(text, None, error=SqlError(f"syntax error: {_plain(what)}"
                                                      + (f" near '{near}'" if near else ""),
                                                      Position(line, max(1, col - width + 1))))
    except TokenError:
        pos, what = unterminated(text)
        return ParsedQuery(text, None, error=SqlError(f"syntax error: {what}", pos))
    if not trees:
        return ParsedQuery(text, None, error=SqlError("the query is empty: expected one SELECT query",
                                                      Position(1, 1)))
    if len(trees) > 1:
        return ParsedQuery(text, None, error=SqlError(
            f"expected one query, found {len(trees)} statements: a node is one SELECT query "
            f"(write one node per query)", _start(trees[1])))
    tree = trees[0]
    for kind, name in _STATEMENTS.items():
        if isinstance(tree, kind):
            return ParsedQuery(text, None, error=SqlError(
                f"{name} is not a query: a node is one SELECT query (it cannot change data)", _start(tree)))
    if not isinstance(tree, exp.Query):
        return ParsedQuery(text, None, error=SqlError(
            f"expected a SELECT query, found {type(tree).__name__.upper()}", _start(tree)))
    return ParsedQuery(text, tree, read_tables(tree))


def _start(node: exp.Expression) -> Position | None:
    from .errors import position_of

    return position_of(node)


def _plain(description: str) -> str:
    """sqlglot's messages name its Python classes; say it in SQL terms."""
    if description.startswith("Required keyword:"):
        return "incomplete clause (" + description.split("for <class")[0].replace("Required keyword: ", "")\
            .strip().rstrip(",") + ")"
    return description.replace("Invalid expression / Unexpected token", "unexpected token")


def unterminated(text: str) -> tuple[Position, str]:
    """Where a string, quoted name or comment is left open (what sqlglot's tokenizer choked on)."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return _pos(text, i), "unterminated /* comment"
            i = end + 2
            continue
        if ch in "'\"`":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" and ch != "`" else 1
            if j >= n:
                kind = "quoted name" if ch == "`" else "string literal"
                return _pos(text, i), f"unterminated {kind} (opened with {ch})"
            i = j + 1
            continue
        i += 1
    return Position(1, 1), "the query cannot be read (tokenizer error)"


def _pos(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Position(line, col)


def read_tables(tree: exp.Expression) -> tuple[str, ...]:
    """Relations the query reads that are not its own CTEs (as first written, in order of use;
    names match case-insensitively, as in Spark)."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function or a path: the binder refuses it with its position
        name = table.name
        if table.args.get("db") is None and name.lower() not in ctes:
            names.setdefault(name.lower(), name)
    return tuple(names.values())


def needs_one_row(tree: exp.Expression | None) -> bool:
    """Whether some SELECT of the query has no FROM (its rows come from one constant row)."""
    return tree is not None and any(sel.args.get("from_") is None for sel in tree.find_all(exp.Select))
