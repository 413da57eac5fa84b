"""The compiler proper: a parse tree (``parse.py``) and an input schema in, a ``Node`` tree out.

It resolves columns as Spark does (case-insensitively; an ambiguous name is left to Spark), types
literals by Spark's rules (``literals.py``), applies Spark's implicit casts through the builders
of the other modules, and folds constant parts (Spark's ConstantFolding): a constant part that
raises is left to Spark, whose optimizer and code generator treat such parts in ways a
row-by-row model does not reproduce.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa
from sqlglot import exp

from spark_jobs.spec.sql_check import short_sql

from . import arithmetic, dates, literals, logic, mathfn, strings
from .arithmetic import Operand
from .calendar import parse_timestamp_literal
from .casts import cast
from .runtime import ColumnRef, Literal, Node, fold
from .sql_types import (BOOLEAN, BYTE, DATE, DOUBLE, FLOAT, INT, LONG, NULL, SHORT, STRING, TIMESTAMP, TIMESTAMP_NTZ,
                         NotCovered, decimal, from_arrow, from_sql_name)

_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.IntDiv: "div", exp.Mod: "%"}
_COMPARISON = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_CAST_FUNCTIONS = {"int": INT, "bigint": LONG, "smallint": SHORT, "tinyint": BYTE, "double": DOUBLE, "float": FLOAT,
                   "string": STRING, "date": DATE, "boolean": BOOLEAN, "decimal": decimal(10, 0)}


class Compiler:
    """Compiles expressions over one input schema (``columns``: name -> Arrow type)."""

    def __init__(self, schema: pa.Schema, timezone: str = "UTC"):
        self.schema = schema
        self.timezone = timezone
        self.by_lower: dict[str, list[str]] = {}
        for name in schema.names:
            self.by_lower.setdefault(name.lower(), []).append(name)
        self.used: dict[str, None] = {}
        self.functions: dict[str, Callable[[list[exp.Expression]], Node]] = self._function_table()

    # -- entry ---------------------------------------------------------------------------
    def compile(self, e: exp.Expression) -> Node:
        return self._fold(self._compile(e))

    def _fold(self, node: Node) -> Node:
        return fold(node)

    # -- dispatch ------------------------------------------------------------------------
    def _compile(self, e: exp.Expression) -> Node:
        if isinstance(e, exp.Paren):
            return self.compile(e.this)
        if isinstance(e, exp.Column):
            return self._column(e)
        if isinstance(e, (exp.Literal, exp.Null, exp.Boolean, exp.RawString)) or literals.typed_literal(e):
            return self._literal(e)
        if isinstance(e, exp.Neg):
            inner = literals.unparen(e.this)
            if literals.is_number(inner):
                return self._literal(inner, negative=True)
            return arithmetic.negate(self.compile(e.this))
        if isinstance(e, (exp.Cast, exp.TryCast)):
            return self._cast(e)
        if isinstance(e, (exp.Add, exp.Sub)) and (isinstance(e.expression, exp.Interval) or
                                                   (isinstance(e, exp.Add) and isinstance(e.this, exp.Interval))):
            return self._date_interval(e)
        if type(e) in _ARITHMETIC:
            left, right = self._operand(e.this), self._operand(e.expression)
            if isinstance(e, (exp.Add, exp.Sub)) and DATE in (left.node.dtype, right.node.dtype):
                return self._date_plus_days(isinstance(e, exp.Sub), left.node, right.node)
            return arithmetic.binary(_ARITHMETIC[type(e)], left, right)
        if type(e) in _COMPARISON:
            return self._comparison(_COMPARISON[type(e)], e.this, e.expression)
        if isinstance(e, (exp.NullSafeEQ, exp.NullSafeNEQ)):  # <=>, IS [NOT] DISTINCT FROM
            equal = logic.NullSafeEqual(self.compile(e.this), self.compile(e.expression))
            return logic.negation(equal) if isinstance(e, exp.NullSafeNEQ) else equal
        if isinstance(e, (exp.And, exp.Or)):
            return logic.logical("AND" if isinstance(e, exp.And) else "OR", self.compile(e.this),
                                 self.compile(e.expression))
        if isinstance(e, exp.Not):
            return logic.negation(self.compile(e.this))
        if isinstance(e, exp.Is):
            return self._is(e)
        if isinstance(e, exp.In):
            if e.args.get("query") or e.args.get("unnest") or e.args.get("field"):
                raise NotCovered("IN with a subquery is not covered")
            return logic.in_list(self.compile(e.this), [self.compile(i) for i in e.expressions])
        if isinstance(e, exp.Between):
            if e.args.get("symmetric"):
                raise NotCovered("BETWEEN SYMMETRIC is not covered")
            return logic.logical("AND", self._comparison(">=", e.this, e.args["low"]),
                                 self._comparison("<=", e.this, e.args["high"]))
        if isinstance(e, (exp.Like, exp.ILike)):
            return self._like(e, "\\")
        if isinstance(e, exp.Escape) and isinstance(e.this, (exp.Like, exp.ILike)):
            esc = e.expression
            if not (isinstance(esc, exp.Literal) and esc.is_string and len(esc.this) == 1):
                raise NotCovered("LIKE ... ESCAPE needs a one-character string literal")
            return self._like(e.this, esc.this)
        if isinstance(e, exp.DPipe):
            return strings.concat([self.compile(e.this), self.compile(e.expression)])
        if isinstance(e, exp.Case):
            return self._case(e)
        if isinstance(e, exp.If):
            cond, then, other = e.this, e.args.get("true"), e.args.get("false")
            return logic.Case([(self.compile(cond), self.compile(then))],
                              self.compile(other) if other is not None else Literal(NULL, None))
        if isinstance(e, exp.Extract):
            return self._extract(e.this.name, e.expression)
        if isinstance(e, exp.Substring):
            args = [e.this, e.args.get("start"), e.args.get("length")]
            return strings.substring([self.compile(a) for a in args if a is not None])
        if isinstance(e, exp.Trim):
            return self._trim(e)
        if isinstance(e, (exp.Floor, exp.Ceil)):
            if e.args.get("decimals") is not None or e.args.get("to") is not None:
                raise NotCovered("floor/ceil with a scale is not covered")
            return mathfn.floor_ceil(self.compile(e.this), isinstance(e, exp.Ceil))
        if isinstance(e, exp.Anonymous):
            name = e.name.lower()
            builder = self.functions.get(name)
            if builder is None:
                raise NotCovered(f"function '{name}' is not covered by the Arrow kernels")
            return builder(list(e.expressions))
        raise NotCovered(f"'{short_sql(e)}' is not covered by the Arrow kernels")

    def _date_plus_days(self, subtract: bool, left: Node, right: Node) -> Node:
        """``date + n``, ``n + date``, ``date - n``: Spark's ``date_add``/``date_sub``."""
        if left.dtype != DATE:
            if subtract:
                raise NotCovered(f"{left.dtype} - date is not covered")
            left, right = right, left
        if right.dtype == DATE:
            raise NotCovered("date - date (an interval) is not covered")
        return dates.date_add("date_sub" if subtract else "date_add", left, right, self.timezone)

    def _date_interval(self, e: exp.Expression) -> Node:
        """``date ± INTERVAL 'n' DAY|MONTH|YEAR`` (one unit, an integer): ``date_add`` or
        ``add_months``, as Spark rewrites them; other intervals are not covered."""
        interval, other = (e.expression, e.this) if isinstance(e.expression, exp.Interval) else (e.this, e.expression)
        unit = interval.args.get("unit")
        unit_name = unit.name.lower() if isinstance(unit, exp.Var) else ""
        value = interval.this
        text = value.this if isinstance(value, exp.Literal) else None
        factor = {"day": 1, "days": 1, "month": 1, "months": 1, "year": 12, "years": 12}.get(unit_name)
        if factor is None or text is None or not str(text).lstrip("+-").isdigit():
            raise NotCovered(f"the interval '{short_sql(interval)}' is not covered (one DAY, MONTH or YEAR field "
                             "only)")
        amount = int(text) * factor * (-1 if isinstance(e, exp.Sub) else 1)
        if not -2**31 <= amount < 2**31:
            raise NotCovered("an interval beyond the int range is not covered")
        start = self.compile(other)
        if start.dtype != DATE:
            raise NotCovered(f"{start.dtype} ± interval is not covered (dates only)")
        if unit_name.startswith("day"):
            return dates.date_add("date_add", start, Literal(INT, amount), self.timezone)
        return dates.add_months(start, Literal(INT, amount), self.timezone)

    # -- leaves --------------------------------------------------------------------------
    def _column(self, e: exp.Column) -> Node:
        if e.args.get("table") is not None or isinstance(e.this, exp.Star):
            raise NotCovered(f"'{short_sql(e)}' (a qualified name or field access) is not covered")
        name = e.this.name
        found = self.by_lower.get(name.lower(), [])
        if len(found) != 1:
            why = "is ambiguous" if found else "is not an input column"
            raise NotCovered(f"column {name!r} {why}")
        actual = found[0]
        self.used[actual] = None
        return ColumnRef(from_arrow(self.schema.field(actual).type, actual), actual)

    def _literal(self, e: exp.Expression, negative: bool = False) -> Node:
        if isinstance(e, exp.Null):
            return Literal(NULL, None)
        if isinstance(e, exp.Boolean):
            return Literal(BOOLEAN, bool(e.this))
        if isinstance(e, exp.RawString) or (isinstance(e, exp.Literal) and e.is_string):
            return Literal(STRING, e.this if isinstance(e.this, str) else e.name)
        if isinstance(e, (exp.Cast, exp.TryCast)):
            return literals.suffixed_literal(e.this.this if isinstance(e.this, exp.Literal) else e.this.name,
                                     e.meta["literal"], negative)
        return literals.number_literal(str(e.this), negative)

    def _operand(self, e: exp.Expression) -> Operand:
        """An arithmetic or comparison operand, remembering integral and decimal literals."""
        node = self.compile(e)
        core = literals.unparen(e)
        if isinstance(node, Literal) and node.value is not None and literals.is_literal_syntax(core):
            if node.dtype.is_integral:
                return Operand(node, literal=int(node.value))
        return Operand(node)

    # -- forms ---------------------------------------------------------------------------
    def _cast(self, e: exp.Expression) -> Node:
        if e.args.get("safe"):
            raise NotCovered("try_cast is not covered (NULL instead of an error, row by row)")
        if e.meta.get("literal") is not None:
            return self._literal(e)
        to = e.args["to"]
        params = [int(p.this.this) if isinstance(p.this, exp.Literal) else -1 for p in to.expressions]
        target = from_sql_name(to.this.name if hasattr(to.this, "name") else str(to.this), params)
        inner = literals.unparen(e.this)
        if target in (TIMESTAMP, TIMESTAMP_NTZ) and isinstance(inner, exp.Literal) and inner.is_string:
            micros = parse_timestamp_literal(inner.this)
            if micros is None:
                raise NotCovered(f"timestamp literal {inner.this!r}: only 'yyyy-mm-dd[ hh:mm[:ss[.ffffff]]]' is "
                                 "covered")
            return Literal(target, micros)
        return cast(self.compile(e.this), target, self.timezone)

    def _comparison(self, op: str, left_e: exp.Expression, right_e: exp.Expression) -> Node:
        left, right = self._operand(left_e), self._operand(right_e)
        rewritten = literals.integral_vs_decimal_literal(op, left, right, literals.decimal_literal(left_e),
                                                         literals.decimal_literal(right_e))
        if rewritten is not None:
            return rewritten
        return logic.comparison(op, literals.decimal_side(left, right), literals.decimal_side(right, left))

    def _is(self, e: exp.Is) -> Node:
        target = e.expression
        child = self.compile(e.this)
        if isinstance(target, exp.Null):
            return logic.IsNull(child)
        if isinstance(target, exp.Boolean):
            return logic.NullSafeEqual(child, Literal(BOOLEAN, bool(target.this)))
        raise NotCovered(f"IS {short_sql(target)} is not covered")

    def _like(self, e: exp.Expression, escape: str) -> Node:
        node = strings.like(self.compile(e.this), self.compile(e.expression), escape,
                            ignore_case=isinstance(e, exp.ILike))
        return logic.negation(node) if e.args.get("negate") else node

    def _case(self, e: exp.Case) -> Node:
        subject = e.this
        branches = []
        for branch in e.args.get("ifs") or []:
            cond = branch.this
            value = self.compile(branch.args["true"])
            test = self._comparison("=", subject, cond) if subject is not None else self.compile(cond)
            branches.append((test, value))
        default = e.args.get("default")
        if default is None:
            return logic.Case(branches, Literal(NULL, None), has_else=False)
        return logic.Case(branches, self.compile(default))

    def _extract(self, field: str, source: exp.Expression) -> Node:
        canonical = dates.FIELD_NAMES.get(field.lower())
        if canonical is None:
            raise NotCovered(f"EXTRACT({field}) is not covered")
        return dates.field_of(canonical, self.compile(source), self.timezone, extract=True)

    def _trim(self, e: exp.Trim) -> Node:
        position = (e.args.get("position") or "BOTH").lower()
        if e.args.get("collation") is not None:
            raise NotCovered("TRIM with a collation is not covered")
        args = [self.compile(e.this)]
        if e.expression is not None:
            args.append(self.compile(e.expression))
        return strings.trim(position, args)

    # -- functions -----------------------------------------------------------------------
    def _function_table(self) -> dict[str, Callable[[list[exp.Expression]], Node]]:
        c = self.compile
        tz = self.timezone

        def n_args(name: str, counts: tuple[int, ...], build: Callable[..., Node]):
            def builder(args: list[exp.Expression]) -> Node:
                if len(args) not in counts:
                    raise NotCovered(f"{name} with {len(args)} arguments is not covered")
                return build(*args)
            return builder

        table: dict[str, Callable[[list[exp.Expression]], Node]] = {
            "coalesce": lambda args: logic.Coalesce([c(a) for a in args]),
            "nvl": n_args("nvl", (2,), lambda a, b: logic.Coalesce([c(a), c(b)])),
            "ifnull": n_args("ifnull", (2,), lambda a, b: logic.Coalesce([c(a), c(b)])),
            "nullif": n_args("nullif", (2,), self._nullif),
            "nvl2": n_args("nvl2", (3,), lambda a, b, d: logic.Case([(logic.IsNull(c(a), negated=True), c(b))], c(d))),
            "isnull": n_args("isnull", (1,), lambda a: logic.IsNull(c(a))),
            "isnotnull": n_args("isnotnull", (1,), lambda a: logic.IsNull(c(a), negated=True)),
            "concat": lambda args: strings.concat([c(a) for a in args]),
            "substr": lambda args: strings.substring([c(a) for a in args]),
            "substring": lambda args: strings.substring([c(a) for a in args]),
            "left": n_args("left", (2,), lambda a, b: strings.left_right("left", [c(a), c(b)])),
            "right": n_args("right", (2,), lambda a, b: strings.left_right("right", [c(a), c(b)])),
            "ltrim": n_args("ltrim", (1,), lambda a: strings.trim("leading", [c(a)])),
            "rtrim": n_args("rtrim", (1,), lambda a: strings.trim("trailing", [c(a)])),
            "replace": n_args("replace", (2, 3), lambda *a: strings.replace([c(x) for x in a])),
            "abs": n_args("abs", (1,), lambda a: arithmetic.absolute(c(a))),
            "negative": n_args("negative", (1,), lambda a: arithmetic.negate(c(a))),
            "positive": n_args("positive", (1,), self._positive),
            "round": n_args("round", (1, 2), lambda a, s=None: mathfn.round_node(c(a), c(s) if s else None, False)),
            "bround": n_args("bround", (1, 2), lambda a, s=None: mathfn.round_node(c(a), c(s) if s else None, True)),
            "ceiling": n_args("ceiling", (1,), lambda a: mathfn.floor_ceil(c(a), True)),
            "greatest": lambda args: self._extreme(args, True),
            "least": lambda args: self._extreme(args, False),
            "sign": n_args("sign", (1,), lambda a: mathfn.sign(c(a))),
            "signum": n_args("signum", (1,), lambda a: mathfn.sign(c(a))),
            "sqrt": n_args("sqrt", (1,), lambda a: mathfn.sqrt(c(a))),
            "isnan": n_args("isnan", (1,), lambda a: mathfn.isnan(c(a))),
            "nanvl": n_args("nanvl", (2,), lambda a, b: mathfn.nanvl(c(a), c(b))),
            "mod": n_args("mod", (2,), lambda a, b: arithmetic.binary("%", self._operand(a), self._operand(b))),
            "pmod": n_args("pmod", (2,), lambda a, b: arithmetic.binary("pmod", self._operand(a), self._operand(b))),
            "date_add": n_args("date_add", (2,), lambda a, b: dates.date_add("date_add", c(a), c(b), tz)),
            "dateadd": n_args("dateadd", (2,), lambda a, b: dates.date_add("date_add", c(a), c(b), tz)),
            "date_sub": n_args("date_sub", (2,), lambda a, b: dates.date_add("date_sub", c(a), c(b), tz)),
            "datediff": n_args("datediff", (2,), lambda a, b: dates.datediff(c(a), c(b), tz)),
            "date_diff": n_args("date_diff", (2,), lambda a, b: dates.datediff(c(a), c(b), tz)),
            "date_trunc": n_args("date_trunc", (2,), lambda u, t: dates.date_trunc(c(u), c(t), tz)),
            "trunc": n_args("trunc", (2,), lambda d, u: dates.trunc(c(d), c(u), tz)),
            "last_day": n_args("last_day", (1,), lambda d: dates.last_day(c(d), tz)),
            "add_months": n_args("add_months", (2,), lambda d, m: dates.add_months(c(d), c(m), tz)),
            "to_date": n_args("to_date", (1,), lambda s: self._to_date(c(s))),
            "date_part": n_args("date_part", (2,), self._date_part),
            "datepart": n_args("datepart", (2,), self._date_part),
            "typeof": n_args("typeof", (1,), lambda a: Literal(STRING, str(c(a).dtype))),
        }
        for name in ("upper", "ucase", "lower", "lcase"):
            table[name] = n_args(name, (1,), lambda a, _n=name: strings.case_map(_n, c(a)))
        for name in ("length", "char_length", "character_length", "len"):
            table[name] = n_args(name, (1,), lambda a: strings.length(c(a)))
        for name in ("startswith", "endswith", "contains"):
            table[name] = n_args(name, (2,), lambda a, b, _n=name: strings.predicate(_n, [c(a), c(b)]))
        for name, field in dates.FUNCTION_FIELDS.items():
            table[name] = n_args(name, (1,), lambda a, _f=field: dates.field_of(_f, c(a), tz))
        for name, target in _CAST_FUNCTIONS.items():
            table[name] = n_args(name, (1,), lambda a, _t=target: cast(c(a), _t, tz))
        return table

    def _nullif(self, a: exp.Expression, b: exp.Expression) -> Node:
        left = self.compile(a)
        return logic.Case([(self._comparison("=", a, b), Literal(left.dtype, None))], left)

    def _positive(self, a: exp.Expression) -> Node:
        node = self.compile(a)
        if not node.dtype.is_numeric:
            raise NotCovered(f"positive of a {node.dtype} value is not covered")
        return node

    def _extreme(self, args: list[exp.Expression], greatest: bool) -> Node:
        if len(args) < 2:
            raise NotCovered("greatest/least need at least two arguments")
        return logic.Extreme([self.compile(a) for a in args], greatest)

    def _to_date(self, node: Node) -> Node:
        if node.dtype not in (STRING, DATE, TIMESTAMP, TIMESTAMP_NTZ, NULL):
            raise NotCovered(f"to_date of a {node.dtype} value is not covered")
        return dates.as_date(node, "to_date", self.timezone)

    def _date_part(self, field: exp.Expression, source: exp.Expression) -> Node:
        node = self.compile(field)
        if not (isinstance(node, Literal) and node.dtype == STRING and node.value is not None):
            raise NotCovered("date_part with a field that is not a string literal is not covered")
        return self._extract(str(node.value), source)
