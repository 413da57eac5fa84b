"""``GROUP BY window(ts, '1 hour'[, '15 minutes'])``: Spark SQL's time windows in a SQL node.

Spark groups by a struct ``window`` with fields ``start`` and ``end``; the SELECT list reads
``window.start`` and ``window.end``. Here the call becomes a ``WindowAssign`` under the FROM
relation (the IR's ``window_assign``, the operator a YAML ``aggregate.window`` becomes), whose
``window_start`` / ``window_end`` columns are named ``window.start`` / ``window.end`` in the
scope, and the GROUP BY item becomes those two columns: the rest of the grouped query (keys,
aggregates, HAVING, the SELECT list) is the ordinary one.

Refused, each with its position: more than one time window, a size or slide that is not a
string literal duration, a slide longer than the size, Spark's fourth argument (a start offset),
``GROUP BY window(...) AS w`` (Spark refuses it too), a window column that is not a plain column,
and selecting the whole ``window`` struct.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from spark_jobs.spec.time import MAX_WINDOWS_PER_ROW, WINDOW_COLUMNS, DurationError, format_duration, parse_duration

from . import plan as P
from .errors import SqlError, describe, position_of
from .parse import TIME_WINDOW_FUNCTION
from .scope import Field

if TYPE_CHECKING:
    from .binder import Binder, Relation

STRUCT = "window"  # the name Spark gives the struct
FIELDS = (("start", WINDOW_COLUMNS[0]), ("end", WINDOW_COLUMNS[1]))


def is_time_window(node: exp.Expression) -> bool:
    """A call ``window(...)`` (as the parser reads it, ``parse.mask_time_windows``)."""
    return isinstance(node, exp.Anonymous) and str(node.name).lower() == TIME_WINDOW_FUNCTION


def spelled(node: exp.Expression, limit: int = 60) -> str:
    """``node`` for messages, with ``window`` as written (not the name the parser reads it as)."""
    return describe(node, limit).replace(TIME_WINDOW_FUNCTION.upper(), "window").replace(TIME_WINDOW_FUNCTION, "window")


def _duration(arg: exp.Expression, what: str, call: exp.Expression) -> int:
    if not (isinstance(arg, exp.Literal) and arg.is_string):
        raise SqlError(f"the {what} of {spelled(call)} must be a string literal duration such as '1 hour' "
                       f"(a window's size is fixed when the circuit compiles)", arg)
    try:
        us = parse_duration(str(arg.this))
    except DurationError as exc:
        raise SqlError(f"the {what} of {spelled(call)}: {exc}", arg) from None
    if us <= 0:
        raise SqlError(f"the {what} of {spelled(call)} must be longer than 0", arg)
    return us


def group_by_window(binder: "Binder", rel: "Relation", group_items: list[exp.Expression],
                    items: list[exp.Expression]) -> tuple["Relation", list[exp.Expression]]:
    """``rel`` with the window assignment, and the GROUP BY items with ``window(...)`` replaced by
    ``window.start, window.end``; unchanged when the query groups by no time window."""
    from .binder import Relation

    calls = [g for g in group_items if is_time_window(g) or isinstance(g, exp.Alias) and is_time_window(g.this)]
    if not calls:
        return rel, group_items
    if len(calls) > 1:
        raise SqlError(f"GROUP BY {spelled(calls[1])}: one time window per query", calls[1])
    call = calls[0]
    if isinstance(call, exp.Alias):
        raise SqlError(f"GROUP BY {spelled(call.this)} AS {call.alias}: Spark SQL does not name a GROUP BY "
                       f"item; write GROUP BY {spelled(call.this)} and select window.start / window.end",
                       call)
    args = list(call.expressions)
    if len(args) == 4:
        raise SqlError(f"{spelled(call)}: a start offset (the fourth argument) is not supported: windows start at "
                       f"multiples of the slide from 1970-01-01 00:00 UTC", args[3])
    if len(args) not in (2, 3):
        raise SqlError(f"{spelled(call)}: expected window(time column, size) or window(time column, size, slide)",
                       call)
    column = args[0]
    if not isinstance(column, exp.Column) or isinstance(column.this, exp.Star):
        raise SqlError(f"the time of {spelled(call)} must be a timestamp column of the FROM clause "
                       f"(compute another time in a subquery and name it)", column)
    source = rel.scope.resolve(column).column
    size = _duration(args[1], "size", call)
    slide = _duration(args[2], "slide", call) if len(args) == 3 else size
    if slide > size:
        raise SqlError(f"{spelled(call)}: the slide ({format_duration(slide)}) is longer than the size "
                       f"({format_duration(size)}), so some rows would be in no window", args[2])
    if -(-size // slide) > MAX_WINDOWS_PER_ROW:
        raise SqlError(f"{spelled(call)}: each row would be counted in {-(-size // slide)} windows (at most "
                       f"{MAX_WINDOWS_PER_ROW}): use a longer slide", args[2])
    taken = [c for c in WINDOW_COLUMNS if c in rel.plan.columns]
    if taken:
        raise SqlError(f"{spelled(call)}: the FROM relation already has a column '{taken[0]}', which the window "
                       f"adds: rename it in a subquery", call)
    for item in items:
        for col in item.find_all(exp.Column):
            if not col.table and col.name.lower() == STRUCT and not rel.scope.find(col):
                raise SqlError("selecting the whole window struct is not supported: select window.start and "
                               "window.end (for example window.start AS window_start)", col)
    text = f"{spelled(call)} ({format_duration(size)} windows every {format_duration(slide)} on {source})"
    plan = P.WindowAssign(WINDOW_COLUMNS + rel.plan.columns, text, rel.plan, source, size, slide, position_of(column))
    fields = [Field(STRUCT, name, column, unqualified=False) for name, column in FIELDS] + list(rel.fields)
    keys = [exp.column(name, table=STRUCT) for name, _ in FIELDS]
    at = group_items.index(call)
    return Relation(plan, fields), group_items[:at] + keys + group_items[at + 1:]
