"""The checks every view delta gets without asking: the Z-set invariants the engine relies on.

- ``dbsp_delta_is_consolidated``: one row per tuple (nulls equal, as in GROUP BY), no zero (or
  null) weight. Downstream state and distinct's H assume it.
- ``dbsp_view_weights_positive``: after the delta is applied, no tuple of the view has a negative
  weight (a view is a multiset; a negative weight means a deletion of something never inserted).
- ``dbsp_view_is_set`` (set-valued views only: distinct, union, ...): after the delta every
  tuple present has weight exactly 1.

All three come from one per-tuple aggregate over the delta plus the previous view restricted to
the delta's tuples (a null-safe semi join, the same lookup the operators use), so the work is
bounded by the delta and its lookups, and the clean case costs one Spark action per view (5-7
Spark jobs with AQE on: the broadcast of the delta's tuples, two shuffles, the result). Only
when a check fails does a second action fetch up to ``EXAMPLES`` offending tuples per check.
The previous view need not be consolidated (its rows per tuple are summed).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any, Mapping

from spark_jobs.quality.report import CheckResult, jsonable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
from spark_jobs.spec.model import WEIGHT

CONSOLIDATED = "dbsp_delta_is_consolidated"
WEIGHTS_POSITIVE = "dbsp_view_weights_positive"
IS_SET = "dbsp_view_is_set"
EXAMPLES = 5

# private per-tuple columns (prefixed so they cannot clash with a view's columns)
_ROWS, _ZERO, _INS, _DW, _PW, _NEW = ("__q_rows", "__q_zero", "__q_ins", "__q_dw", "__q_pw",
                                      "__q_new")


@dataclass
class BuiltinOutcome:
    """The built-in results of one view, and what the user checks need to know."""

    results: list[CheckResult]
    inserted_rows: int  # delta rows with weight > 0 (the rows user expectations look at)


def example(row: Mapping[str, Any], cols: list[str]) -> dict[str, Any]:
    """An offending tuple as the report shows it (``row``: its per-tuple sums)."""
    return {"row": {c: jsonable(row[c]) for c in cols},
            "delta_rows": row[_ROWS], "zero_weight_rows": row[_ZERO],
            "delta_weight": row[_DW], "previous_weight": row[_PW], "new_weight": row[_NEW]}


def outcome(totals: Mapping[str, int], examples: Mapping[str, list], is_set: bool, target: str) -> BuiltinOutcome:
    """The results of the built-in checks of one view delta, from its per-tuple totals (keys
    tuples, rows, zero_rows, inserted, duplicated, and one count per check) and up to EXAMPLES
    offending tuples per failing check; shared by the Spark and the in-process gate."""
    failing = {name for name in (CONSOLIDATED, WEIGHTS_POSITIVE, IS_SET) if totals.get(name, 0) > 0}
    details: dict[str, dict[str, Any]] = {
        CONSOLIDATED: {"delta_rows": totals["rows"], "distinct_tuples": totals["tuples"],
                       "duplicated_tuples": totals["duplicated"],
                       "zero_weight_rows": totals["zero_rows"]},
        WEIGHTS_POSITIVE: {"tuples_checked": totals["tuples"],
                           "negative_tuples": totals[WEIGHTS_POSITIVE]},
    }
    if is_set:
        details[IS_SET] = {"tuples_checked": totals["tuples"], "non_set_tuples": totals[IS_SET]}
    results = []
    for name, info in details.items():
        if name in examples and examples[name]:
            info["examples"] = examples[name]
        results.append(CheckResult(name, target, "fail", name not in failing, info, builtin=True))
    return BuiltinOutcome(results=results, inserted_rows=int(totals["inserted"]))


def _per_tuple(delta: "DataFrame", previous: "DataFrame | None") -> tuple["DataFrame", list[str]]:
    """One row per tuple of the delta: its delta rows, zero-weight rows, inserted rows, summed
    delta weight, and its summed weight in ``previous`` (0 when absent)."""
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark.zset import col, data_columns, restrict

    cols = data_columns(delta)
    w = col(WEIGHT)
    zero = F.lit(0).cast("long")
    tagged = delta.select(
        *[col(c) for c in cols],
        F.lit(1).cast("long").alias(_ROWS),
        F.when(w.isNull() | (w == 0), 1).otherwise(0).cast("long").alias(_ZERO),
        F.when(w > 0, 1).otherwise(0).cast("long").alias(_INS),
        F.coalesce(w, zero).cast("long").alias(_DW),
        zero.alias(_PW),
    )
    if previous is not None:
        looked_up = restrict(previous.select(*[col(c) for c in cols], col(WEIGHT)), delta, cols, cols)
        tagged = tagged.unionByName(looked_up.select(
            *[col(c) for c in cols], zero.alias(_ROWS), zero.alias(_ZERO), zero.alias(_INS),
            zero.alias(_DW), F.coalesce(col(WEIGHT), zero).cast("long").alias(_PW)))
    sums = [F.sum(F.col(c)).cast("long").alias(c) for c in (_ROWS, _ZERO, _INS, _DW, _PW)]
    grouped = tagged.groupBy(*[col(c) for c in cols]).agg(*sums) if cols else tagged.agg(*sums)
    return grouped.withColumn(_NEW, F.col(_DW) + F.col(_PW)), cols


def _violations(is_set: bool) -> dict[str, "Column"]:
    """Per check, the condition a tuple breaks it with."""
    from pyspark.sql import functions as F

    new = F.col(_NEW)
    conds = {
        CONSOLIDATED: (F.col(_ROWS) > 1) | (F.col(_ZERO) > 0),
        WEIGHTS_POSITIVE: new < 0,
    }
    if is_set:
        conds[IS_SET] = ~new.isin(0, 1)
    return conds


def _count(cond: "Column") -> "Column":
    from pyspark.sql import functions as F

    return F.coalesce(F.sum(F.when(cond, 1).otherwise(0)), F.lit(0)).cast("long")


def _examples(per_tuple: "DataFrame", cols: list[str], failing: dict[str, "Column"]) -> dict[str, list]:
    """Up to EXAMPLES offending tuples per failing check, in one Spark action."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    parts = [per_tuple.where(cond).limit(EXAMPLES).select(F.lit(name).alias("__q_check"), "*")
             for name, cond in failing.items()]
    out: dict[str, list] = {name: [] for name in failing}
    for row in reduce(DataFrame.unionByName, parts).collect():
        out[row["__q_check"]].append(example(row, cols))
    return out


def check_view_delta(view: str, delta: "DataFrame", previous: "DataFrame | None", *,
                     is_set: bool, target: str | None = None) -> BuiltinOutcome:
    """Run the built-in checks on one view's delta (``previous`` None = the view was empty)."""
    from pyspark.sql import functions as F

    target = target or f"view:{view}"
    per_tuple, cols = _per_tuple(delta, previous)
    conds = _violations(is_set)
    totals = per_tuple.agg(
        F.count(F.lit(1)).alias("tuples"),
        F.coalesce(F.sum(_ROWS), F.lit(0)).cast("long").alias("rows"),
        F.coalesce(F.sum(_ZERO), F.lit(0)).cast("long").alias("zero_rows"),
        F.coalesce(F.sum(_INS), F.lit(0)).cast("long").alias("inserted"),
        _count(F.col(_ROWS) > 1).alias("duplicated"),
        *[_count(cond).alias(name) for name, cond in conds.items()],
    ).collect()[0]

    failing = {name: cond for name, cond in conds.items() if totals[name] > 0}
    examples = _examples(per_tuple, cols, failing) if failing else {}
    return outcome(totals.asDict(), examples, is_set, target)
