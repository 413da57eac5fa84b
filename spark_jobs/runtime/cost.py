"""The cost model: is this step cheaper incremental (Q^Δ on the change) or recomputed (Q on the
integrated inputs, committed as its delta against the old view)?

Why a model and not a threshold: the incremental step costs about what its change costs (rows
read, looked up, checked), a recompute about what the integrated inputs cost; which is cheaper
depends on the circuit, the engine and the machine. So each committed step records what it cost
(``meta.cost``: mode, engine, change rows, integrated input rows, seconds) and carries the last
``execution.cost.history`` of those records forward (``meta.cost.history``: manifests are
retained only a few timesteps). For the next step each (mode, engine) gets a rate fitted to its
own past records, ``seconds = fixed + per_row x rows`` (rows: the change for an incremental step,
the integrated inputs plus the change for a recompute), by least squares; with no history the
defaults below (measured on W1 / TPC-H Q3 on this project's 2-core test machine) stand in,
scaled to the history's overall speed; only records large enough for their per-row part to show
move the per-row rate (small steps measure the fixed part: ``fit``). Nothing here reads data: sizes come
from the Parquet footers of the step's files and the manifest's trace entries.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from spark_jobs.policy import CostPolicy, ExecutionPolicy

MODES = ("incremental", "recompute")

# (mode, engine) -> (fixed seconds, seconds per row) before any history. In-process, from W1
# (bench.recompute, SF 0.05, load ~25 on 2 cores): an incremental step of 10k / 100k / 1M changed
# rows 0.3 / 1.4 / 5 s (the bag check grows with the state: 2.8 s for 100k rows at SF10 on a quiet
# machine), a recompute 1.5-2 s over 0.4-1.4M integrated rows, the load of 382k rows 1-2 s (at
# SF10, bench.recompute-sf10-sweep: 286 s over 76.5M rows, load ~10). Spark: a floor of seconds;
# a recomputed *step* rewrites every trace, as a load does, so its rate is a load's, not the
# query's alone (bench.run's "recompute", 11.6 s at SF10, writes only the view): W1 SF1 recomputed
# steps 121-228 s over 7.65M rows (load 11-20), the SF10 load 1,160 s over 76.5M (load 15-22),
# 15-30 us a row. History replaces them quickly.
DEFAULTS: dict[tuple[str, str], tuple[float, float]] = {
    ("incremental", "arrow"): (0.15, 15e-6),
    ("incremental", "spark"): (2.0, 60e-6),
    ("recompute", "arrow"): (0.5, 0.5e-6),  # recompute_arrow: W1 SF10 37.2 s over 76.5M rows (2026-11-30, load 11)
    ("load", "arrow"): (0.5, 2.0e-6),  # an in-process first step (``is_load``): the recompute's rate before recompute_arrow
    ("load", "spark"): (5.0, 15e-6),  # (a load on Spark is recorded as a recompute there: the same cost)
    ("recompute", "spark"): (5.0, 15e-6),
}


@dataclass(frozen=True)
class Sample:
    """What one committed step cost (``meta.cost`` and each entry of its ``history``)."""

    mode: str
    engine: str
    change_rows: int
    input_rows: int
    seconds: float

    @property
    def rows(self) -> int:
        """The rows this step's cost follows: the change (incremental), or everything (recompute)."""
        return self.change_rows if self.mode == "incremental" else self.input_rows + self.change_rows

    def to_list(self) -> list:
        return [self.mode, self.engine, int(self.change_rows), int(self.input_rows), round(float(self.seconds), 4)]

    @classmethod
    def from_raw(cls, raw: Any) -> "Sample | None":
        """A record as the manifest keeps it (a list, or a dict for the step's own); None if unreadable."""
        try:
            if isinstance(raw, Mapping):
                raw = [raw["mode"], raw["engine"], raw["change_rows"], raw["input_rows"], raw["seconds"]]
            mode, engine, change, inputs, seconds = raw
            if mode not in MODES or seconds is None or change is None or inputs is None:
                return None
            return cls(str(mode), str(engine), int(change), int(inputs), float(seconds))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Rate:
    """``seconds = fixed + per_row x rows`` for one (mode, engine); ``samples``: records fitted."""

    fixed: float
    per_row: float
    samples: int = 0

    def seconds(self, rows: int) -> float:
        return self.fixed + self.per_row * max(0, rows)


def default_rate(mode: str, engine: str) -> Rate:
    fixed, per_row = DEFAULTS.get((mode, engine), DEFAULTS[(mode, "spark")])
    return Rate(fixed, per_row)


