"""Typed objects for a circuit as a user writes it in YAML.

These are plain data: the loader (``loader.py``) fills them from ``yaml.safe_load`` output and
the validator (``validate.py``) checks them. Every object keeps the line of the YAML it came from,
because every error we report must name the file, the node and the line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .time import EventTime, WindowSpec, WithinSpec

WEIGHT = "_weight"  # reserved column: the Z-set multiplicity of a row
INTERNAL_PREFIX = "__"  # the engine's own working columns (__rows, __lw, __prev, ...) start with it


def reserved_column_problem(name: str) -> str | None:
    """Why a user's column may not have this name (None if it may): the weight column, or a name
    of the engine's internal columns, which a step would silently confuse with it."""
    if name == WEIGHT:
        return f"column name '{WEIGHT}' is reserved for the Z-set weight: choose another name"
    if name.startswith(INTERNAL_PREFIX):
        return (f"column name '{name}' starts with '{INTERNAL_PREFIX}', which is reserved for the engine's "
                f"internal columns: choose another name")
    return None

# The ops a user may write in `nodes.<name>.op` are registered by their modules (``spec/ops/``,
# ``node_ops.op_names()``), each with its YAML form.

SOURCE_KINDS = ("changes", "snapshots", "cdc", "append_only", "delta", "postgres")
TABLE_KINDS = ("postgres",)  # sources that name a database table and a connection, not a path
SOURCE_FORMATS = ("parquet", "csv", "json", "jsonl")  # jsonl: another name for json (JSON lines)
# What a change of a `cdc` input does to its key (the values of its operation column map to these)
CDC_OPERATIONS = ("insert", "update", "delete", "upsert")
DEFAULT_CDC_OPS = {"c": "insert", "r": "upsert", "u": "update", "d": "delete"}  # Debezium's op codes
UNKNOWN_KEY_POLICIES = ("refuse", "ignore", "count")
AGGREGATE_FUNCS = ("count", "sum", "avg", "min", "max")
POLICIES = ("fail", "warn")
# `orchestration.tasks`: how a DAG run is cut into Airflow tasks (see spark_jobs/orchestration).
ORCHESTRATION_TASKS = ("per_step", "per_stage")
DEFAULT_ORCHESTRATION_TASKS = "per_step"  # chosen by measurement: bench/results/airflow.md
ON_INPUTS = "on_inputs"  # `schedule: on_inputs` = a run whenever files land in any input folder


@dataclass(frozen=True)
class Column:
    """One declared input column: a Spark SQL type name and whether nulls are allowed."""

    name: str
    type: str  # Spark SQL type string as written: long, int, double, string, boolean, date, timestamp, decimal(10,2), ...
    nullable: bool = True
    line: int = 0


@dataclass(frozen=True)
class CdcOptions:
    """How a `cdc` source's rows say what happened to their key (fields of `source`).

    Rows carry the key, an operation and the new values; the old row is looked up by key in
    the input's integral, so ``before`` is optional (it only supplies the key of a delete
    whose new values are absent). ``after``/``before`` name JSON objects holding the values
    (a Debezium envelope); without ``after`` the values are top-level columns.
    """

    op: str = "op"  # column holding the operation code (not a column of the relation)
    ops: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CDC_OPS))  # code -> operation
    sequence: str | None = None  # orders the changes to one key within a batch
    unknown_key: str = "refuse"  # update/delete of a key the input does not hold: refuse | ignore | count
    after: str | None = None  # object with the new values (envelope); None: top-level columns
    before: str | None = None  # object with the old values (optional; gives a delete its key)


@dataclass(frozen=True)
class Source:
    """Where the changes of an input come from (`inputs.<name>.source`)."""

    kind: str  # "changes" | "snapshots" | "cdc" | "append_only" | "delta" (a Delta table's versions)
    path: str  # relative to the data root (or absolute / a URI); delta: the table's folder
    format: str = "parquet"  # "parquet" | "csv" | "json"/"jsonl" (JSON lines)
    options: dict[str, Any] = field(default_factory=dict)  # extra Spark reader options (e.g. csv header)
    line: int = 0
    cdc: CdcOptions | None = None  # kind cdc only
    table: str = ""  # kind postgres: schema.name of the source table
    connection: str = ""  # kind postgres: the connection's name (spark_jobs/connections.py)
    slot: str = ""  # kind postgres: the replication slot (and publication) name; default dbsp_<circuit>_<input>

    @property
    def reader_format(self) -> str:
        """The reader that serves ``format`` (jsonl is read as json)."""
        return "json" if self.format == "jsonl" else self.format


