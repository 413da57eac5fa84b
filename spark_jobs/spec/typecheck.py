"""Types of a circuit's expressions, checked against the input schemas before any Spark runs.

Every expression (``where``, ``select`` columns, aggregate arguments, join keys, the
expressions an ``op: sql`` node hands to Spark) is typed bottom-up over its sqlglot parse, with
Spark's ANSI rules as the project runs them: numbers widen, a string meets any primitive type
(Spark casts it, and a bad value fails at run time, not here), a date or a timestamp meets only
dates, timestamps and strings, booleans only booleans. A type error becomes a validation problem
naming the file, the line, the node, the expression and the types: `sum` of a string, a `where`
that is not a boolean, a date compared with a number, a join of a date key with a number key.

The rule when in doubt is to accept: an unknown function, a complex type or a construct this
module does not model types as ``any``, which never causes an error. (`sum` and `avg` of a
string are refused although Spark would cast the strings at run time: a view that sums text is
a mistake, and the step would fail on the first value that is not a number.)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from sqlglot import exp

from spark_jobs.errors import DbspError

from .columns import Resolution
from .errors import Problem
from .model import CircuitSpec, NodeSpec
from .node_ops import node_op
from .sql_check import ExpressionError, function_name, parse

# ---- types ---------------------------------------------------------------------------------------
INTEGRAL = ("tinyint", "smallint", "int", "bigint")
FRACTIONAL = ("float", "double", "decimal")
NUMERIC = INTEGRAL + FRACTIONAL
DATETIME = ("date", "timestamp", "timestamp_ntz")
ALIASES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint", "real": "float",
           "dec": "decimal", "numeric": "decimal", "bool": "boolean", "varchar": "string", "char": "string",
           "text": "string", "datetime": "timestamp", "timestamp_ltz": "timestamp"}


@dataclass(frozen=True)
class SqlType:
    name: str  # boolean, the numeric names, string, date, timestamp, binary, interval, null, any, ...
    precision: int = 0  # decimals
    scale: int = 0

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name

    @property
    def known(self) -> bool:
        return self.name not in ("any", "null")

    def is_(self, *names: str) -> bool:
        return self.name in names


ANY, NULL = SqlType("any"), SqlType("null")
BOOLEAN, STRING, DATE, TIMESTAMP = SqlType("boolean"), SqlType("string"), SqlType("date"), SqlType("timestamp")
INT, BIGINT, DOUBLE, INTERVAL = SqlType("int"), SqlType("bigint"), SqlType("double"), SqlType("interval")


def parse_type(text: str) -> SqlType:
    """A Spark SQL type name as a circuit writes it (``long``, ``decimal(10,2)``)."""
    t = "".join(str(text).lower().split())
    head, _, rest = t.partition("(")
    head = ALIASES.get(head, head)
    if head == "decimal":
        nums = [int(n) for n in re.findall(r"\d+", rest)] or [10, 0]
        return SqlType("decimal", nums[0], nums[1] if len(nums) > 1 else 0)
    if head in NUMERIC + DATETIME + ("boolean", "string", "binary"):
        return SqlType("timestamp" if head == "timestamp_ntz" else head)
    return ANY  # arrays, maps, structs, intervals: not modelled


def _datatype(node: exp.DataType) -> SqlType:
    return parse_type(node.sql(dialect="spark"))


def comparable(a: SqlType, b: SqlType) -> bool:
    """Whether Spark (ANSI) compares values of these types."""
    if not a.known or not b.known or a.is_("string") or b.is_("string"):
        return True
    if a.name in NUMERIC and b.name in NUMERIC:
        return True
    if a.name in DATETIME and b.name in DATETIME:
        return True
    if a.name not in NUMERIC + DATETIME + ("boolean", "binary", "interval") or \
            b.name not in NUMERIC + DATETIME + ("boolean", "binary", "interval"):
        return True  # complex types: not modelled
    return a.name == b.name


def wider(a: SqlType, b: SqlType) -> SqlType:
    """The common type of two numbers (approximately Spark's: enough to type what follows)."""
    if not a.known:
        return b if b.known else a
    if not b.known:
        return a
    if a.name in NUMERIC and b.name in NUMERIC:
        if "double" in (a.name, b.name) or "float" in (a.name, b.name):
            return DOUBLE
        if "decimal" in (a.name, b.name):
            return SqlType("decimal", 38, max(a.scale, b.scale))
        return a if INTEGRAL.index(a.name) >= INTEGRAL.index(b.name) else b
    return a


class TypeProblem(DbspError):
    """A type error inside an expression (the message names the part and its types); internal:
    validation turns it into a ``Problem`` naming the file, line and node."""


# ---- expressions ----------------------------------------------------------------------------------
DATE_ARG = {"year", "month", "day", "dayofmonth", "quarter", "dayofweek", "weekday", "dayofyear", "weekofyear",
            "last_day", "to_date", "date_format", "unix_date"}
DATE_RESULT = {"to_date", "date_add", "date_sub", "add_months", "last_day", "next_day", "trunc", "current_date",
               "make_date", "date_from_unix_date"}
TIMESTAMP_RESULT = {"to_timestamp", "date_trunc", "timestamp_seconds", "timestamp_millis", "timestamp_micros",
                    "from_utc_timestamp", "to_utc_timestamp", "make_timestamp"}
INT_RESULT = {"year", "month", "day", "dayofmonth", "quarter", "dayofweek", "weekday", "dayofyear", "weekofyear",
              "hour", "minute", "second", "length", "char_length", "character_length", "instr", "locate",
              "datediff", "size", "sign", "ascii", "bit_length", "octet_length", "extract", "date_part",
              "unix_date", "levenshtein"}
BIGINT_RESULT = {"unix_timestamp", "xxhash64", "count", "unix_seconds", "unix_millis", "unix_micros"}
STRING_RESULT = {"upper", "lower", "ucase", "lcase", "trim", "ltrim", "rtrim", "substr", "substring", "left", "right",
                 "concat", "concat_ws", "lpad", "rpad", "replace", "regexp_replace", "regexp_extract", "md5", "sha1",
                 "sha2", "sha", "initcap", "reverse", "repeat", "format_string", "printf", "date_format",
                 "translate", "split_part", "typeof", "string", "hex", "base64", "soundex", "overlay", "btrim"}
BOOLEAN_RESULT = {"isnan", "isnull", "isnotnull", "startswith", "endswith", "contains", "rlike", "regexp",
                  "regexp_like", "like", "ilike", "array_contains", "exists", "forall"}
DOUBLE_RESULT = {"sqrt", "exp", "ln", "log", "log10", "log2", "log1p", "pow", "power", "sin", "cos", "tan",
                 "asin", "acos", "atan", "atan2", "cbrt", "degrees", "radians", "rand", "double", "expm1"}
SAME_AS_ARG = {"abs", "negative", "positive", "round", "bround", "nanvl"}
NUMBER_ARGS = {"abs", "round", "bround", "floor", "ceil", "ceiling", "sign", "signum", "sqrt", "exp", "ln", "log",
               "log10", "log2", "pow", "power", "pmod", "cbrt", "sin", "cos", "tan", "degrees", "radians"}


@dataclass
class Typer:
    """Types one expression over ``columns`` (lower-cased name -> type)."""

    columns: dict[str, SqlType]
    text: str

    def of(self, node: exp.Expression) -> SqlType:
        if isinstance(node, exp.Paren):
            return self.of(node.this)
        if isinstance(node, exp.Column):
            if node.table:  # a.b: a struct field (or a qualified name): not modelled
                return self.columns.get(node.name.lower(), ANY) if node.table.lower() in self.columns else ANY
            return self.columns.get(node.name.lower(), ANY)
        if isinstance(node, exp.Literal):
            return self._literal(node)
        if isinstance(node, exp.Boolean):
            return BOOLEAN
        if isinstance(node, exp.Null):
            return NULL
        if isinstance(node, exp.Interval):
            return INTERVAL
        if isinstance(node, (exp.Cast, exp.TryCast)):
            self.of(node.this)
            return _datatype(node.to)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)):
            return self._arithmetic(node)
        if isinstance(node, exp.Neg):
            t = self.of(node.this)
            if t.is_("boolean", "date", "timestamp", "binary"):
                raise TypeProblem(f"'-{_sql(node.this)}' negates a {t}")
            return t
        if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)):
            self._compare(node.this, node.expression, node)
            return BOOLEAN
        if isinstance(node, (exp.And, exp.Or)):
            for side in (node.this, node.expression):
                self._boolean(side, f"{type(node).__name__.upper()} needs booleans")
            return BOOLEAN
        if isinstance(node, exp.Not):
            self._boolean(node.this, "NOT needs a boolean")
            return BOOLEAN
        if isinstance(node, exp.Is):
            self.of(node.this)
            return BOOLEAN
        if isinstance(node, exp.Between):
            for bound in (node.args.get("low"), node.args.get("high")):
                if bound is not None:
                    self._compare(node.this, bound, node)
            return BOOLEAN
        if isinstance(node, exp.In):
            for item in node.expressions:
                self._compare(node.this, item, node)
            return BOOLEAN
        if isinstance(node, (exp.Like, exp.ILike, exp.RegexpLike)):
            self.of(node.this), self.of(node.expression)
            return BOOLEAN
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.If):
            self._boolean(node.this, "IF needs a boolean condition")
            return self._common([node.args.get("true"), node.args.get("false")], node)
        if isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):  # Spark needs one common type here
            return self._common([node.this, *node.expressions], node, strict=True)
        if isinstance(node, exp.DPipe):
            self.of(node.this), self.of(node.expression)
            return STRING
        if isinstance(node, exp.TsOrDsToDate):
            self._datelike(node.this, node)
            return DATE
        if isinstance(node, exp.TsOrDsAdd):
            self._datelike(node.this, node)
            amount = node.expression
            if amount is not None:
                t = self.of(amount)
                if t.known and not t.is_(*INTEGRAL, "string"):
                    raise TypeProblem(f"'{_sql(node)}' adds {_sql(amount)} ({t}) to a date: expected a whole number")
            return DATE
        if isinstance(node, exp.Func):
            return self._function(node)
        for child in node.iter_expressions():  # anything else: type its parts, then accept
            self.of(child)
        return ANY

    # -- parts ------------------------------------------------------------------------------------
    def _literal(self, node: exp.Literal) -> SqlType:
        if node.is_string:
            return STRING
        text = node.this
        if re.fullmatch(r"\d+", text):
            return INT if int(text) <= 2**31 - 1 else BIGINT
        if "e" in text.lower():
            return DOUBLE
        whole, _, frac = text.partition(".")
        return SqlType("decimal", max(len(whole.lstrip("-")) + len(frac), 1), len(frac))

    def _arithmetic(self, node: exp.Binary) -> SqlType:
        a, b = self.of(node.this), self.of(node.expression)
        op = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.IntDiv: "div"}[type(node)]
        for t, side in ((a, node.this), (b, node.expression)):
            if t.is_("boolean", "binary"):
                raise TypeProblem(f"'{_sql(node)}': {op} of a {t} ({_sql(side)})")
        if a.is_(*DATETIME) or b.is_(*DATETIME):
            return self._date_arithmetic(node, op, a, b)
        if a.is_("interval") or b.is_("interval"):
            return INTERVAL
        if op == "/":
            return SqlType("decimal", 38, 6) if "decimal" in (a.name, b.name) and DOUBLE not in (a, b) else DOUBLE
        if op == "div":
            return BIGINT
        if a.is_("string") or b.is_("string"):
            return DOUBLE
        return wider(a, b)

    def _date_arithmetic(self, node: exp.Binary, op: str, a: SqlType, b: SqlType) -> SqlType:
        date, other = (a, b) if a.is_(*DATETIME) else (b, a)
        if op == "+" and other.is_(*INTEGRAL) and date.is_("date"):
            return DATE
        if op == "-" and a.is_("date") and b.is_(*INTEGRAL):
            return DATE
        if op in "+-" and (other.is_("interval", "string") or not other.known):
            return date if not (date.is_("date") and other.is_("interval")) else ANY
        if op == "-" and a.is_(*DATETIME) and b.is_(*DATETIME):
            return INTERVAL if not (a.is_("date") and b.is_("date")) else ANY
        raise TypeProblem(f"'{_sql(node)}': {a} {op} {b} is not defined (a date takes + or - a whole number of "
                          f"days or an interval)")

    def _compare(self, left: exp.Expression, right: exp.Expression, node: exp.Expression) -> None:
        a, b = self.of(left), self.of(right)
        if not comparable(a, b):
            raise TypeProblem(f"'{_sql(node)}' compares {_sql(left)} ({a}) with {_sql(right)} ({b})")

    def _boolean(self, node: exp.Expression, why: str) -> None:
        t = self.of(node)
        if t.known and not t.is_("boolean", "string"):
            raise TypeProblem(f"{why}, but {_sql(node)} is {t}")

    def _datelike(self, node: exp.Expression, call: exp.Expression) -> None:
        t = self.of(node)
        if t.known and not t.is_(*DATETIME, "string"):
            raise TypeProblem(f"'{_sql(call)}' needs a date or a timestamp, but {_sql(node)} is {t}")

    def _case(self, node: exp.Case) -> SqlType:
        if node.this is not None:  # CASE x WHEN v ...: v compared with x
            for when in node.args.get("ifs") or []:
                self._compare(node.this, when.this, when)
        else:
            for when in node.args.get("ifs") or []:
                self._boolean(when.this, "CASE WHEN needs a boolean condition")
        branches = [w.args.get("true") for w in node.args.get("ifs") or []] + [node.args.get("default")]
        return self._common(branches, node)

    def _common(self, parts: Iterable[exp.Expression | None], node: exp.Expression, strict: bool = False) -> SqlType:
        parts = [p for p in parts if p is not None]
        types = [self.of(p) for p in parts]
        known = [t for t in types if t.known]
        if not known:
            return NULL if types and all(t.is_("null") for t in types) else ANY
        out = known[0]
        for t in known[1:]:
            if not comparable(out, t):
                if strict:
                    shown = ", ".join(f"{_sql(p)} ({t})" for p, t in zip(parts, types))
                    raise TypeProblem(f"'{_sql(node)}' mixes types that have no common type: {shown}")
                return ANY  # Spark decides (or refuses); accept
            out = wider(out, t) if out.name in NUMERIC and t.name in NUMERIC else out
        return out

    def _function(self, node: exp.Func) -> SqlType:
        name = function_name(node, self.text) or type(node).__name__.lower()
        args = [a for a in node.iter_expressions()]
        types = [self.of(a) for a in args]
        if name in NUMBER_ARGS:
            for a, t in zip(args, types):
                if t.is_("boolean", "date", "timestamp", "binary"):
                    raise TypeProblem(f"'{_sql(node)}' needs a number, but {_sql(a)} is {t}")
        if name in DATE_ARG and args:
            self._datelike(args[0], node)
        if name in SAME_AS_ARG and types:
            return types[0] if types[0].name in NUMERIC else ANY
        for names, result in ((DATE_RESULT, DATE), (TIMESTAMP_RESULT, TIMESTAMP), (INT_RESULT, INT),
                              (BIGINT_RESULT, BIGINT), (STRING_RESULT, STRING), (BOOLEAN_RESULT, BOOLEAN),
                              (DOUBLE_RESULT, DOUBLE)):
            if name in names:
                return result
        if name in ("floor", "ceil", "ceiling") and types:
            return BIGINT if types[0].name in NUMERIC and not types[0].is_("decimal") else ANY
        return ANY


