"""Declared expectations -> Great Expectations suites, run on Spark DataFrames.

One ephemeral GE context per process (importing GE costs seconds; the context is cached), one
Spark datasource in it, one dataframe asset per target and one suite + validation definition per
(target, list of expectations), reused by every later timestep. Expectations are GE's own
classes found by name (``expect_column_values_to_not_be_null`` -> ``ExpectColumnValuesToNotBeNull``);
their arguments are GE's, checked by GE's own models when the suite is built.

GE quirks handled here (GE 1.24):
- GE logs at INFO from import on, and a few of its modules pin their own loggers to INFO, so the
  loggers are quietened before and after import, not just the parent.
- Metric progress bars (tqdm, to stderr) are on by default: turned off in the context.
- The Spark datasource persists every batch DataFrame and never unpersists it (``persist=True``
  default): a leak in a process that runs many timesteps. We create it with ``persist=False``
  and cache the batch ourselves for the duration of one validation.
- ``ValidationResult.results`` is not in suite order: each expectation carries its index in
  ``meta`` so results map back to their declaration (and its policy).
- An expectation that errors (e.g. a missing column) comes back ``success=False`` with the error
  in ``exception_info``, keyed by metric id rather than flat; both shapes are read.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.quality.report import CheckResult, jsonable
from spark_jobs.spec.model import Expectation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

DATASOURCE = "dbsp"
BATCH_DEFINITION = "whole"
INDEX_KEY = "dbsp_index"  # our key in each GE expectation's meta
RESULT_FORMAT: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 5}


class ExpectationConfigError(DbspError, ValueError):
    """A declared expectation GE cannot build (unknown name, bad arguments). A configuration
    error, not a data failure: it is raised before any data is checked."""
    exit_code = EXIT_FAILED
    retryable = False


class UnknownExpectationError(ExpectationConfigError):
    """The name is not one of Great Expectations' expectations."""


# ---- the GE runtime, once per process ---------------------------------------------------------

def _quiet_ge_logs() -> None:
    """Keep GE's INFO chatter out of task logs: its parent logger and the ones it pins to INFO."""
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("great_expectations.") and isinstance(logger, logging.Logger):
            if logger.level and logger.level < logging.WARNING:
                logger.setLevel(logging.WARNING)


@functools.cache
def gx_module() -> Any:
    """``great_expectations``, imported on first use (seconds) with its logs quietened."""
    _quiet_ge_logs()
    import great_expectations as gx

    _quiet_ge_logs()
    return gx


@dataclass
class _Runtime:
    context: Any
    datasource: Any = None  # GE's Spark datasource (its creation starts a Spark session): on first use
    batch_definitions: dict[tuple[str, str], Any] = field(default_factory=dict)  # (flavour, target) -> definition
    validations: dict[tuple[str, str, str], Any] = field(default_factory=dict)  # (flavour, target, fingerprint)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pandas: Any = None  # the pandas datasource, made on first use (in-process steps)

    def source(self, flavour: str) -> Any:
        if flavour == "spark":
            if self.datasource is None:
                self.datasource = self.context.data_sources.add_spark(name=DATASOURCE, persist=False)
                _quiet_ge_logs()
            return self.datasource
        if self.pandas is None:
            self.pandas = self.context.data_sources.add_pandas(name=f"{DATASOURCE}_pandas")
        return self.pandas


_INIT_LOCK = threading.Lock()  # warm_up may run in a thread while Spark starts
_RUNTIME: _Runtime | None = None


def _runtime() -> _Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        with _INIT_LOCK:
            if _RUNTIME is None:
                _RUNTIME = _new_runtime()
    return _RUNTIME


def _new_runtime() -> _Runtime:
    gx = gx_module()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    _quiet_ge_logs()
    return _Runtime(context=context)


def warm_up() -> None:
    """Import GE and build the context now, not at the first check: GE's import takes seconds
    (2.5 s on a quiet machine, far more under load), so a runner can call this in a thread
    while its SparkSession starts."""
    _runtime()


def is_cached(df: "DataFrame") -> bool:
    """Whether Spark has ``df``'s plan cached (asks the cache manager, not the Python object)."""
    try:
        level = df.storageLevel
        return bool(level.useMemory or level.useDisk or level.useOffHeap)
    except Exception:  # very old or unusual DataFrame implementations
        return bool(getattr(df, "is_cached", False))


# ---- names -> classes -------------------------------------------------------------------------

def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


@functools.cache
def _registry() -> dict[str, type]:
    """Every GE expectation class by its snake_case name (``expectation_type``)."""
    gx = gx_module()
    base = gx.expectations.Expectation
    out: dict[str, type] = {}
    for attr in dir(gx.expectations):
        cls = getattr(gx.expectations, attr)
        if isinstance(cls, type) and issubclass(cls, base) and cls is not base:
            snake = getattr(cls, "expectation_type", None)
            if not isinstance(snake, str) or not snake:
                snake = re.sub(r"(?<!^)(?=[A-Z])", "_", attr).lower()
            out[snake] = cls
    return out


