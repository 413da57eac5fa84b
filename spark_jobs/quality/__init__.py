"""Layer 4, data quality: the gate every timestep passes before its commit.

What is checked, per timestep ``t``:

- **Declared expectations** (``outputs.<view>.expectations`` and ``inputs.<input>.expectations``
  in the circuit YAML) are Great Expectations' own expectations, by GE's name and arguments.
  They are evaluated on the rows the step *inserts*: the rows of the view's delta (or of the
  input's change) with ``_weight > 0``, without the weight column, each row once whatever its
  weight. Deleted rows are not checked, and neither is the rest of the view. Aggregate
  expectations (``expect_column_mean_to_be_between``, ...) therefore describe the inserted rows,
  not the whole view.
- **No inserted rows** (a step that only deletes, or does not change a view or input): every
  expectation about row values (column values, column pairs, multicolumn, column aggregates)
  holds trivially and GE is not called for it; table-level expectations (row count, column set,
  column exists) are still run by GE on the empty frame, so ``expect_table_row_count_to_be_between:
  {min_value: 1}`` does fail a step whose delta inserts nothing. A view or input the runner
  passes no delta for at all had no change: all its expectations hold trivially. (GE 1.24 alone would pass column-value
  expectations on an empty frame but fail column aggregates such as mean/max/sum, whose observed
  value is null; hence the rule.)
- **Built-in checks** on every view delta, always, policy ``fail``:
  ``dbsp_delta_is_consolidated`` (one row per tuple, nulls equal, no zero weight),
  ``dbsp_view_weights_positive`` (after the delta, no tuple of the view has a negative weight),
  and for set-valued views ``dbsp_view_is_set`` (after the delta, every present tuple has
  weight 1). They read the delta and look up only its tuples in the previous view.
- **Policy**: a ``fail`` check that does not hold stops the commit (``enforce`` raises
  ``QualityGateFailed``; the state stays at ``t-1``); a ``warn`` check is reported in the
  summary and the report files, and the step commits.
- **Configuration errors** (an unknown expectation name, arguments GE rejects) raise
  ``ExpectationConfigError`` naming the target, the expectation and its line, before any data
  is read.

Expectations run on Spark, so GE's Spark flavour applies: ``expect_column_values_to_be_of_type``
takes Spark type names (``type_: LongType``), regexes are Java regexes.

Cost per timestep: GE's import and context (seconds) once per process (``warm_up`` can start it
early), skipped when every expectation of the step is one ``native`` computes on a pandas frame
(``expect_column_values_to_not_be_null``/``_to_be_between`` on plain columns, GE's own result); then one Spark action per view for the built-ins, plus one GE validation (a handful of
Spark jobs) per view or input that has expectations and inserted rows. A delta that is cached but
not yet computed is computed by the gate's first action, so the gate's time then includes it.

Reports: ``write_report`` stores ``t<timestep:012d>.json`` per timestep and an ``index.html``
table of all of them in the report directory. A report is written before the commit with
``"committed": false``; ``mark_committed`` flips it once the manifest is published, so the
report of an attempt that never committed (a failed gate, a full disk, a crash) says so.
"""
from spark_jobs.quality.expectations import (
    ExpectationConfigError,
    UnknownExpectationError,
    check_declarations,
    known_expectations,
    warm_up,
)
from spark_jobs.quality.gate import enforce, inserted_rows, run_gate
from spark_jobs.quality.report import (
    CheckResult,
    GateReport,
    QualityGateFailed,
    list_reports,
    load_report,
    mark_committed,
    write_report,
)

__all__ = [
    "CheckResult", "GateReport", "QualityGateFailed", "ExpectationConfigError",
    "UnknownExpectationError", "run_gate", "enforce", "write_report", "load_report",
    "list_reports", "mark_committed", "check_declarations", "known_expectations", "warm_up", "inserted_rows",
]