def _clip(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


def _sql(node: exp.Expression) -> str:
    text = node.sql(dialect="spark")
    return text if len(text) <= 60 else text[:57] + "..."


def expression_type(text: str, columns: dict[str, SqlType]) -> SqlType:
    """The type of ``text`` over ``columns``; ``TypeProblem`` on a type error (``ExpressionError``
    when it cannot be read: validation reports that elsewhere)."""
    tree, _ = parse(text)
    return Typer(columns, text).of(tree)


# ---- aggregates ---------------------------------------------------------------------------------
def aggregate_type(func: str, arg: SqlType | None, text: str) -> SqlType:
    """The result type of ``func(arg)``; ``TypeProblem`` for a sum or average of what is not a number."""
    if func == "count":
        return BIGINT
    if arg is None or not arg.known:
        return ANY if func != "count" else BIGINT
    if func in ("sum", "avg") and arg.name not in NUMERIC + ("interval",):
        raise TypeProblem(f"'{text}': {func} needs a number, but its argument is {arg}")
    if func == "sum":
        if arg.is_(*INTEGRAL):
            return BIGINT
        if arg.is_("decimal"):
            return SqlType("decimal", min(38, arg.precision + 10), arg.scale)
        return DOUBLE if arg.name in FRACTIONAL else arg
    if func == "avg":
        return SqlType("decimal", min(38, arg.precision + 4), min(38, arg.scale + 4)) if arg.is_("decimal") else DOUBLE
    return arg  # min, max


# ---- a circuit ----------------------------------------------------------------------------------
Types = dict[str, SqlType]  # column (as named) -> type, in the relation's column order


@dataclass
class CircuitTyper:
    """Types every node of a circuit in dependency order and collects the problems."""

    spec: CircuitSpec
    resolution: Resolution
    skip: frozenset[str]
    types: dict[str, Types | None] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def run(self) -> list[Problem]:
        for name, inp in self.spec.inputs.items():
            self.types[name] = {c.name: parse_type(c.type) for c in inp.columns}
        self.nodes(self.spec.nodes, "", self.types)
        return self.problems

    def nodes(self, nodes: dict[str, NodeSpec], prefix: str, scope: dict[str, Types | None]) -> None:
        pending = dict(nodes)
        for _ in range(len(nodes) + 1):  # dependency order: a node once all it reads is typed
            for name, node in list(pending.items()):
                refs = [r for r in node.references if r in nodes and r != name]
                if any(r in pending for r in refs):
                    continue
                label = prefix + name
                del pending[name]
                scope[name] = None if label in self.skip else self._node(label, node, scope)
            if not pending:
                break
        for name in pending:  # on a cycle (reported elsewhere): unknown
            scope[name] = None

    def problem(self, label: str, line: int, what: str, message: str) -> None:
        self.problems.append(Problem(self.spec.path, line, label, f"{what}: type error: {message}"))

    def expr(self, label: str, line: int, what: str, text: str, columns: Types | None) -> SqlType:
        if columns is None:
            return ANY
        try:
            return expression_type(text, {c.lower(): t for c, t in columns.items()})
        except TypeProblem as exc:
            self.problem(label, line, what, str(exc))
        except (ExpressionError, RecursionError, ValueError):
            pass  # unreadable: reported by the expression check
        return ANY

    def _node(self, label: str, node: NodeSpec, scope: dict[str, Types | None]) -> Types | None:
        """The node's output types, by its op's ``types`` hook (``spec/ops/<op>.py``)."""
        op = node_op(node.op)
        return op.types(self, label, node, scope) if op is not None and op.types is not None else None

    def sql_types(self, label: str, node: NodeSpec, scope: dict[str, Types | None]) -> Types | None:
        """An sql node's output types, from its bound plan (the one kept on the node)."""
        return self._sql(label, node, scope, self.resolution.columns.get(label) if "." not in label else None)

    def _sql(self, label: str, node: NodeSpec, scope: dict[str, Types | None], cols) -> Types | None:
        from .sql import SqlError, plan as P
        from .sql.node import bind_node

        def lookup(name: str):
            return self.resolution.columns.get(name)

        try:
            rel = bind_node(node.sql, lookup, tuple(self.spec.inputs) + tuple(self.spec.nodes))
        except (SqlError, AttributeError, TypeError):
            return None
        line = node.line_of("query")
        done: dict[int, Types | None] = {}

        def typed(r) -> Types | None:
            if id(r) in done:
                return done[id(r)]
            done[id(r)] = None  # a loop reads itself: unknown while it is typed
            done[id(r)] = result = rel_types(r)
            return result

        def rel_types(r) -> Types | None:
            if isinstance(r, P.Table):
                found = scope.get(r.name) or next((t for n, t in scope.items() if n.lower() == r.name.lower()), None)
                return dict(zip(r.columns, found.values())) if found and len(found) == len(r.columns) else None
            where = f"query, in '{_clip(r.sql)}'"
            if isinstance(r, P.Map):
                src = typed(r.input)
                return {name: self.expr(label, line, where, e, src) for name, e in r.exprs}
            if isinstance(r, P.Filter):
                src = typed(r.input)
                t = self.expr(label, line, where, r.where, src)
                if (t.known and not t.is_("boolean")) or t.is_("null"):
                    self.problem(label, line, where, f"the condition is {t}, not a boolean")
                return src
            if isinstance(r, P.Join):
                lt, rt = typed(r.left), typed(r.right)
                if lt is not None and rt is not None:
                    for lk, rk in zip(r.left_keys, r.right_keys):
                        a, b = lt.get(lk, ANY), rt.get(rk, ANY)
                        if not comparable(a, b):
                            self.problem(label, line, where,
                                          f"{lk} ({a}) is compared with {rk} ({b}): values of these types are never equal")
                    for text, side in ((r.left_only, lt), (r.right_only, rt)):
                        if text:
                            self.expr(label, line, where, text, side)
                out = {o: (lt or {}).get(s, ANY) for s, o in r.left_out} | {o: (rt or {}).get(s, ANY) for s, o in r.right_out}
                if r.mixed:
                    self.expr(label, line, where, r.mixed, out)
                return out if lt is not None and rt is not None else None
            if isinstance(r, P.Semi):
                lt, rt = typed(r.left), typed(r.right)
                if lt is not None and rt is not None:
                    for lk, rk in zip(r.left_keys, r.right_keys):
                        a, b = lt.get(lk, ANY), rt.get(rk, ANY)
                        if not comparable(a, b):
                            self.problem(label, line, where,
                                          f"{lk} ({a}) is compared with {rk} ({b}): values of these types are never equal")
                return lt
            if isinstance(r, P.Aggregate):
                src = typed(r.input)
                if src is None:
                    return None
                out = {g: src.get(g, ANY) for g in r.group_by}
                for name, func, arg, _distinct in r.aggs:
                    t = self.expr(label, line, where, arg, src) if arg else None
                    try:
                        out[name] = aggregate_type(func, t, f"{func}(...) AS {name}")
                    except TypeProblem as exc:
                        self.problem(label, line, where, str(exc))
                        out[name] = ANY
                return {c: out.get(c, ANY) for c in r.columns}
            if isinstance(r, P.WindowAssign):
                src = typed(r.input)
                return None if src is None else {**src, "window_start": TIMESTAMP, "window_end": TIMESTAMP}
            if isinstance(r, (P.Distinct, P.TopK, P.NotIn)):
                for child in P.inputs_of(r):
                    typed(child)
                first = typed(P.inputs_of(r)[0])
                return None if first is None else {c: first.get(c, INT) for c in r.columns}
            for child in P.inputs_of(r):
                typed(child)
            return None

        out = typed(rel)
        return None if out is None else {c: out.get(c, ANY) for c in (cols or rel.columns)}


def type_problems(spec: CircuitSpec, resolution: Resolution, skip: frozenset[str] = frozenset()) -> list[Problem]:
    """Type errors of every expression of ``spec`` (nodes in ``skip`` are left out)."""
    return CircuitTyper(spec, resolution, skip).run()
