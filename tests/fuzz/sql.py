"""The fuzzer's expression language: a small, typed subset of Spark SQL, evaluated in Python.

The generator builds expressions as trees and writes them as Spark SQL text into the circuit;
the reference reads that text back (``parse``) and evaluates it (``evaluate``) with SQL NULL
semantics, so a circuit is checked from what a user would write, not from the generator's trees.

The subset is chosen so that Spark (ANSI mode, the default of Spark 4) and Python agree exactly:
``+ - * %`` on small integers and decimals (Java's remainder: the sign of the dividend), doubles
only through columns and ``CAST(n AS DOUBLE)`` (no decimal-vs-double comparisons without Spark's
cast to double, which ``_pair`` mimics), comparisons, ``AND``/``OR``/``NOT`` (three-valued),
``IS [NOT] NULL``, ``CASE WHEN``, ``CAST``, and the functions in ``FUNCTIONS``. No division, no
rounding functions, no string casts of doubles: their text forms differ between the engines.
"""
from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Callable

Value = Any  # None, bool, int, float, str, Decimal, datetime.date
Env = dict[str, str]  # lower-case column name -> type


# ---- types ---------------------------------------------------------------------------------

_ALIASES = {"bigint": "long", "integer": "int", "bool": "boolean", "float": "double", "real": "double"}
_DECIMAL = re.compile(r"^decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
INTEGRAL = ("int", "long")


def norm_type(t: str) -> str:
    """A Spark type name in one spelling: long, int, double, string, date, boolean, decimal(p,s)."""
    t = t.strip().lower().replace(" ", "")
    if t in ("decimal", "dec", "numeric"):
        return "decimal(10,0)"
    return _ALIASES.get(t, t)


def decimal_ps(t: str) -> tuple[int, int] | None:
    m = _DECIMAL.match(t)
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_numeric(t: str) -> bool:
    return t in ("int", "long", "double") or decimal_ps(t) is not None


def _as_decimal(t: str) -> tuple[int, int]:
    """Spark's decimal view of a numeric type (ints widen to decimal(10,0) / decimal(20,0))."""
    return decimal_ps(t) or ((10, 0) if t == "int" else (20, 0))


def _bounded(p: int, s: int) -> str:
    """decimal(p,s) cut to precision 38 as Spark does (keeping at least 6 digits of scale)."""
    if p > 38:
        digits = p - s
        s = max(38 - digits, min(s, 6))
        p = 38
    return f"decimal({p},{s})"


def arithmetic_type(op: str, a: str, b: str) -> str:
    """Result type of ``a op b`` for + - * % in Spark."""
    if "double" in (a, b):
        return "double"
    if a in INTEGRAL and b in INTEGRAL:
        return "long" if "long" in (a, b) else "int"
    (p1, s1), (p2, s2) = _as_decimal(a), _as_decimal(b)
    if op in "+-":
        s = max(s1, s2)
        return _bounded(max(p1 - s1, p2 - s2) + s + 1, s)
    if op == "*":
        return _bounded(p1 + p2 + 1, s1 + s2)
    s = max(s1, s2)  # remainder
    return _bounded(min(p1 - s1, p2 - s2) + s, s)


# ---- the tree ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Lit:
    value: Value
    type: str


@dataclass(frozen=True)
class Neg:
    arg: "Expr"


@dataclass(frozen=True)
class Not:
    arg: "Expr"


@dataclass(frozen=True)
class Bin:
    op: str  # + - * % = <> < <= > >= and or
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class IsNull:
    arg: "Expr"
    negated: bool = False


@dataclass(frozen=True)
class Func:
    name: str  # lower-case, one of FUNCTIONS
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class Case:
    cond: "Expr"
    then: "Expr"
    other: "Expr"


@dataclass(frozen=True)
class Cast:
    arg: "Expr"
    type: str


Expr = Col | Lit | Neg | Not | Bin | IsNull | Func | Case | Cast
COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")


# ---- Spark SQL text ------------------------------------------------------------------------

_SQL_TYPES = {"long": "BIGINT", "int": "INT", "double": "DOUBLE", "string": "STRING", "date": "DATE",
              "boolean": "BOOLEAN"}


def sql_type(t: str) -> str:
    ps = decimal_ps(t)
    return f"DECIMAL({ps[0]},{ps[1]})" if ps else _SQL_TYPES[t]


def render(e: Expr) -> str:
    """Spark SQL text of ``e``, fully parenthesized (precedence never decides anything)."""
    if isinstance(e, Col):
        return e.name
    if isinstance(e, Lit):
        return _literal(e)
    if isinstance(e, Neg):
        return f"(- {render(e.arg)})"
    if isinstance(e, Not):
        return f"(NOT {render(e.arg)})"
    if isinstance(e, Bin):
        return f"({render(e.left)} {e.op.upper()} {render(e.right)})"
    if isinstance(e, IsNull):
        return f"({render(e.arg)} IS {'NOT ' if e.negated else ''}NULL)"
    if isinstance(e, Func):
        return f"{e.name}({', '.join(render(a) for a in e.args)})"
    if isinstance(e, Case):
        return f"(CASE WHEN {render(e.cond)} THEN {render(e.then)} ELSE {render(e.other)} END)"
    if isinstance(e, Cast):
        return f"CAST({render(e.arg)} AS {sql_type(e.type)})"
    raise TypeError(e)


def _literal(e: Lit) -> str:
    v, t = e.value, e.type
    if v is None:
        return "NULL"
    if t == "boolean":
        return "TRUE" if v else "FALSE"
    if t == "string":
        return "'" + v + "'"  # the generator writes no quotes or backslashes
    if t == "date":
        return f"DATE '{v.isoformat()}'"
    if t == "double":
        return f"CAST({v!r} AS DOUBLE)"
    return str(v)  # int, or a decimal with a point


# ---- parsing -------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>'[^']*')|(?P<bq>`[^`]*`)|(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<op><=|>=|<>|!=|[=<>+\-*%(),]))")


class ParseError(ValueError):
    """Text outside the fuzzer's subset of Spark SQL."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ParseError(f"cannot read {text[pos:pos + 20]!r} in {text!r}")
            kind = m.lastgroup
            self.toks.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self, word: str | None = None) -> bool:
        if self.i >= len(self.toks):
            return False
        kind, text = self.toks[self.i]
        return word is None or (text.upper() == word if kind == "id" else text == word)

    def take(self, word: str | None = None) -> tuple[str, str]:
        if not self.peek(word):
            raise ParseError(f"expected {word or 'more'} at token {self.i} of {self.text!r}")
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def accept(self, word: str) -> bool:
        if self.peek(word):
            self.i += 1
            return True
        return False

    def parse(self) -> Expr:
        e = self.or_()
        if self.i != len(self.toks):
            raise ParseError(f"unexpected {self.toks[self.i][1]!r} in {self.text!r}")
        return e

    def or_(self) -> Expr:
        e = self.and_()
        while self.accept("OR"):
            e = Bin("or", e, self.and_())
        return e

    def and_(self) -> Expr:
        e = self.not_()
        while self.accept("AND"):
            e = Bin("and", e, self.not_())
        return e

    def not_(self) -> Expr:
        if self.accept("NOT"):
            return Not(self.not_())
        return self.cmp()

    def cmp(self) -> Expr:
        e = self.add()
        for op in ("<=", ">=", "<>", "!=", "=", "<", ">"):
            if self.accept(op):
                return Bin("<>" if op == "!=" else op, e, self.add())
        if self.accept("IS"):
            negated = self.accept("NOT")
            self.take("NULL")
            return IsNull(e, negated)
        return e

    def add(self) -> Expr:
        e = self.mul()
        while self.peek("+") or self.peek("-"):
            e = Bin(self.take()[1], e, self.mul())
        return e

    def mul(self) -> Expr:
        e = self.unary()
        while self.peek("*") or self.peek("%"):
            e = Bin(self.take()[1], e, self.unary())
        return e

    def unary(self) -> Expr:
        if self.accept("-"):
            arg = self.unary()
            if isinstance(arg, Lit) and arg.type != "double" and arg.value is not None:
                return Lit(-arg.value, arg.type)
            return Neg(arg)
        return self.primary()

    def primary(self) -> Expr:
        kind, text = self.take()
        if kind == "num":
            if "." in text:
                whole, frac = text.split(".")  # Spark: 1.5 is decimal(2,1), 0.25 decimal(2,2)
                precision = max(len(whole.lstrip("0")) + len(frac), 1)
                return Lit(Decimal(text), f"decimal({precision},{len(frac)})")
            return Lit(int(text), "int" if int(text) < 2 ** 31 else "long")
        if kind == "str":
            return Lit(text[1:-1], "string")
        if kind == "bq":
            return Col(text[1:-1])
        if kind == "op":
            if text != "(":
                raise ParseError(f"unexpected {text!r} in {self.text!r}")
            e = self.or_()
            self.take(")")
            return e
        word = text.upper()
        if word in ("TRUE", "FALSE"):
            return Lit(word == "TRUE", "boolean")
        if word == "NULL":
            return Lit(None, "null")
        if word == "DATE" and self.peek() and self.toks[self.i][0] == "str":
            return Lit(datetime.date.fromisoformat(self.take()[1][1:-1]), "date")
        if word == "CAST":
            self.take("(")
            arg = self.or_()
            self.take("AS")
            t = self.take()[1]
            if self.accept("("):
                t += "(" + self.take()[1]
                while self.accept(","):
                    t += "," + self.take()[1]
                self.take(")")
                t += ")"
            self.take(")")
            return Cast(arg, norm_type(t))
        if word == "CASE":
            self.take("WHEN")
            cond = self.or_()
            self.take("THEN")
            then = self.or_()
            other: Expr = Lit(None, "null")
            if self.accept("ELSE"):
                other = self.or_()
            self.take("END")
            return Case(cond, then, other)
        if self.accept("("):
            args: list[Expr] = []
            if not self.accept(")"):
                args.append(self.or_())
                while self.accept(","):
                    args.append(self.or_())
                self.take(")")
            name = text.lower()
            if name not in FUNCTIONS:
                raise ParseError(f"function {text!r} is outside the fuzzer's subset")
            return Func(name, tuple(args))
        return Col(text)


def parse(text: str) -> Expr:
    """The tree of a Spark SQL expression in the fuzzer's subset (``ParseError`` otherwise)."""
    return _Parser(text).parse()


# ---- static types --------------------------------------------------------------------------

def type_of(e: Expr, env: Env) -> str:
    """Spark's result type of ``e`` over columns of types ``env`` (keys lower-case)."""
    if isinstance(e, Col):
        return env[e.name.lower()]
    if isinstance(e, Lit):
        return e.type
    if isinstance(e, Neg):
        return type_of(e.arg, env)
    if isinstance(e, (Not, IsNull)):
        return "boolean"
    if isinstance(e, Bin):
        if e.op in COMPARISONS or e.op in ("and", "or"):
            return "boolean"
        return arithmetic_type(e.op, type_of(e.left, env), type_of(e.right, env))
    if isinstance(e, Func):
        return FUNCTIONS[e.name][0]([type_of(a, env) for a in e.args])
    if isinstance(e, Case):
        return wider(type_of(e.then, env), type_of(e.other, env))
    if isinstance(e, Cast):
        return e.type
    raise TypeError(e)


# ---- evaluation (SQL NULL semantics) -------------------------------------------------------

def _pair(a: Value, b: Value) -> tuple[Value, Value]:
    """Bring two numbers to one Python type as Spark's coercion does (double wins, then decimal)."""
    if isinstance(a, float) or isinstance(b, float):
        return float(a), float(b)
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return Decimal(a), Decimal(b)
    return a, b


def _remainder(a: Value, b: Value) -> Value:
    """Java's ``%``: the result has the sign of the dividend (Python's has the divisor's)."""
    if b == 0:
        raise ArithmeticError("remainder by zero")
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


_ARITH: dict[str, Callable[[Value, Value], Value]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "%": _remainder}
_COMPARE: dict[str, Callable[[Value, Value], bool]] = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def evaluate(e: Expr, row: dict[str, Value]) -> Value:
    """The value of ``e`` on ``row`` (keys lower-case); None is SQL NULL."""
    if isinstance(e, Col):
        return row[e.name.lower()]
    if isinstance(e, Lit):
        return e.value
    if isinstance(e, Neg):
        v = evaluate(e.arg, row)
        return None if v is None else -v
    if isinstance(e, Not):
        v = evaluate(e.arg, row)
        return None if v is None else not v
    if isinstance(e, IsNull):
        return (evaluate(e.arg, row) is None) != e.negated
    if isinstance(e, Bin):
        if e.op == "and":
            a, b = evaluate(e.left, row), evaluate(e.right, row)
            return False if a is False or b is False else (None if a is None or b is None else True)
        if e.op == "or":
            a, b = evaluate(e.left, row), evaluate(e.right, row)
            return True if a is True or b is True else (None if a is None or b is None else False)
        a, b = evaluate(e.left, row), evaluate(e.right, row)
        if a is None or b is None:
            return None
        if isinstance(a, (int, float, Decimal)) and not isinstance(a, bool):
            a, b = _pair(a, b)
        return (_COMPARE[e.op] if e.op in _COMPARE else _ARITH[e.op])(a, b)
    if isinstance(e, Func):
        return FUNCTIONS[e.name][1]([evaluate(a, row) for a in e.args])
    if isinstance(e, Case):
        return evaluate(e.then, row) if evaluate(e.cond, row) is True else evaluate(e.other, row)
    if isinstance(e, Cast):
        return cast(evaluate(e.arg, row), e.type)
    raise TypeError(e)


def cast(v: Value, t: str) -> Value:
    if v is None:
        return None
    if t == "double":
        return float(v)
    if t in INTEGRAL:
        return int(v)
    if t == "string":
        return v.isoformat() if isinstance(v, datetime.date) else str(v)
    if ps := decimal_ps(t):
        return Decimal(v).quantize(Decimal(1).scaleb(-ps[1]), rounding=ROUND_HALF_UP)
    raise ValueError(f"cast to {t} is outside the fuzzer's subset")


def _nullsafe(f: Callable[..., Value]) -> Callable[[list[Value]], Value]:
    """A function that returns NULL when any argument is NULL (most Spark functions)."""
    return lambda args: None if any(a is None for a in args) else f(*args)


def wider(a: str, b: str) -> str:
    """The common type Spark gives two branches (CASE, coalesce) of compatible types."""
    if a == "null" or a == b:
        return b
    if b == "null":
        return a
    if "double" in (a, b):
        return "double"
    if a in INTEGRAL and b in INTEGRAL:
        return "long"
    (p1, s1), (p2, s2) = _as_decimal(a), _as_decimal(b)
    s = max(s1, s2)
    return _bounded(max(p1 - s1, p2 - s2) + s, s)


def _same(types: list[str]) -> str:
    out = "null"
    for t in types:
        out = wider(out, t)
    return out


# name -> (result type from argument types, evaluation on argument values)
FUNCTIONS: dict[str, tuple[Callable[[list[str]], str], Callable[[list[Value]], Value]]] = {
    "coalesce": (_same, lambda args: next((a for a in args if a is not None), None)),
    "abs": (_same, _nullsafe(abs)),
    "upper": (lambda ts: "string", _nullsafe(str.upper)),
    "lower": (lambda ts: "string", _nullsafe(str.lower)),
    "length": (lambda ts: "int", _nullsafe(len)),
    "concat": (lambda ts: "string", _nullsafe(lambda *a: "".join(a))),
    "date_add": (lambda ts: "date", _nullsafe(lambda d, n: d + datetime.timedelta(days=n))),
    "datediff": (lambda ts: "int", _nullsafe(lambda a, b: (a - b).days)),
}
