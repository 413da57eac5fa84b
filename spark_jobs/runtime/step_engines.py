"""The two engines a timestep's phases 1-5 run on (``recipe.StepEngine``).

- ``SparkSteps``: values are Spark DataFrames (a local session, a cluster's driver, or a Spark
  Connect client). Small changes are brought to the driver once (``count``) so that lookups need
  no broadcast job, and the session runs with the small-change settings (no AQE, few shuffle
  partitions) from the evaluation to the writes. With ``arrow_reads`` (a small change this
  process can read itself) the changes are read, counted and bag-checked in-process, as
  ``ArrowSteps`` does, and handed to Spark as local relations: no Spark job before the one that
  brings the step's results back. What the in-process readers cannot read, or refuse, is read
  by Spark as before (so a refusal names the files in the Spark path's words).
- ``ArrowSteps``: values are pyarrow tables in this process; no Spark job, no JVM. Whatever it
  cannot do (an operator without an Arrow kernel, a late row under ``on_late: refuse``, a bag
  check that fails) raises ``NotLocal`` before anything is written, and the caller runs the step
  (or the stage) on Spark, which refuses naming the files or quarantines.

Everything else of a timestep, in particular all of its commit, is the recipe's (``recipe.py``).
"""
from __future__ import annotations

import logging
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.sources import InputFile
from spark_jobs.runtime.bag import Quarantined
from spark_jobs.runtime.event_time import StepClock
from spark_jobs.runtime.inputs import InputChange
from spark_jobs.runtime.reach import driver_reach

if TYPE_CHECKING:
    from spark_jobs.quality import GateReport
    from spark_jobs.runtime.circuit import CircuitRuntime

log = logging.getLogger(__name__)