@dataclass(frozen=True)
class Expectation:
    """A Great Expectations check in GE's own name and arguments, plus our policy."""

    name: str  # e.g. expect_column_values_to_not_be_null
    kwargs: dict[str, Any]  # GE arguments, `policy` removed
    policy: str = "fail"  # "fail" | "warn"
    line: int = 0


@dataclass(frozen=True)
class InputSpec:
    name: str
    columns: tuple[Column, ...]
    source: Source | None
    expectations: tuple[Expectation, ...] = ()
    line: int = 0
    key: tuple[str, ...] = ()  # primary key (a `cdc` input's changes find their old row by it)
    time: EventTime | None = None  # `time: {column, lateness}`: event time and watermark

    @property
    def column_names(self) -> tuple[str, ...]:
        """The relation's columns (a `cdc` input's operation column is not one of them)."""
        return tuple(c.name for c in self.columns)

    @property
    def kind(self) -> str:
        return self.source.kind if self.source is not None else ""

    @property
    def not_null(self) -> tuple[str, ...]:
        """Columns whose values may not be null: the declared non-nullable ones and the event-time
        column (a row without a time cannot be judged late or placed in a window). Both readers
        (Spark and in-process Arrow) refuse a file with a null in one of them."""
        cols = [c.name for c in self.columns if not c.nullable]
        if self.time is not None and self.time.column not in cols:
            cols.append(self.time.column)
        return tuple(cols)

    def null_reason(self, column: str) -> str:
        """Why ``column`` may not be null, for the refusal of a file that has a null in it."""
        if self.time is not None and column == self.time.column:
            declared = next((c for c in self.columns if c.name == column), None)
            if declared is None or declared.nullable:
                return "is the event-time column (time.column) and may not be null"
        return "is declared not nullable"


@dataclass(frozen=True)
class AggregateSpec:
    """One output column of an `aggregate` node, parsed from e.g. "sum(amount)" or "count(distinct x)"."""

    name: str  # output column
    func: str  # count | sum | avg | min | max
    arg: str | None  # Spark SQL expression, None for count(*)
    distinct: bool = False  # count(distinct x) (only count supports it)
    text: str = ""  # as written, for messages


@dataclass(frozen=True)
class NodeSpec:
    """One query node (`nodes.<name>`). Fields not used by an op stay at their defaults.

    - select/map: `input`, `columns` (output name -> Spark SQL expression; a list of names is
      shorthand for name -> name)
    - filter: `input`, `where`
    - union / union_all: `inputs` (two or more; `left`/`right` also accepted and put here)
    - difference / intersect / product: `left`, `right`
    - join / antijoin: `left`, `right`, and `on` or `left_on` + `right_on`
    - distinct / delay / integrate / differentiate: `input`
    - aggregate: `input`, `group_by` (may be empty), `aggregates`, optionally `window` (time
      windows: the output starts with ``window_start``, ``window_end``)
    - join: optionally `within` (an interval join: keys optional) or `stream` ("left"/"right":
      that side is a stream, joined once on arrival with the other side's integral)
    - an op with fields of its own keeps them in ``extra`` (its module in ``spec/ops/`` says
      which: a topk's are ``extra["topk"]``)
    - sql: `query` (one Spark SQL query); ``sql`` holds it parsed (``spec.sql.ParsedQuery``) and
      ``tables`` the inputs/nodes its FROM clauses read (their circuit spelling)
    - recursive: `body` (a nested mapping of nodes), kept raw for the recursion layer in
      ``extra["body"]`` and parsed into ``body``; `outputs` (body node names; the node's value
      is its first output). Body nodes may read outer inputs/nodes, each other (cycles are the
      recursion) and the recursive node itself.
    - iterate: `init` (kept as ``input``), `body` and `outputs` as a recursive node's; body
      nodes read the previous iteration by the iterate node's name.

    ``field_lines`` maps a field (``"where"``, ``"on"``, ``"on.1"``, ``"columns.amt"``,
    ``"aggregates.revenue"``) to its line, so a problem can point at the field, not the node;
    ``"query.3"`` is the YAML line of the third line of a query (when the YAML style keeps lines).
    """

    name: str
    op: str
    line: int = 0
    input: str | None = None
    inputs: tuple[str, ...] = ()
    left: str | None = None
    right: str | None = None
    on: tuple[str, ...] = ()
    left_on: tuple[str, ...] = ()
    right_on: tuple[str, ...] = ()
    where: str | None = None
    columns: tuple[tuple[str, str], ...] = ()  # (output name, expression)
    group_by: tuple[str, ...] = ()
    aggregates: tuple[AggregateSpec, ...] = ()
    window: WindowSpec | None = None  # aggregate: per time window
    within: WithinSpec | None = None  # join: interval join
    stream: str | None = None  # join: "left" | "right", the side that is a stream of events
    extra: dict[str, Any] = field(default_factory=dict)  # op-specific fields not modelled above
    body: dict[str, "NodeSpec"] = field(default_factory=dict)  # recursive: nested nodes, file order
    outputs: tuple[str, ...] = ()  # recursive: body nodes it exposes (first = the node's value)
    query: str | None = None  # sql: the query as written
    tables: tuple[str, ...] = ()  # sql: the inputs and nodes the query reads
    sql: Any = field(default=None, compare=False, repr=False)  # sql: the parsed query
    field_lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def references(self) -> tuple[str, ...]:
        """Names of the inputs/nodes this node reads, in order."""
        refs: list[str] = []
        if self.input:
            refs.append(self.input)
        refs.extend(self.inputs)
        if self.left:
            refs.append(self.left)
        if self.right:
            refs.append(self.right)
        refs.extend(self.tables)
        return tuple(refs)

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Names from the enclosing scope this node reads: ``references``, or for a recursive
        node the names its body reads that are neither body nodes nor the node itself."""
        if not self.body:
            return self.references
        inner = set(self.body) | {self.name}
        deps = (d for n in self.body.values() for d in n.dependencies if d not in inner)
        init = (self.input,) if self.input else ()  # an iterate node's ``init``
        return tuple(dict.fromkeys((*init, *deps)))

    def line_of(self, key: str) -> int:
        """Line of a field (see ``field_lines``), falling back to the field's parent, then the node."""
        while key:
            if key in self.field_lines:
                return self.field_lines[key]
            key = key.rpartition(".")[0]
        return self.line


