"""The execution policy: every size threshold of the engine, and the choice of engine per step.

Why one object: the thresholds that decide how a step runs (when a change is "small", how much
state a driver-side lookup may read, when a trace is written sorted, which engine evaluates a
step) used to be module globals in eight modules, set three ways (the profile, a Spark conf key,
and globals patched by the benchmark and the tests). Now they are fields of ``ExecutionPolicy``,
built once from the profile (``execution:`` and ``state:`` in ``config/<profile>.yaml``, every
key documented in ``config/README.md``) and passed down: tests and the benchmark pass a policy
(``dataclasses.replace`` of the default), nothing patches a module.

This module imports nothing of the project, so every layer may read it (the state store takes
``StatePolicy``, the executor ``ExecutionPolicy``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

ENGINES = ("auto", "spark", "arrow")
DRIVER_ACCESS = ("auto", "always", "never")
LOOKUPS = ("sorted", "cached", "scan")
RECOMPUTE = ("auto", "never", "always")
# Parquet codecs both writers of a trace (pyarrow and Spark) and both readers know
SORTED_COMPRESSION = ("none", "snappy", "zstd", "gzip")


@dataclass(frozen=True)
class StatePolicy:
    """How traces are laid out on disk (``state:`` in a profile)."""

    compact_fraction: float = 0.5  # compact a trace when its deltas exceed this fraction of its base
    keep_timesteps: int = 2  # committed timesteps that stay readable
    # a key-sorted trace's compaction writes it sorted from this many rows on (smaller ones share
    # one batch rewrite: a lookup reads them whole in milliseconds anyway)
    sort_min_rows: int = 100_000
    # above this a write is split into several files (an in-process key-sorted write: written in
    # chunks of this many rows into one file, ``arrow_trace.write_dir``)
    rows_per_file: int = 1_000_000
    # row groups of sorted files: a key lookup reads a few narrow groups (~10k rows of 4 columns)
    sorted_row_group_bytes: int = 256 * 1024
    # ...and at most this many rows (an in-process sorted write): a probe of a key in a narrow
    # trace decodes about this many rows, not 256 KiB of them. W1's customer-key integral (two
    # columns) had 16k-row groups: a 1,000-row step's 100 probes decoded all of SF10's 300k rows
    # (30k at SF1), and the join integrals' 6-8k-row groups made each probe of a deleted order
    # read a group's key column of its own at SF10 where at SF1 probes shared groups
    sorted_row_group_rows: int = 2048
    # codec of sorted files: a lookup decodes whole row groups, and snappy's decompression was a
    # third of that CPU (W1's line-item integral: 9.4 -> 6.3 ms for 50 groups) for a quarter more
    # bytes on disk; the bag check of a large change decodes half of such an integral
    sorted_compression: str = "none"
    delta_fanout: int = 4  # deltas are merged in size tiers of this fan-out
    # an in-process step does the tier merges that are due up to this many rows rewritten per row
    # it appended (its first merge always; a tier of 2 x delta_fanout deltas is merged anyway):
    # every trace of a circuit gets a delta each step, so their tiers fill together, and W1's
    # 1,000-row step at SF1 paid 12-34 ms of merges in two of three steps, none in the third
    merge_rows_per_row: float = 2.0
    # an in-process step compacts or merges a trace of up to this many rows itself (more: Spark).
    # Nexmark q7 at 100k events a step keeps ~2M aggregate rows in its open windows, and a
    # compaction that started Spark for them cost 125 s (37 s of it the JVM) where pyarrow takes a
    # few seconds. A merge of one tier (delta_fanout deltas) of changes up to the in-process
    # memory bound (arrow.max_memory_bytes: ~2.1M changed rows) must fit too: at W1 SF10 four
    # line-item deltas of 1-2M-row changes held ~7M rows, and at 5M their merge started Spark
    # inside a 2M-row step (30 s against 15 s for the same size without it)
    inprocess_rewrite_rows: int = 10_000_000


@dataclass(frozen=True)
class NarrowPolicy:
    """State looked up on the driver by the keys a small change can hold (``executor/spark/narrow.py``)."""

    enabled: bool = True
    max_keys: int = 50_000  # more candidate keys than this: narrowing would cost more than it saves
    max_decoded_rows: int = 2_000_000  # a lookup decoding more trace rows is left to Spark
    max_found_rows: int = 20_000  # ...and one finding more (a hot key's group: a big local relation)
    in_list_max: int = 2_000  # a lookup by a driver-held change filters the state by an IN list up to here


@dataclass(frozen=True)
class RecursionPolicy:
    """The fixed-point loop of a recursive node (``executor/loop.py``)."""

    broadcast_rows: int = 200_000  # a delta up to this many rows is broadcast for lookups...
    big_state_rows: int = 200_000  # ...when the traces hold more rows than this
    local_rows: int = 50_000  # an iteration's deltas up to this many rows are kept on the driver
    # how Spark iterations read the traces: "sorted" (cached once per step, sorted on the key,
    # filtered on key ranges first), "cached" (cached, unsorted), "scan" (Parquet at every lookup)
    lookup: str = "sorted"
    cache_batch_rows: int = 1024  # rows per cached batch of a sorted trace (what a range filter skips)
    max_ranges: int = 128  # a key-range filter has at most this many ranges
    driver_loop: bool = True  # run a small incremental step's loop in-process (Arrow), not on Spark
    driver_trace_rows: int = 5_000_000  # ...unless its lookups would decode more trace rows than this


@dataclass(frozen=True)
class BagCheckPolicy:
    """How the bag check looks a step's deletions up in an input's integral (``executor/bag_check.py``)."""

    # the tuples a step's deletes take below their previous weight are looked up on the driver
    # (pyarrow) when there are at most this many; more: one Spark semi-join
    max_tuples: int = 200_000
    # a driver lookup that would decode more integral rows than ``narrow.max_decoded_rows`` streams
    # the row groups that can hold those tuples, keeping only the matches: up to this many rows
    # (local profiles only: a cluster's driver does not read the whole state)...
    driver_scan_rows: int = 250_000_000
    max_found_rows: int = 2_000_000  # ...and finding at most this many (else Spark)


@dataclass(frozen=True)
class ArrowPolicy:
    """When a whole step runs in-process on Arrow (``engine: auto``)."""

    # input change rows of a step (from the files' footers). A local profile's Spark shares the
    # driver's cores, so in-process pays off well past small changes: on W1 SF10 a 100k-row step
    # took 2.8 s in-process against 10.3 s on Spark, a 400k-row one 6 s against 20.6 s, and a
    # 1M-row one peaked at 1.3 GB of memory (docs/performance.md)
    max_change_rows: int = 1_000_000
    # past max_change_rows a step still runs in-process when Spark runs on this machine (a local
    # profile: it shares the driver's cores) and the step's estimated memory fits:
    # base_memory_bytes + change rows x bytes_per_change_row <= max_memory_bytes (0: never past
    # max_change_rows, the old hard cut-off). Why: the cut-off was a cliff, W1 SF10 1,000,871 rows
    # took 9.5 s in-process and 46-78 s on Spark. Both are measured (bench.recompute, W1 SF10,
    # 2026-11-29, the process's peak RSS in the step, its imports and the lookups' kept row groups
    # included): 1.46 / 1.60 / 1.62 / 1.85 / 2.18-2.91 GiB for 0.5M / 0.95M / 1M / 1.4M / 2M
    # changed rows (3.4-3.6 GiB at 2M when the step also merged ~6.9M line-item rows with a full
    # consolidation, which merges no longer do: ``arrow_trace.settle``). 1 GiB + 1,200 bytes a row
    # bounds every step without a merge (2M: 3.24 GiB estimated); the old 2,000 bytes a row with
    # no base under-estimated 0.5M rows (0.93 GiB) and sent 2.15M rows to Spark
    max_memory_bytes: int = 4 << 30
    base_memory_bytes: int = 1 << 30
    bytes_per_change_row: int = 1_200
    # past max_memory_bytes (a local profile, `dbsp step`), the step still runs in-process, its
    # change split into sub-steps of at most this many changed rows applied one after another in
    # one transaction (``runtime/chunks.py``: one commit, one quality gate). 0: the most rows one
    # sub-step's estimate fits, (max_memory_bytes - base_memory_bytes) // bytes_per_change_row
    # (~2.68M). A chunk the bound cannot hold sends the step to Spark. Why: past the bound Spark
    # cost 4-8x the in-process step (W1 SF10): the bound moved the cliff, it did not remove it
    chunk_rows: int = 0
    max_lookup_rows: int = 5_000_000  # trace rows a step's lookups may decode and keep (for reuse)...
    # ...past that, a lookup streams the row groups that can hold its keys and keeps only the
    # matches (``TraceFiles.matching``): up to this many rows decoded by a step's streamed
    # lookups in all...
    max_scan_rows: int = 250_000_000
    max_found_rows: int = 2_000_000  # ...and this many found by one of them (else: Spark)


@dataclass(frozen=True)
class CostPolicy:
    """When a step recomputes its views from the integrated inputs instead of evaluating Q^Δ
    (``runtime/cost.py``: both costs estimated from the step's sizes and past steps' times)."""

    # auto: the cheaper of the two by the cost model; never: always incremental; always: recompute
    # every step that can be recomputed (tests, benchmarks, a circuit whose every step is large)
    recompute: str = "auto"
    # auto recomputes only when the incremental estimate exceeds margin x the recompute estimate
    # (a recompute rewrites every trace: it must win clearly, not by the model's noise)
    margin: float = 1.2
    # auto never recomputes a step whose change holds fewer rows than this: a small step's cost is
    # its fixed part on either mode, where the model's noise, not the data, would decide (on
    # either engine; min_change_fraction below holds an in-process incremental step only)
    min_change_rows: int = 10_000
    # ...nor one whose change is less than this fraction of the integrated input rows: a recompute
    # rewrites every trace, an incremental step writes in proportion to its change, and its
    # lookups cannot read more than the state (W1 SF 0.2: a 100k-row change, 6.5% of the inputs,
    # took 1.6 s incremental against 4.7-9 s recomputed, where the fitted model said otherwise)
    min_change_fraction: float = 0.1
    history: int = 24  # past steps' measured costs kept in the manifest (meta.cost.history)
    # a recompute over at most this many integrated input rows runs in-process (Arrow); more: Spark
    arrow_rows: int = 5_000_000


@dataclass(frozen=True)
class ExecutionPolicy:
    """Every threshold of a step, and the engine choice (``execution:`` in a profile)."""

    engine: str = "auto"  # auto | spark | arrow (see ``engine_for``)
    # may this process (the CLI, an Airflow task: Spark's driver or a Connect client) read and
    # write the state and the input files itself, with pyarrow? auto: when the data root is on
    # this machine or an object store pyarrow opens (s3://, gs://, abfs://); never: every step on
    # Spark (the files live where only the cluster sees them); always: also hdfs:// (libhdfs here)
    driver_access: str = "auto"
    # a change up to this many rows is "small": it is broadcast to look state up, and a Spark step
    # runs without adaptive execution, with two shuffle partitions
    small_change_rows: int = 200_000
    # up to this many rows, a Spark step's input changes and view deltas are held on the driver
    local_change_rows: int = 20_000
    collect_extra_rows: int = 1_000  # summary rows collected beside local relations in one job
    # up to this many rows together, a small Spark step's view deltas and state updates come to
    # this process as Arrow in ONE job (when it writes the state itself), and the quality gate and
    # pyarrow take them: past ``local_change_rows`` (a change Spark read) each value was otherwise
    # computed again by the gate and by Spark's writes (W1 SF 0.2, a 100k-row change on a cluster:
    # a wasted collect, a collect of the views, the gate's job and the writes' job)
    collect_rows: int = 1_000_000
    # a Spark value whose plan would hold more IR operators than this is computed first (a local
    # checkpoint): chained joins otherwise build plans Spark's analyzer cannot hold in memory
    max_plan_operators: int = 100
    narrow: NarrowPolicy = field(default_factory=NarrowPolicy)
    recursion: RecursionPolicy = field(default_factory=RecursionPolicy)
    arrow: ArrowPolicy = field(default_factory=ArrowPolicy)
    bag_check: BagCheckPolicy = field(default_factory=BagCheckPolicy)
    state: StatePolicy = field(default_factory=StatePolicy)
    cost: CostPolicy = field(default_factory=CostPolicy)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"execution.engine: {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.driver_access not in DRIVER_ACCESS:
            raise ValueError(f"execution.driver_access: {self.driver_access!r} is not one of "
                             f"{', '.join(DRIVER_ACCESS)}")
        if self.cost.recompute not in RECOMPUTE:
            raise ValueError(f"execution.cost.recompute: {self.cost.recompute!r} is not one of "
                             f"{', '.join(RECOMPUTE)}")
        if self.state.sorted_compression not in SORTED_COMPRESSION:
            raise ValueError(f"state.sorted_compression: {self.state.sorted_compression!r} is not one of "
                             f"{', '.join(SORTED_COMPRESSION)}")
        if self.recursion.lookup not in LOOKUPS:
            raise ValueError(f"execution.recursion.lookup: {self.recursion.lookup!r} is not one of "
                             f"{', '.join(LOOKUPS)}")

    def small_change(self, rows: int) -> bool:
        """A change small enough to broadcast for lookups (and run a Spark step without AQE)."""
        return rows <= self.small_change_rows

    def inprocess_memory(self, change_rows: int) -> int:
        """The estimated peak bytes of an in-process step of ``change_rows`` changed rows: the
        process's own (``arrow.base_memory_bytes``) plus the change's (its lookups keep at most
        ``arrow.max_lookup_rows`` decoded rows and stream past that, so the change is what grows)."""
        return self.arrow.base_memory_bytes + max(0, change_rows) * self.arrow.bytes_per_change_row

    def chunk_rows(self) -> int:
        """Changed rows of one sub-step of a step past ``arrow.max_memory_bytes`` (``arrow.chunk_rows``,
        or the most the memory bound fits); 0: not even one sub-step fits (such a step runs on Spark)."""
        arrow = self.arrow
        fits = (arrow.max_memory_bytes - arrow.base_memory_bytes) // max(1, arrow.bytes_per_change_row)
        rows = arrow.chunk_rows or fits
        return rows if 0 < rows <= fits else 0

    def engine_for(self, change_rows: int | None, *, first_step: bool, driver_reach: str | None = None,
                   unsupported: str | None = None, local_spark: bool = False,
                   chunked: bool = False) -> tuple[str, str]:
        """The engine of a step, and why: ``(engine, reason)``.

        ``change_rows``: rows of the step's input changes (None: unknown without reading them);
        ``first_step``: nothing is committed yet (a load); ``driver_reach``: why this process
        cannot read and write the state and inputs itself (None: it can, whatever the profile:
        local, cluster or Spark Connect); ``unsupported``: why the step cannot run on Arrow at all
        (an operator or input without Arrow kernels), if it cannot. ``engine: arrow`` is honoured
        whenever the step can run on Arrow at all. ``local_spark``: Spark runs on this machine (a
        local profile), so a change past ``arrow.max_change_rows`` still runs in-process while its
        estimated memory fits ``arrow.max_memory_bytes`` (no cliff at the row threshold: Spark
        would share the same cores); on a cluster or Connect profile it goes to Spark. ``chunked``:
        the caller can run such a step in sub-steps (``runtime/chunks.py``: `dbsp step`), so past the
        memory bound it stays in-process while one sub-step of ``chunk_rows()`` rows fits.
        """
        if self.engine == "spark":
            return "spark", "the profile sets execution.engine: spark"
        if unsupported is not None:
            return "spark", unsupported
        if driver_reach is not None:
            return "spark", driver_reach
        if self.engine == "arrow":
            return "arrow", "the profile sets execution.engine: arrow"
        if change_rows is None:
            return "spark", "the first step loads the inputs" if first_step else "the size of the change is unknown"
        limit, what = self.arrow.max_change_rows, "a load of " if first_step else ""
        if change_rows > limit:
            over = f"{what}{change_rows} changed rows > execution.arrow.max_change_rows ({limit})"
            need, bound = self.inprocess_memory(change_rows), self.arrow.max_memory_bytes
            if local_spark and need <= bound:
                return "arrow", (f"{over}, in-process: Spark runs on this machine and the step's estimated memory "
                                 f"{need / 2**30:.2f} GiB <= execution.arrow.max_memory_bytes ({bound / 2**30:.2f} GiB)")
            past = f"{over} and the step's estimated memory {need / 2**30:.2f} GiB > execution.arrow.max_memory_bytes ({bound / 2**30:.2f} GiB)"
            chunk = self.chunk_rows() if local_spark and chunked and not first_step else 0
            if chunk:
                n = -(-change_rows // chunk)
                return "arrow", (f"{past}, in-process in {n} sub-steps of at most {chunk} rows, one commit "
                                 f"(execution.arrow.chunk_rows)")
            if local_spark:
                return "spark", past + ("" if not chunked or first_step else
                                        ": not even one sub-step fits (execution.arrow.chunk_rows)")
            return "spark", over
        return "arrow", f"{what}{change_rows} changed rows <= execution.arrow.max_change_rows"


def _section(cls: type, raw: Any, where: str) -> Any:
    """``cls`` from a profile mapping: unknown keys and wrong types are refused with the key."""
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping, got {raw!r}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; expected some of "
                         f"{', '.join(known)}")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        default = getattr(cls(), name)
        key = f"{where}.{name}"
        if isinstance(default, (StatePolicy, NarrowPolicy, RecursionPolicy, ArrowPolicy, BagCheckPolicy, CostPolicy)):
            values[name] = _section(type(default), value, key)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false, got {value!r}")
            values[name] = value
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be a whole number >= 0, got {value!r}")
            values[name] = value
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{key} must be a number >= 0, got {value!r}")
            values[name] = float(value)
        else:
            values[name] = str(value)
    return cls(**values)


def policy_from_profile(raw: Mapping[str, Any]) -> ExecutionPolicy:
    """The policy of a profile: its ``execution:`` section, with ``state:`` as ``state``."""
    execution = raw.get("execution") or {}
    if not isinstance(execution, Mapping):
        raise ValueError(f"execution must be a mapping, got {execution!r}")
    if "state" in execution:
        raise ValueError("execution.state: state settings go in the profile's top-level state: section")
    policy = _section(ExecutionPolicy, execution, "execution")
    state = raw.get("state")
    if isinstance(state, Mapping):  # state.retention is not a threshold: config.py reads it (spec/time.py)
        state = {k: v for k, v in state.items() if k != "retention"}
    return replace(policy, state=_section(StatePolicy, state, "state"))