class SparkSteps:
    """Phases 1-5 on Spark DataFrames (see the module docstring)."""

    name = "spark"

    def __init__(self, rt: "CircuitRuntime", *, full: bool = False, small: bool | None = None,
                 persist: bool = True, driver_writes: bool = False, arrow_reads: bool = False,
                 driver_views: bool = False) -> None:
        self.rt = rt
        self.full = full
        self.small = bool(small) if small is not None else False  # set by ``count`` unless given
        self._small_given = small is not None
        self.persist = persist
        self.cached: list[Any] = []
        self.results: list[Any] = []
        self.local = False  # the changes were brought to the driver (``count``)
        self.settled_arrow = False  # the step's values came to this process as Arrow (``settle``)
        self.views_arrow = False  # its view deltas and checked changes did (``_views_to_driver``)
        self.unchanged = False  # no input changed (``count``): the values may be known empty without a job
        # this process reads and writes the state itself (``step.driver_reach``): a small step's
        # values are written by pyarrow, not by a Spark job
        self.driver_writes = driver_writes
        # read, count and bag-check the changes in this process (pyarrow), then hand them to Spark
        # as local relations: set for a small change this process reaches (``step.commit_path``)
        self.arrow_reads = arrow_reads
        # a step whose state updates Spark writes brings its view deltas here for the in-process
        # gate (``_views_to_driver``): set for an incremental or recomputed step of ``dbsp step``
        self.driver_views = driver_views and driver_writes and not full
        self.tables: dict[str, Any] = {}  # the changes as read in-process, after the late rows
        self._handed: dict[int, tuple[Any, Any]] = {}  # id(DataFrame) -> (DataFrame, its Arrow table)
        self._stack = ExitStack()
        self._conf_set = False
        self._states: list[Any] = []  # the state readers this step's values were built over (``_all_local``)

    @property
    def spark(self):
        return self.rt.spark

    def read_input(self, name: str, files: Sequence[InputFile], state: Any) -> InputChange:
        from spark_jobs.runtime.inputs import read_input

        if self.arrow_reads:
            local = self._read_in_process(name, files, state)
            if local is not None:  # a pyarrow table (or None): ``count`` hands it to Spark
                return local
        change = read_input(self.spark, self.rt.compiled.spec.inputs[name], list(files), state,
                            self.rt.config.policy)
        if change.delta is not None and change.trace is not None:  # also appended to the input's own trace
            change.delta = change.delta.cache()
            self.cached.append(change.delta)
        return change

    def _read_in_process(self, name: str, files: Sequence[InputFile], state: Any) -> InputChange | None:
        """Input ``name``'s change read by the in-process readers (``ArrowSteps.read_input``);
        None where they cannot serve or refuse a file: Spark reads it (and names the refusal)."""
        import pyarrow as pa

        from spark_jobs.executor.arrow import inputs as arrow_inputs
        from spark_jobs.executor.sources import InputRefused

        spec = self.rt.compiled.spec.inputs[name]
        if arrow_inputs.unsupported(spec, self.rt.config.session_timezone):
            return None
        try:
            change = arrow_inputs.read_input(spec, files, state, self.rt.config.policy)
        except (NotLocal, InputRefused, pa.ArrowException, OSError) as why:
            log.info("input %s read by Spark: %s", name, why)
            return None
        return InputChange(change.table, change.trace, change.unknown_keys, change.bytes_read)

    def _hand_over(self, name: str, table: Any) -> Any:
        """``table`` (input ``name``'s change) as a Spark local relation (no job), remembered so
        that ``settle`` takes the table itself instead of collecting it back."""
        from spark_jobs.executor.sources import spark_schema
        from spark_jobs.executor.spark.local_relations import from_arrow

        df = from_arrow(self.spark, table, spark_schema(self.rt.compiled.spec.inputs[name]))
        self._handed[id(df)] = (df, table)
        return df

    def _count_tables(self, clock: StepClock, deltas: dict[str, Any]) -> dict[str, tuple[int, int]] | None:
        """``ArrowSteps.count`` on changes read in-process; None when a late row refuses the step
        (Spark counts again and names the files)."""
        from spark_jobs.executor.arrow import lateness as arrow_late
        from spark_jobs.state.arrow_trace import weight_totals

        kept, counts = {}, {}
        for name, table in deltas.items():
            if clock.timed(name):
                column, mark = clock.column(name), clock.watermark(name)
                clock.record(name, arrow_late.change_totals(table, column, mark))
                table = arrow_late.on_time(table, column, mark)
            kept[name] = table
            counts[name] = weight_totals(table)
        if clock.refused():
            return None
        self.tables = kept
        for name, table in kept.items():
            deltas[name] = self._hand_over(name, table)
        return counts

    def count(self, clock: StepClock, deltas: dict[str, Any], files: Mapping[str, Sequence[InputFile]]
              ) -> dict[str, tuple[int, int]]:
        import pyarrow as pa

        from spark_jobs.runtime.step import count_inputs, ins_del

        policy = self.rt.config.policy
        if deltas and all(isinstance(d, pa.Table) for d in deltas.values()):
            counted = self._count_tables(clock, deltas)
            if counted is not None:
                self.local = True
                if not self._small_given:
                    self.small = not self.full and policy.small_change(sum(sum(c) for c in counted.values()))
                return counted
        for name, d in list(deltas.items()):  # Spark counts (and refuses late rows naming the files)
            if isinstance(d, pa.Table):
                deltas[name] = self._hand_over(name, d)
        if not deltas:  # no input changed: the smallest change there is (its results come back as Arrow)
            self.unchanged = True
            if not self._small_given:
                self.small = not self.full
            return {}
        counts, local = count_inputs(self.spark, clock, deltas, files, policy)  # late rows counted, then left out
        if local is not None:
            deltas.update(local)
            self.local = True
        out = {name: ins_del(row) for name, row in counts.items()}
        if not self._small_given:
            self.small = not self.full and policy.small_change(sum(sum(c) for c in out.values()))
        return out

    def check_bags(self, timestep: int, deltas: dict[str, Any], deleted: Mapping[str, int],
                   files: Mapping[str, Sequence[InputFile]], state: Any) -> list[Quarantined]:
        from spark_jobs.runtime.bag import check_deltas, check_tables

        tables = {n: self.tables[n] for n in deltas if n in self.tables and self._table_of(deltas[n]) is not None}
        if tables and len(tables) == len(deltas):  # in-process, as ArrowSteps; a failing check: Spark's
            try:
                check_tables(self.rt, tables, deleted, state)
                return []
            except NotLocal as why:
                log.info("bag check on Spark: %s", why)
        return check_deltas(self.rt, timestep, deltas, deleted, files, state)

    def held(self, df: Any) -> Any:
        """``df`` as an Arrow table (the store's types) without a Spark job: a change read
        in-process and handed over, or a projection of the local changes (``held_table``); None
        otherwise."""
        from spark_jobs.executor.spark.local_relations import held_table

        table = self._table_of(df)
        if table is None and self.local:
            table = held_table(df, self.rt.config.policy.local_change_rows)
        return None if table is None else _typed(table, df)

    def _table_of(self, df: Any) -> Any:
        """The Arrow table a DataFrame was made from by ``_hand_over`` (None: not one of those)."""
        handed = self._handed.get(id(df))
        return handed[1] if handed is not None and handed[0] is df else None

    def _conf(self) -> None:
        if not self._conf_set:
            from spark_jobs.executor.spark.session import step_conf

            self._stack.enter_context(step_conf(self.spark, self.small, local=self.local))
            self._conf_set = True

    def evaluate(self, deltas: Mapping[str, Any], state: Any, *, first_step: bool, full: bool,
                 only: Any = None, external: Any = None) -> Any:
        from spark_jobs.executor.evaluate import evaluate_step
        from spark_jobs.executor.sources import spark_schema

        self._conf()
        self._states.append(state if only is None and external is None else None)
        deltas = dict(deltas)
        if not self.local and only is None:  # too large for the driver: each change computed once
            for name, df in deltas.items():
                if not any(df is c for c in self.cached):
                    deltas[name] = df.cache()
                    self.cached.append(deltas[name])
        schemas = {name: spark_schema(inp) for name, inp in self.rt.compiled.spec.inputs.items()}
        # a step whose results all come back in one job (``settle``) plans them as one union, in
        # which Spark reuses a shared shuffle: caching a reused value would plan it twice more
        # (persist, then unpersist) for rows it computes once anyway
        one_job = self.local and self.small and not self.full and self.driver_writes
        result = evaluate_step(self.rt.compiled.incremental, deltas, state, first_step=first_step,
                               input_schemas=schemas, broadcast_deltas=self.small if only is None else True,
                               persist=self.persist and only is None and not one_job, policy=self.rt.config.policy,
                               spark=self.spark, only=only, external=external,
                               held=self.local and self.small)
        self.results.append(result)
        return result

    def view_delta(self, view: str, new: Any) -> Any:
        from spark_jobs.runtime import refresh

        return refresh.view_delta(self.rt.store, view, new)

    def integrate(self, name: str, trace: str, change: Any, state: Any) -> Any:
        """Input ``name``'s integral after this step: its committed trace plus ``change`` (a recompute)."""
        from spark_jobs.executor.sources import spark_schema
        from spark_jobs.executor.spark import zset

        fields = spark_schema(self.rt.compiled.spec.inputs[name]).fields
        parts = [zset.conformed(df, fields) for df in (state.read(trace), change) if df is not None]
        if not parts:
            return self.spark.createDataFrame([], spark_schema(self.rt.compiled.spec.inputs[name]))
        value = _spark_settled(parts[0], parts[1] if len(parts) > 1 else None).cache()
        self.cached.append(value)
        return value

    def integral(self, trace: str, change: Any, state: Any) -> Any:
        """A kept node's value after this step: its committed integral plus ``change`` (``change.py``)."""
        from spark_jobs.executor.spark import zset

        old = state.read(trace)
        total = change if old is None else zset.plus(old.select(*change.columns), change)
        value = zset.consolidate(total).cache()
        self.cached.append(value)
        return value

    def settle(self, outputs: dict[str, Any], writes: list[Any], checked: dict[str, Any]
               ) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
        """A small step's view deltas, state updates and checked input changes come to this
        process as Arrow tables in ONE job (``collect_arrow``): the gate then runs on them and
        pyarrow writes them, so the step's Spark jobs are that one and the input count's. Where
        this process cannot write the state itself, or the values are more rows than
        ``execution.collect_rows``, Spark writes the state updates, and the view deltas are
        computed once (to this process for the in-process gate, ``_views_to_driver``; to the
        driver's JVM; or cached)."""
        from spark_jobs.executor.spark.local_relations import collect_arrow, collect_local, held_table, known_empty

        policy = self.rt.config.policy
        if self.small and not self.full and self.driver_writes:
            frames = {f"output/{v}": df for v, df in outputs.items()}
            frames.update({f"write/{i}": w.value for i, w in enumerate(writes)})
            frames.update({f"input/{n}": df for n, df in checked.items()})
            # changes read in-process come back as the tables they were made from: no collect
            held = {key: t for key, df in frames.items() if (t := self._table_of(df)) is not None}
            if self.unchanged and all(known_empty(df) for df in frames.values()):  # nothing to collect
                tables = {key: _typed(None, df) for key, df in frames.items()}
            else:
                rest = {key: df for key, df in frames.items() if key not in held}
                if self.local:  # projections of the local changes: their rows are on the driver, no job
                    for key in list(rest):
                        table = held_table(rest[key], policy.local_change_rows)
                        if table is not None:
                            held[key] = table
                            del rest[key]
                limit = max(policy.local_change_rows, policy.collect_rows)
                tables = collect_arrow(self.spark, rest, limit, gather=self._all_local())[0] if rest else {}
                if tables is not None:
                    tables.update(held)
            if tables is not None:
                typed = {key: _typed(tables[key], frames[key]) for key in frames}
                self.settled_arrow = True
                for i, w in enumerate(writes):
                    w.value = typed[f"write/{i}"]
                return ({v: typed[f"output/{v}"] for v in outputs}, writes,
                        {n: typed[f"input/{n}"] for n in checked})
            return self._cached(outputs), writes, checked  # more than collect_rows: Spark writes
        if self.driver_views:
            return self._views_to_driver(outputs, writes, checked)
        if self.small and outputs:
            local = collect_local(self.spark, outputs, policy.local_change_rows)[0]
            if local is not None:
                return local, writes, checked
        return self._cached(outputs), writes, checked

    def _views_to_driver(self, outputs: dict[str, Any], writes: list[Any], checked: dict[str, Any]
                         ) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
        """A step whose state updates Spark writes (a recompute's whole traces, or more rows than
        ``execution.collect_rows``), in a process that writes the state itself: its view deltas
        and checked input changes come here as Arrow in one job, up to ``collect_rows`` rows, and
        the in-process gate checks them (pyarrow writes them). The gate on Spark computed each
        view delta again and joined it with the whole old view in adaptive stages (a W1 SF 0.2
        recomputed step on a cluster: 19 of its 30 s in 25 jobs). Past ``collect_rows``: cached,
        for the gate and Spark's writes."""
        from spark_jobs.executor.spark.local_relations import collect_arrow

        frames = {f"output/{v}": df for v, df in outputs.items()}
        frames.update({f"input/{n}": df for n, df in checked.items()})
        tables = collect_arrow(self.spark, frames, self.rt.config.policy.collect_rows)[0] if frames else None
        if tables is None:
            return self._cached(outputs), writes, checked
        self.views_arrow = True
        typed = {key: _typed(tables[key], frames[key]) for key in frames}
        return {v: typed[f"output/{v}"] for v in outputs}, writes, {n: typed[f"input/{n}"] for n in checked}

    def _cached(self, outputs: dict[str, Any]) -> dict[str, Any]:
        settled = {view: df.cache() for view, df in outputs.items()}
        self.cached.extend(settled.values())
        return settled

    def _all_local(self) -> bool:
        """Is every leaf of the step's values a local relation: its changes held on the driver,
        evaluated once over a state reader (``StoreReader``) through which Spark scanned no
        trace (every lookup narrowed on the driver, ``read_by_spark``)?"""
        return (self.local and len(self._states) == 1 and self._states[0] is not None
                and not getattr(self._states[0], "read_by_spark", lambda: True)())

    def gate(self, timestep: int, outputs: Mapping[str, Any], deltas: Mapping[str, Any], full: bool,
             late: Sequence[Any], state: Any) -> "GateReport":
        from spark_jobs.runtime import refresh
        from spark_jobs.runtime.quality_gate import check_timestep

        if self.settled_arrow or self.views_arrow:  # the changes are Arrow tables here: the in-process gate, no job
            from spark_jobs.runtime.quality_gate import check_timestep_tables

            return check_timestep_tables(self.rt, timestep, dict(outputs), dict(deltas), state.trace_files,
                                         late=late)
        previous = {v: refresh.old_view(self.rt.store, v, df) for v, df in outputs.items()} if full else None
        return check_timestep(self.rt, timestep, dict(outputs), dict(deltas), previous, late=late)

    def schema_json(self, value: Any) -> str:
        return value.schema.json()

    def release(self) -> None:
        for result in self.results:
            result.release()
        for df in self.cached:
            df.unpersist()
        self.results.clear()
        self.cached.clear()
        self.tables.clear()
        self._handed.clear()
        self._states.clear()
        self._stack.close()
        self._conf_set = False