@dataclass(frozen=True)
class PublishSpec:
    """Where a view's published table goes (`outputs.<view>.publish`)."""

    enabled: bool = True
    path: str | None = None  # relative to the profile's views root; None: <circuit>/<view>
    line: int = 0


@dataclass(frozen=True)
class SinkSpec:
    """Where a view's changes are also written (`outputs.<view>.sink`): a PostgreSQL table."""

    kind: str  # "postgres"
    table: str  # schema.name
    connection: str  # a connection's name (DBSP_CONN_<NAME> or an Airflow connection id)
    line: int = 0


@dataclass(frozen=True)
class OutputSpec:
    name: str  # a node or input name
    expectations: tuple[Expectation, ...] = ()
    line: int = 0
    feed: bool = False  # also write each timestep's change as a change file under feeds/ (chaining)
    key: tuple[str, ...] = ()  # the view's key: its published table is maintained by MERGE on it
    publish: PublishSpec = field(default_factory=PublishSpec)
    sink: SinkSpec | None = None  # also written to a database table after each commit


@dataclass(frozen=True)
class Orchestration:
    """The optional ``orchestration:`` block: how the circuit's DAG runs a timestep."""

    tasks: str = DEFAULT_ORCHESTRATION_TASKS  # "per_step" | "per_stage"
    commit_empty: bool = False  # commit a timestep when no input has new files (else: skipped)
    line: int = 0


@dataclass(frozen=True)
class CircuitSpec:
    name: str
    path: str  # file it was loaded from ("<string>" when loaded from text)
    inputs: dict[str, InputSpec]
    nodes: dict[str, NodeSpec]  # in file order
    outputs: dict[str, OutputSpec]
    schedule: str | None = None  # cron string or preset; None = no time-based runs
    description: str = ""
    text: str = ""  # the YAML as written (for fingerprints and DAG docs)
    settings: dict[str, Any] = field(default_factory=dict)  # optional `settings:` block (e.g. max_iterations)
    # Airflow assets that start a run: input names of this circuit (files landing in their
    # folder) or ``<circuit>.<view>`` (another circuit's view, updated by its commit)
    schedule_assets: tuple[str, ...] = ()
    orchestration: Orchestration = field(default_factory=Orchestration)


def dependency_order(nodes: dict[str, NodeSpec]) -> list[str]:
    """Node names with every node after the nodes it reads (file order where free).

    Edges that close a cycle are ignored, so this never fails; validation reports cycles.
    """
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the DFS stack, 2 = done

    def visit(name: str) -> None:
        state[name] = 1
        for dep in nodes[name].dependencies:
            if dep in nodes and dep not in state:
                visit(dep)
        state[name] = 2
        order.append(name)

    for name in nodes:
        if name not in state:
            visit(name)
    return order