def fit(samples: Sequence[Sample], default: Rate) -> Rate:
    """The rate of ``samples`` (all of one mode and engine), robust to a loaded machine's noise.
    ``default`` is the project's default already scaled to this history's overall speed
    (``rate``). The per-row rate comes from the samples large enough for their per-row part to
    show (at least the default's fixed part): by least squares where their sizes spread, held
    within 4x of ``default``'s, else the default's scaled by those samples' median ratio to it;
    with no such sample it stays ``default``'s: small steps measure the fixed part, not the rate
    (W1 SF10, 2026-11-30: after the load and one 1,000-row step of ~1 s at load ~12, scaling the
    per-row rate by that step's ratio estimated a 2.5M-row in-process step at 177 s, which took
    15-17 s). Then the fixed part is the median of what each sample leaves. Never negative."""
    if not samples:
        return default
    n = len(samples)
    xs = [float(s.rows) for s in samples]
    ys = [float(s.seconds) for s in samples]
    big = [(x, y) for x, y in zip(xs, ys) if default.per_row * x >= default.fixed]
    per_row = default.per_row
    if big:
        ratios = sorted(y / max(default.seconds(int(x)), 1e-9) for x, y in big)
        per_row = default.per_row * ratios[len(ratios) // 2]
        if max(xs) >= 2 * max(min(xs), 1.0):
            mx, my = sum(xs) / n, sum(ys) / n
            sxx = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
            per_row = min(max(slope, default.per_row / 4), default.per_row * 4)
    left = sorted(max(0.0, y - per_row * x) for x, y in zip(xs, ys))
    return Rate(left[n // 2], per_row, n)


def speed(history: Sequence[Sample]) -> float:
    """How much slower (> 1) or faster than the defaults this machine and circuit ran, over every
    record (the median ratio): a default stands in for a (mode, engine) not seen yet only after
    this scaling, so that a measured rate is never compared with an unscaled default."""
    ratios = sorted(s.seconds / max(default_rate("load" if is_load(s) else s.mode, s.engine).seconds(s.rows), 1e-9)
                    for s in history)
    return ratios[len(ratios) // 2] if ratios else 1.0


def is_load(s: Sample) -> bool:
    """An in-process first step (recorded as a recompute over no integrated rows): it writes every
    trace, where an in-process recompute appends to the integrals of the inputs' filters and
    projections (``recompute_arrow``): W1 SF10 (2026-11-30, load ~10) the load 94-109 s, a
    recompute 37 s. So it does not stand for a recompute's cost in-process; on Spark it does (a
    recompute there rewrites every trace, as a load)."""
    return s.mode == "recompute" and s.engine == "arrow" and s.input_rows == 0


def rate(history: Sequence[Sample], mode: str, engine: str) -> Rate:
    """The fitted rate of ``mode`` on ``engine`` from ``history`` (the default, scaled by ``speed``,
    when it has no record of them; in-process loads left out: ``is_load``)."""
    base = default_rate(mode, engine)
    scale = speed(history)
    return fit([s for s in history if s.mode == mode and s.engine == engine and not is_load(s)],
               Rate(base.fixed * scale, base.per_row * scale))


@dataclass(frozen=True)
class Estimate:
    """Both estimated costs of one step, and what they were estimated from."""

    change_rows: int
    input_rows: int
    incremental_engine: str
    incremental: float
    recompute_engine: str
    recompute: float
    samples: int  # history records the two rates were fitted to

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["incremental"] = round(self.incremental, 4)
        out["recompute"] = round(self.recompute, 4)
        return out


def estimate(history: Sequence[Sample], change_rows: int, input_rows: int, incremental_engine: str,
             recompute_engine: str) -> Estimate:
    """Both costs of a step of ``change_rows`` changed rows over ``input_rows`` integrated rows."""
    inc = rate(history, "incremental", incremental_engine)
    rec = rate(history, "recompute", recompute_engine)
    return Estimate(change_rows, input_rows, incremental_engine, inc.seconds(change_rows), recompute_engine,
                    rec.seconds(input_rows + change_rows), inc.samples + rec.samples)


@dataclass(frozen=True)
class Choice:
    """The mode of a step and why (``mode``: incremental | recompute)."""

    mode: str
    reason: str
    estimate: Estimate | None = None


def choose(policy: CostPolicy, est: Estimate | None, cannot: str | None) -> Choice:
    """The mode ``policy`` picks for a step with estimate ``est`` (None: the sizes are unknown);
    ``cannot``: why the step cannot be recomputed (``recompute.CannotRecompute``), if it cannot."""
    if policy.recompute == "never":
        return Choice("incremental", "execution.cost.recompute: never", est)
    if cannot is not None:
        return Choice("incremental", f"a recompute is not possible: {cannot}", est)
    if policy.recompute == "always":
        return Choice("recompute", "execution.cost.recompute: always", est)
    if est is None:
        return Choice("incremental", "the size of the change is unknown (no recompute estimate)", None)
    says = (f"estimated incremental {est.incremental:.2f} s ({est.change_rows} changed rows, "
            f"{est.incremental_engine}) vs recompute {est.recompute:.2f} s ({est.input_rows} integrated rows, "
            f"{est.recompute_engine}){' from defaults' if not est.samples else f', from {est.samples} past steps'}")
    # min_change_rows keeps every small step incremental, on either engine: its cost is its
    # fixed part in both modes, where the model's noise (a loaded machine's timings), not the
    # data, would decide. min_change_fraction holds an in-process step only: an incremental step
    # on Spark (past execution.arrow.max_memory_bytes on a local profile, past max_change_rows on
    # a cluster or Connect one, or a profile whose steps run on Spark) is left to the estimates
    # past min_change_rows (a 1M-row change at W1 SF10 took 46-78 s there against 16 s
    # recomputed, though it is 1.3% of the inputs).
    if est.change_rows < policy.min_change_rows:
        return Choice("incremental", f"a change of {est.change_rows} rows < execution.cost.min_change_rows "
                                     f"({policy.min_change_rows}): {says}", est)
    if est.incremental_engine == "arrow" and est.change_rows < policy.min_change_fraction * est.input_rows:
        return Choice("incremental", f"a change of {est.change_rows} rows < execution.cost.min_change_fraction "
                                     f"({policy.min_change_fraction}) of the {est.input_rows} integrated rows: "
                                     f"{says}", est)
    if est.incremental > policy.margin * est.recompute:
        return Choice("recompute", f"recompute is cheaper: {says}", est)
    return Choice("incremental", f"incremental is cheaper: {says}", est)


def incremental_engine(history: Sequence[Sample], policy: ExecutionPolicy, change_rows: int, input_rows: int,
                       engine: str, reason: str, recompute_engine: str) -> tuple[str, str]:
    """The engine of an incremental step past ``arrow.max_change_rows`` that may run either way
    (``ExecutionPolicy.engine_for`` sent it in-process because its memory fits): in-process unless
    past incremental steps *on Spark* were measured and the estimates say Spark wins by
    ``cost.margin``. Without such a record it stays in-process: Spark's estimate would be its
    default scaled by the whole history's speed, while the in-process one is fitted to this
    circuit's small steps, whose fixed part inflates the per-row rate (W1 SF10, bench.recompute,
    2026-11-29: after the load and one 1,000-row step of 0.96 s, a 1M-row change was estimated
    22.8 s in-process against 20.6 s on Spark, in-process by the margin alone; with that small
    step at 2 s, 47.4 s against 20.6 s: Spark. It took 6-8 s in-process, and 46-78 s on Spark in
    earlier runs), so the comparison would send large steps to Spark, the cliff this bound
    removes. On a local profile in-process was measured 4-8x faster at every size. Any other
    step keeps ``(engine, reason)``."""
    if engine != "arrow" or change_rows <= policy.arrow.max_change_rows or policy.engine != "auto":
        return engine, reason
    here = estimate(history, change_rows, input_rows, "arrow", recompute_engine).incremental
    measured = sum(1 for s in history if s.mode == "incremental" and s.engine == "spark")
    if not measured:
        return "arrow", f"{reason}; estimated {here:.2f} s in-process (no incremental step on Spark measured yet)"
    there = estimate(history, change_rows, input_rows, "spark", recompute_engine).incremental
    if here > policy.cost.margin * there:
        return "spark", (f"{reason}; but estimated {here:.2f} s in-process vs {there:.2f} s on Spark "
                         f"(from {measured} past Spark steps; > execution.cost.margin {policy.cost.margin}x): on Spark")
    return "arrow", f"{reason}; estimated {here:.2f} s in-process vs {there:.2f} s on Spark (from {measured} past Spark steps)"


def history_of(meta: Mapping[str, Any] | None) -> list[Sample]:
    """The cost records a manifest's meta carries (its own last), oldest first."""
    cost = (meta or {}).get("cost")
    if not isinstance(cost, Mapping):
        return []
    out = [s for s in (Sample.from_raw(r) for r in cost.get("history") or ()) if s is not None]
    return out


def record(previous_meta: Mapping[str, Any] | None, sample: Sample, keep: int,
           est: "Estimate | Mapping[str, Any] | None" = None, reason: str = "") -> dict[str, Any]:
    """This step's ``meta.cost``: its own record, its estimate and reason, and the history
    (the previous step's, this step appended, the last ``keep`` kept)."""
    history = [*history_of(previous_meta), sample][-max(1, keep):]
    out: dict[str, Any] = {"mode": sample.mode, "engine": sample.engine, "change_rows": int(sample.change_rows),
                           "input_rows": int(sample.input_rows), "seconds": round(sample.seconds, 4),
                           "history": [s.to_list() for s in history]}
    if est is not None:  # an Estimate, or its dict as a DAG run's plan kept it
        out["estimate"] = est.to_dict() if isinstance(est, Estimate) else dict(est)
    if reason:
        out["reason"] = reason
    return out


__all__ = ["Choice", "DEFAULTS", "Estimate", "MODES", "Rate", "Sample", "choose", "default_rate", "estimate", "is_load",
           "fit", "history_of", "incremental_engine", "rate", "record", "speed"]