class ArrowSteps:
    """Phases 1-5 on pyarrow tables in this process (see the module docstring)."""

    name = "arrow"

    def __init__(self, rt: "CircuitRuntime") -> None:
        self.rt = rt
        self._engine = None

    @property
    def engine(self):
        if self._engine is None:
            from spark_jobs.executor.arrow.kernels import ArrowEngine

            self._engine = ArrowEngine(self.rt.config.policy, self.rt.config.session_timezone)
        return self._engine

    def read_input(self, name: str, files: Sequence[InputFile], state: Any) -> InputChange:
        from spark_jobs.executor.arrow import inputs as arrow_inputs

        spec = self.rt.compiled.spec.inputs[name]
        why = arrow_inputs.unsupported(spec, self.rt.config.session_timezone)
        if why:
            raise NotLocal(why)
        change = arrow_inputs.read_input(spec, files, state, self.rt.config.policy)
        return InputChange(change.table, change.trace, change.unknown_keys, change.bytes_read)

    def count(self, clock: StepClock, deltas: dict[str, Any], files: Mapping[str, Sequence[InputFile]]
              ) -> dict[str, tuple[int, int]]:
        from spark_jobs.executor.arrow import lateness as arrow_late
        from spark_jobs.state.arrow_trace import weight_totals

        counts = {}
        for name, table in list(deltas.items()):
            if clock.timed(name):
                column, mark = clock.column(name), clock.watermark(name)
                clock.record(name, arrow_late.change_totals(table, column, mark))
                deltas[name] = arrow_late.on_time(table, column, mark)
            counts[name] = weight_totals(deltas[name])
        if clock.refused():
            raise NotLocal("late rows under on_late: refuse (the refusal names their files)")
        return counts

    def check_bags(self, timestep: int, deltas: dict[str, Any], deleted: Mapping[str, int],
                   files: Mapping[str, Sequence[InputFile]], state: Any) -> list[Quarantined]:
        from spark_jobs.runtime.bag import check_tables

        check_tables(self.rt, deltas, deleted, state)  # NotLocal when a delete goes below zero
        return []

    def evaluate(self, deltas: Mapping[str, Any], state: Any, *, first_step: bool, full: bool,
                 only: Any = None, external: Any = None) -> Any:
        from spark_jobs.executor.arrow import inputs as arrow_inputs
        from spark_jobs.executor.evaluate import evaluate_step

        if full:
            raise NotLocal("a full refresh rebuilds every state from all retained files: a load, on Spark")
        schemas = {name: arrow_inputs.schema(inp) for name, inp in self.rt.compiled.spec.inputs.items()}
        return evaluate_step(self.rt.compiled.incremental, deltas, state, first_step=first_step,
                             input_schemas=schemas, engine=self.engine, only=only, external=external)

    def view_delta(self, view: str, new: Any) -> Any:
        """A recompute's change of ``view``: the new value minus the committed one."""
        from spark_jobs.executor.arrow.zsets import consolidate, negate, total
        from spark_jobs.state.arrow_read import read_view

        old = read_view(self.rt.store, view)
        if old is None or old.num_rows == 0:
            return consolidate(new) if new.num_rows else new
        if sorted(old.column_names) != sorted(new.column_names):
            raise NotLocal(f"view {view}'s committed columns differ from the circuit's")
        old = old.select(new.column_names).cast(new.schema)
        return consolidate(total([new, negate(old)]))

    def integrate(self, name: str, trace: str, change: Any, state: Any) -> Any:
        """Input ``name``'s integral after this step: its committed trace plus ``change`` (a recompute)."""
        import pyarrow as pa

        from spark_jobs.executor.arrow import inputs as arrow_inputs
        from spark_jobs.executor.arrow.zsets import consolidate

        schema = arrow_inputs.schema(self.rt.compiled.spec.inputs[name])
        files = state.trace_files(trace)
        limit = self.rt.config.policy.cost.arrow_rows
        if files is not None and files.rows() > limit:
            raise NotLocal(f"input {name}'s integral holds {files.rows()} rows > execution.cost.arrow_rows ({limit})")
        parts = [_padded(t, schema) for t in
                 ((files.read_all() if files is not None else None), change) if t is not None]
        if not parts:
            return schema.empty_table()
        return _settled(pa.concat_tables(parts), consolidate)

    def integral(self, trace: str, change: Any, state: Any) -> Any:
        """A kept node's value after this step: its committed integral plus ``change`` (``change.py``)."""
        import pyarrow as pa

        from spark_jobs.executor.arrow.zsets import consolidate

        change = self.engine.table(change)
        files = state.trace_files(trace)
        limit = self.rt.config.policy.cost.arrow_rows
        if files is not None and files.rows() > limit:
            raise NotLocal(f"the integral {trace} holds {files.rows()} rows > execution.cost.arrow_rows ({limit})")
        parts = [_padded(t, change.schema) for t in ((files.read_all() if files is not None else None), change)
                 if t is not None]
        return _settled(pa.concat_tables(parts), consolidate)

    def settle(self, outputs: dict[str, Any], writes: list[Any], checked: dict[str, Any]
               ) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
        return outputs, writes, checked

    def gate(self, timestep: int, outputs: Mapping[str, Any], deltas: Mapping[str, Any], full: bool,
             late: Sequence[Any], state: Any) -> "GateReport":
        from spark_jobs.runtime.quality_gate import check_timestep_tables

        return check_timestep_tables(self.rt, timestep, dict(outputs), dict(deltas), state.trace_files, late=late)

    def schema_json(self, value: Any) -> str:
        from spark_jobs.state.arrow_trace import spark_schema_json

        return spark_schema_json(value.schema)

    def release(self) -> None:
        return None

    def reset(self) -> None:
        """Start a new step on the same engine settings (a sub-step: ``chunks.py``): the lookups'
        kept row groups and their counters are dropped."""
        self._engine = None


