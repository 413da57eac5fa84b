"""The tables a sqllogictest file builds with its statements (CREATE TABLE, INSERT), as bags.

Only what the files' data definition needs: column types map to the circuit's (INTEGER -> long,
REAL/FLOAT/DOUBLE -> double, anything with CHAR/TEXT -> string); INSERT values are literals
(numbers, strings, NULL, a sign). ``CREATE INDEX`` changes nothing a query can see.
Anything else is reported back as unsupported (the queries after it are then not run).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp


class Unsupported(Exception):
    """A statement this runner cannot apply (the file's queries after it are not run)."""


def circuit_type(declared: str) -> str:
    t = declared.upper()
    if "INT" in t:
        return "long"
    if any(w in t for w in ("CHAR", "TEXT", "CLOB", "STRING")):
        return "string"
    if any(w in t for w in ("REAL", "FLOA", "DOUB")):
        return "double"
    raise Unsupported(f"column type {declared!r}")


@dataclass
class Table:
    columns: list[tuple[str, str]]  # (name, circuit type)
    rows: Counter = field(default_factory=Counter)


@dataclass
class Database:
    tables: dict[str, Table] = field(default_factory=dict)

    def apply(self, sql: str) -> bool:
        """Apply one statement; False when it changes nothing queries see (CREATE INDEX)."""
        try:
            tree = sqlglot.parse_one(sql, read="sqlite")
        except Exception as e:  # noqa: BLE001 - any parse failure is an unsupported statement
            raise Unsupported(f"cannot parse: {e}") from None
        if isinstance(tree, exp.Create) and (tree.args.get("kind") or "").upper() == "INDEX":
            return False
        if isinstance(tree, exp.Create) and (tree.args.get("kind") or "").upper() == "TABLE":
            schema = tree.this
            if not isinstance(schema, exp.Schema):
                raise Unsupported("CREATE TABLE without a column list")
            name = schema.this.name.lower()
            cols = []
            for c in schema.expressions:
                if not isinstance(c, exp.ColumnDef):
                    continue  # a table constraint (PRIMARY KEY (...)): no effect on values
                kind = c.args.get("kind")
                cols.append((c.name.lower(), circuit_type(kind.sql(dialect="sqlite") if kind else "TEXT")))
            self.tables[name] = Table(cols)
            return True
        if isinstance(tree, exp.Drop) and (tree.args.get("kind") or "").upper() == "TABLE":
            self.tables.pop(tree.this.name.lower(), None)
            return True
        if isinstance(tree, exp.Insert):
            self._insert(tree)
            return True
        raise Unsupported(sql.split()[0].upper() + " " + (sql.split()[1].upper() if len(sql.split()) > 1 else ""))

    def _insert(self, tree: exp.Insert) -> None:
        target = tree.this
        names: list[str] | None = None
        if isinstance(target, exp.Schema):
            names = [c.name.lower() for c in target.expressions]
            target = target.this
        table = self.tables.get(target.name.lower())
        if table is None:
            raise Unsupported(f"INSERT into unknown table {target.name}")
        values = tree.expression
        if not isinstance(values, exp.Values):
            raise Unsupported("INSERT ... SELECT")
        cols = [c for c, _ in table.columns]
        names = names or cols
        types = dict(table.columns)
        for tup in values.expressions:
            given = dict(zip(names, (_literal(v, types[n]) for n, v in zip(names, tup.expressions))))
            table.rows[tuple(given.get(c) for c in cols)] += 1


def _literal(node: exp.Expression, typ: str):
    sign = 1
    while isinstance(node, (exp.Neg, exp.Paren)):
        if isinstance(node, exp.Neg):
            sign = -sign
        node = node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        if node.is_string:
            if typ != "string":
                raise Unsupported(f"string {node.this!r} in a {typ} column")
            return node.this
        text = node.this
        value = float(text) if typ == "double" else int(text) if text.lstrip("-").isdigit() else None
        if value is None:
            raise Unsupported(f"number {text} in a {typ} column")
        if typ == "string":
            raise Unsupported(f"number {text} in a string column")
        return sign * value
    raise Unsupported(f"value {node.sql()}")