def known_expectations() -> list[str]:
    """Sorted names a circuit may use."""
    return sorted(_registry())


def _where(target: str, exp: Expectation) -> str:
    return f"{target}" + (f" (line {exp.line})" if exp.line else "")


def expectation_class(exp: Expectation, target: str) -> type:
    """The GE class for ``exp.name``: CamelCase of the name, else GE's own snake_case name
    (``expect_column_kl_divergence_...`` is ``ExpectColumnKLDivergence...``)."""
    gx = gx_module()
    cls = getattr(gx.expectations, _camel(exp.name), None)
    registry = _registry()
    if not (isinstance(cls, type) and cls in registry.values()):
        cls = registry.get(exp.name)
    if cls is None:
        close = difflib.get_close_matches(exp.name, list(registry), n=3, cutoff=0.75)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownExpectationError(
            f"{_where(target, exp)}: unknown expectation {exp.name!r}{hint} Expectations are "
            f"Great Expectations' own, in snake_case (GE {gx.__version__} has {len(registry)}; "
            "e.g. expect_column_values_to_not_be_null, expect_column_values_to_be_between).")
    return cls


def build_expectation(exp: Expectation, target: str, index: int) -> Any:
    """One GE expectation object, tagged with its index; bad arguments are reported by name."""
    cls = expectation_class(exp, target)
    kwargs = dict(exp.kwargs)
    meta = dict(kwargs.pop("meta", None) or {})
    meta[INDEX_KEY] = index
    try:
        return cls(**kwargs, meta=meta)
    except Exception as exc:  # pydantic's ValidationError, and TypeError for odd values
        problems = str(exc).strip().splitlines()
        text = "; ".join(p.strip() for p in problems[1:7]) or str(exc)
        raise ExpectationConfigError(
            f"{_where(target, exp)}: {exp.name} does not accept {jsonable(exp.kwargs)!r}: {text}"
        ) from exc


def check_declarations(target: str, expectations: Sequence[Expectation]) -> None:
    """Raise ``ExpectationConfigError`` for the first expectation GE cannot build (no Spark)."""
    for i, exp in enumerate(expectations):
        build_expectation(exp, target, i)


def judges_rows(exp: Expectation, target: str) -> bool:
    """True for expectations about row values (column map, pair map, multicolumn map, column
    aggregate): on zero rows they hold trivially. Table-level ones (row count, columns) do not."""
    from great_expectations.expectations.expectation import (
        ColumnAggregateExpectation,
        ColumnMapExpectation,
        ColumnPairMapExpectation,
        MulticolumnMapExpectation,
    )

    row_kinds = (ColumnMapExpectation, ColumnPairMapExpectation, MulticolumnMapExpectation,
                 ColumnAggregateExpectation)
    return issubclass(expectation_class(exp, target), row_kinds)


# ---- suites and runs --------------------------------------------------------------------------

def _fingerprint(expectations: Sequence[Expectation]) -> str:
    text = json.dumps([[e.name, jsonable(e.kwargs)] for e in expectations], sort_keys=True)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _validation_definition(target: str, expectations: Sequence[Expectation], flavour: str) -> Any:
    """The cached validation definition for this target, exact list of expectations and GE
    flavour ("spark" or "pandas")."""
    rt = _runtime()
    key = (flavour, target, _fingerprint(expectations))
    with rt.lock:
        found = rt.validations.get(key)
        if found is not None:
            return found
        built = [build_expectation(e, target, i) for i, e in enumerate(expectations)]
        gx = gx_module()
        batch_definition = rt.batch_definitions.get((flavour, target))
        if batch_definition is None:
            asset = rt.source(flavour).add_dataframe_asset(name=target)
            batch_definition = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)
            rt.batch_definitions[(flavour, target)] = batch_definition
        name = f"{flavour}:{target}#{key[2]}"
        suite = rt.context.suites.add(gx.ExpectationSuite(name=name))
        for expectation in built:
            suite.add_expectation(expectation)
        definition = rt.context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch_definition, suite=suite))
        rt.validations[key] = definition
        return definition


def _exception_message(info: Any) -> str | None:
    """GE's exception_info is flat ({raised_exception, exception_message}) or keyed by metric."""
    if not isinstance(info, dict):
        return None
    if "raised_exception" in info or "exception_message" in info:
        if info.get("raised_exception") or info.get("exception_message"):
            return str(info.get("exception_message") or "raised an exception")
        return None
    messages = [m for m in (_exception_message(v) for v in info.values()) if m]
    return "; ".join(dict.fromkeys(messages)) or None