def _padded(table: Any, schema: Any) -> Any:
    """``table`` with ``schema``'s columns and ``_weight``: a column added to the input since an
    integral was written is NULL in its old rows (applying a change: ``runtime/change.py``)."""
    import pyarrow as pa

    for f in schema:
        if f.name not in table.column_names:
            table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
    return table.select(schema.names).cast(schema)


def _settled(table: Any, consolidate: Any) -> Any:
    """An integral (committed trace + change) with every deleted tuple netted out: only rows that
    share their first column with a row of negative weight are consolidated (a bag's integral has
    no negative tuple, so a deletion is all that can cancel). Grouping every column of a whole
    integral cost a quarter of an in-process recompute (W1); the rest is a valid Z-set as it is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.spec.model import WEIGHT

    negative = pc.less(table.column(WEIGHT), 0)
    if not pc.any(negative).as_py():
        return table
    first = table.column(0)
    touched = pc.is_in(first, value_set=pc.unique(first.filter(negative)), skip_nulls=False)
    if pa.types.is_floating(first.type):  # NaN never matches itself in a set: always netted
        touched = pc.or_(touched, pc.fill_null(pc.is_nan(first), False))
    touched = pc.fill_null(touched, False)
    return pa.concat_tables([table.filter(pc.invert(touched)), consolidate(table.filter(touched))])


def _spark_settled(integral: Any, change: Any) -> Any:
    """``_settled`` on Spark: the committed integral plus ``change`` with every deleted tuple
    netted out, consolidating only the rows that share their first column with a row of
    negative weight (a committed delta's deletions, the change's): the rest is a valid Z-set as
    it is. Grouping every column of the whole integral shuffled all of it (W1 SF 0.2: ~1.5M rows)
    in a recomputed step on a cluster; this shuffles the deleted tuples' rows only."""
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark import zset
    from spark_jobs.spec.model import WEIGHT

    total = change if integral is None else integral if change is None else zset.plus(integral, change)
    first = total.columns[0]
    keys = total.where(F.col(WEIGHT) < 0).select(F.col(first).alias("__neg_key")).distinct()
    touched = F.col(first).eqNullSafe(F.col("__neg_key"))
    hit = total.join(F.broadcast(keys), touched, "left_semi")
    rest = total.join(F.broadcast(keys), touched, "left_anti")
    return zset.plus(rest, zset.consolidate(hit))