def validate(df: "DataFrame", target: str, expectations: Sequence[Expectation]) -> list[CheckResult]:
    """Run ``expectations`` on ``df`` with GE; one CheckResult per expectation, in order.

    ``df`` is read several times by GE (one Spark job per metric bundle, 4-7 for a couple of
    expectations), so it is cached for the run unless it already is.
    """
    if not expectations:
        return []
    same = [_identity(e) for e in expectations]
    if len(set(same)) < len(same):  # GE keeps one of equal declarations and drops the others' results
        firsts = list(dict.fromkeys(same))
        got = dict(zip(firsts, validate(df, target, [expectations[same.index(k)] for k in firsts])))
        return [CheckResult(e.name, target, e.policy, got[k].success, {**got[k].details, "line": e.line})
                for k, e in zip(same, expectations)]
    pandas = _is_pandas(df)
    definition = _validation_definition(target, expectations, "pandas" if pandas else "spark")
    cache = not pandas and not is_cached(df)
    batch = df.persist() if cache else df
    try:
        outcome = definition.run(batch_parameters={"dataframe": batch}, result_format=RESULT_FORMAT)
    finally:
        if cache:
            batch.unpersist()
    _quiet_ge_logs()  # modules GE imports lazily during the first run
    by_index: dict[int, Any] = {}
    for res in outcome.results:
        meta = res.expectation_config.meta or {}
        by_index[int(meta[INDEX_KEY])] = res
    results: list[CheckResult] = []
    for i, exp in enumerate(expectations):
        res = by_index.get(i)
        details: dict[str, Any] = {"kwargs": jsonable(exp.kwargs), "line": exp.line}
        if res is None:  # GE dropped it: treat as an error, never as a pass
            details["exception"] = "Great Expectations returned no result for this expectation"
            results.append(CheckResult(exp.name, target, exp.policy, False, details))
            continue
        details.update(jsonable(dict(res.result or {})))
        error = _exception_message(res.exception_info)
        if error:
            details["exception"] = error
        results.append(CheckResult(exp.name, target, exp.policy, bool(res.success), details))
    return results


def _identity(e: Expectation) -> str:
    """What GE tells equal declarations apart by: the expectation and its arguments."""
    return json.dumps([e.name, jsonable(e.kwargs)], sort_keys=True, default=str)


def _is_pandas(df: Any) -> bool:
    return type(df).__module__.startswith("pandas")


# Expectations whose result on a pandas frame is the result on Spark (the flavour GE runs a step's
# checks in): null checks, set membership, uniqueness, lengths, counts and the table's columns,
# and numeric ranges on numeric columns. Types are Spark's names and regexes Java's: those, and
# any row_condition (a Spark SQL condition), always run on Spark.
PANDAS_SAFE = frozenset({
    "expect_column_values_to_not_be_null", "expect_column_values_to_be_null",
    "expect_column_values_to_be_in_set", "expect_column_values_to_not_be_in_set",
    "expect_column_values_to_be_unique", "expect_compound_columns_to_be_unique",
    "expect_column_value_lengths_to_be_between", "expect_column_value_lengths_to_equal",
    "expect_table_row_count_to_be_between", "expect_table_row_count_to_equal",
    "expect_column_to_exist", "expect_table_columns_to_match_ordered_list",
    "expect_table_columns_to_match_set", "expect_table_column_count_to_equal",
    "expect_column_values_to_be_between", "expect_column_min_to_be_between",
    "expect_column_max_to_be_between", "expect_column_sum_to_be_between", "expect_column_mean_to_be_between",
})
_NUMERIC_ONLY = frozenset({"expect_column_values_to_be_between", "expect_column_min_to_be_between",
                           "expect_column_max_to_be_between", "expect_column_sum_to_be_between",
                           "expect_column_mean_to_be_between"})


def pandas_equivalent(expectations: Sequence[Expectation], numeric: set[str], strings: set[str]) -> bool:
    """Do these expectations mean the same on a pandas frame as on Spark? (``numeric``: the
    frame's numeric columns; ``strings``: its string columns, where lengths mean the same)"""
    for e in expectations:
        kwargs = e.kwargs or {}
        if e.name not in PANDAS_SAFE or "row_condition" in kwargs or "condition_parser" in kwargs:
            return False
        if e.name in _NUMERIC_ONLY and kwargs.get("column") not in numeric:
            return False
        if "value_lengths" in e.name and kwargs.get("column") not in strings:
            return False
    return True


def trivially_passed(target: str, exp: Expectation, note: str) -> CheckResult:
    """The result of a row expectation on zero inserted rows."""
    details = {"kwargs": jsonable(exp.kwargs), "line": exp.line, "element_count": 0, "note": note}
    return CheckResult(exp.name, target, exp.policy, True, details)