def _typed(table: Any, frame: Any) -> Any:
    """A table collected from Spark with the Arrow types the in-process engine and the store
    use for ``frame``'s Spark schema (one mapping whichever engine wrote a file); None: the
    empty table of those types."""
    from spark_jobs.state.arrow_trace import arrow_of

    schema = arrow_of(frame.schema)
    if table is None:  # known empty
        return schema.empty_table()
    return table if table.schema == schema else table.select(schema.names).cast(schema)


def reads_change_in_process(rt: "CircuitRuntime", mode: str, change_rows: int | None) -> bool:
    """Whether a step on Spark reads, counts and bag-checks its change in this process and hands
    it to Spark as local relations (``SparkSteps.arrow_reads``): an incremental step whose change
    fits ``execution.local_change_rows``, with files this process reaches. One predicate for
    ``dbsp step`` (``step.commit_path``) and the Airflow stage tasks (``stage_run``), so that the
    two cannot drift apart. A recompute's or a load's values are the inputs: never read here."""
    return (mode == "incremental" and change_rows is not None
            and change_rows <= rt.config.policy.local_change_rows and driver_reach(rt) is None)


def unsupported(rt: "CircuitRuntime", pending: Mapping[str, Sequence[InputFile]]) -> str | None:
    """Why a step cannot run in-process at all (None: it may try)."""
    from spark_jobs.executor.arrow import inputs as arrow_inputs
    from spark_jobs.ir.operator import operator

    for name, files in pending.items():
        if files:
            why = arrow_inputs.unsupported(rt.compiled.spec.inputs[name], rt.config.session_timezone)
            if why:
                return why
    for node in rt.compiled.incremental:
        if operator(node.op).kernel("arrow") is None:
            return f"operator {node.op!r} (node {node.id!r}) has no Arrow kernel"
    return None


def change_rows(pending: Mapping[str, Sequence[InputFile]], inputs: Mapping[str, Any]) -> int | None:
    """Rows of the step's input files (Parquet footers, text lines counted; None: unknown);
    ``inputs``: the circuit's input specs by name."""
    from spark_jobs.executor.arrow import inputs as arrow_inputs

    total = 0
    for name, files in pending.items():
        rows = arrow_inputs.change_rows(inputs[name], files)
        if rows is None:
            return None
        total += rows
    return total


__all__ = ["ArrowSteps", "SparkSteps", "change_rows", "unsupported"]
