"""A chaos run of one circuit: random input streams, random crashes, random restarts.

The circuit (``CIRCUIT``) holds a recursive node (the transitive closure of ``edges``), a join,
an aggregate (count and sum) and a distinct. Each iteration of ``run`` writes random changes
(inserts, and deletes of rows the files written so far hold) as new files, then takes one of:

- a step in this process (``run_step``), often with a failpoint armed at a random point of the
  commit (``begin``, after the k-th state file write, before or right after the manifest, in the
  middle of the step, before or in the middle of publishing);
- a real ``dbsp step`` subprocess, killed with SIGKILL after a random delay (or not), or told to
  die on the spot at a failpoint (``DBSP_FAILPOINT_KILL=1``, exit 137: what kill -9 leaves);
- a restart: the runtime is opened again (a new process's view of the store).

The truth is what the manifests say was committed: the input files recorded as consumed. After
sampled iterations and at the end, every view (read from the state with pyarrow) must equal the
query computed in Python over exactly those files, no file may be recorded twice, and at the end
(after one clean step) every written file is consumed. ``DBSP_CHAOS_STEPS`` and
``DBSP_CHAOS_SEED`` run it longer or elsewhere (tests/test_chaos.py).
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.runtime.circuit import CircuitRuntime, open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state import failpoints
from spark_jobs.state.arrow_read import read_view
from tests.policies import policy

CIRCUIT = """\
name: chaos
inputs:
  edges:
    schema: {src: long, dst: long}
    source: {kind: changes, path: inbox/edges, format: parquet}
  people:
    schema: {id: long, grp: long, score: long}
    source: {kind: changes, path: inbox/people, format: parquet}
nodes:
  reach:
    op: recursive
    body:
      step:  {op: join, left: reach, right: edges, left_on: [dst], right_on: [src]}
      hop:   {op: select, input: step, columns: {src: src, dst: edges_dst}}
      paths: {op: union, inputs: [edges, hop]}
    outputs: [paths]
  joined: {op: join, left: people, right: edges, left_on: [id], right_on: [src]}
  owned:  {op: select, input: joined, columns: {id: id, grp: grp, dst: dst}}
  per_grp: {op: aggregate, input: people, group_by: [grp], aggregates: {n: "count(*)", total: "sum(score)"}}
  targets: {op: distinct, input: owned_grp}
  owned_grp: {op: select, input: owned, columns: {grp: grp, dst: dst}}
outputs: [reach, owned, per_grp, targets]
settings:
  retention: {inputs: "6 timesteps", view_deltas: "6 timesteps", manifests: "3 timesteps"}
"""
COLUMNS = {"edges": ("src", "dst"), "people": ("id", "grp", "score")}
VIEW_COLUMNS = {"reach": ("src", "dst"), "owned": ("id", "grp", "dst"), "per_grp": ("grp", "n", "total"),
                "targets": ("grp", "dst")}
# failpoints a step passes; after_state_write fires after the k-th file write (skip = k)
POINTS = ("begin", "after_state_write", "before_manifest", "after_manifest", "mid_step", "before_publish",
          "mid_publish")


def oracle(files: dict[str, list[Counter]]) -> dict[str, Counter]:
    """The views over the integrated inputs (the sum of ``files``' changes), computed directly."""
    bags = {name: +sum(changes, Counter()) for name, changes in files.items()}
    edges, people = bags["edges"], bags["people"]
    pairs = set(edges)
    reach = set(pairs)
    frontier = set(pairs)
    while frontier:
        new = {(s, d2) for (s, d) in frontier for (s2, d2) in pairs if s2 == d} - reach
        reach |= new
        frontier = new
    owned: Counter = Counter()
    for (pid, grp, _score), w1 in people.items():
        for (src, dst), w2 in edges.items():
            if src == pid:
                owned[(pid, grp, dst)] += w1 * w2
    per_grp: dict[int, list[int]] = {}
    for (_pid, grp, score), w in people.items():
        acc = per_grp.setdefault(grp, [0, 0])
        acc[0] += w
        acc[1] += w * score
    return {"reach": Counter({r: 1 for r in reach}), "owned": +owned,
            "per_grp": Counter({(g, n, t): 1 for g, (n, t) in per_grp.items() if n}),
            "targets": Counter({(g, d): 1 for (_i, g, d) in owned})}


def view_rows(rt: CircuitRuntime, view: str) -> Counter:
    """The committed view, read from the state with pyarrow (rows -> weight)."""
    table = read_view(rt.store, view)
    if table is None:
        return Counter()
    cols = VIEW_COLUMNS[view]
    rows = table.to_pylist()
    return +Counter({tuple(r[c] for c in cols): r["_weight"] for r in rows})


@dataclass
class Chaos:
    """One chaos run's state: what was written (file name -> change) and what happened."""

    root: Path
    seed: int
    spark_share: float = 0.0  # steps in this process forced onto Spark (0: no JVM at all)
    keys: int = 6
    rng: random.Random = field(init=False)
    written: dict[str, dict[str, Counter]] = field(default_factory=lambda: {"edges": {}, "people": {}})
    live: dict[str, Counter] = field(default_factory=lambda: {"edges": Counter(), "people": Counter()})
    events: Counter = field(default_factory=Counter)
    engines: Counter = field(default_factory=Counter)
    log: list[str] = field(default_factory=list)
    seq: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.circuit = self.root / "chaos.yaml"
        self.circuit.write_text(CIRCUIT)
        self.data = self.root / "data"
        # the local profile, every step in-process (its first step would start a JVM otherwise)
        local = (PROJECT_ROOT / "config" / "local.yaml").read_text()
        assert "engine: auto" in local
        self.profile = self.root / "profile.yaml"
        self.profile.write_text(local.replace("engine: auto", "engine: arrow"))
        self.config = load_config(str(self.profile), data_root=str(self.data))
        self.spark_config = self.config.with_policy(policy(engine="spark"))
        self.rt = open_circuit(str(self.circuit), self.config)
        for name in ("edges", "people"):  # a missing input folder refuses the step; an empty one is no change
            (self.data / "inbox" / name).mkdir(parents=True, exist_ok=True)

    # ---- inputs ------------------------------------------------------------------------------
    def _row(self, name: str) -> tuple:
        r, k = self.rng, self.keys
        if name == "edges":
            return (r.randrange(k), r.randrange(k))
        return (r.randrange(k), r.randrange(3), r.randrange(-5, 20))

    def write_changes(self) -> None:
        """A new file for one or both inputs: a few inserts and deletes of rows written before."""
        for name in COLUMNS:
            if self.rng.random() < 0.35:
                continue
            change: Counter = Counter()
            live = sorted(r for r, w in self.live[name].items() for _ in range(w))
            for row in self.rng.sample(live, min(len(live), self.rng.randint(0, 3))):
                change[row] -= 1
            for _ in range(self.rng.randint(0, 4)):
                change[self._row(name)] += self.rng.choice((1, 1, 2))
            change = Counter({r: w for r, w in change.items() if w})
            if not change:
                continue
            self.seq += 1
            file = f"c{self.seq:06d}.parquet"
            folder = self.data / "inbox" / name
            folder.mkdir(parents=True, exist_ok=True)
            cols = COLUMNS[name]
            table = pa.table({**{c: pa.array([r[i] for r in change], pa.int64()) for i, c in enumerate(cols)},
                              "_weight": pa.array(list(change.values()), pa.int64())})
            pq.write_table(table, folder / f".{file}")  # an atomic drop: hidden, then renamed
            os.rename(folder / f".{file}", folder / file)
            self.written[name][file] = change
            self.live[name].update(change)
            self.live[name] = +self.live[name]

    # ---- steps -------------------------------------------------------------------------------
    def step_here(self, point: str | None) -> None:
        skip = self.rng.randint(0, 4) if point == "after_state_write" else 0
        try:
            if point:
                failpoints.arm(point, skip)
            rt = self.rt
            if self.spark_share and self.rng.random() < self.spark_share:
                rt = CircuitRuntime(self.spark_config, self.rt.compiled, self.rt.path)
            report = run_step(rt)
            self.engines[report.engine] += 1
            self.events["committed here"] += 1
        except failpoints.InjectedFailure as exc:
            self.events[f"failed here at {exc.name}"] += 1
        finally:
            failpoints.disarm()

    def step_subprocess(self, *, kill_after: float | None, point: str | None) -> None:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        if point:
            env.update({failpoints.ENV_VAR: point, failpoints.KILL_VAR: "1"})
        cmd = [sys.executable, "-m", "spark_jobs.cli.main", "step", str(self.circuit), "--config", str(self.profile),
               "--data-root", str(self.data)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the process and anything it started (a JVM)
            proc.communicate()
            self.events["killed -9"] += 1
            return
        if proc.returncode == 137:
            self.events[f"died at {point}"] += 1
        elif proc.returncode == 0:
            self.events["committed by dbsp step"] += 1
        else:
            raise AssertionError(f"dbsp step failed with exit code {proc.returncode}:\n{err.decode()[-3000:]}")

    def restart(self) -> None:
        self.rt = open_circuit(str(self.circuit), self.config)
        self.events["restarts"] += 1

    def iteration(self, i: int, subprocess_share: float) -> None:
        self.write_changes()
        roll = self.rng.random()
        if roll < subprocess_share:
            kind = self.rng.random()
            if kind < 0.5:
                # a quiet machine steps in about 2.5 s: a kill inside 2 s mostly lands
                self.step_subprocess(kill_after=self.rng.uniform(0.3, 2.0), point=None)
            elif kind < 0.8:
                self.step_subprocess(kill_after=None, point=self.rng.choice(POINTS))
            else:
                self.step_subprocess(kill_after=None, point=None)
            if self.rng.random() < 0.5:
                self.restart()
        elif roll < subprocess_share + 0.35:
            self.step_here(self.rng.choice(POINTS))
        else:
            self.step_here(None)
        if self.rng.random() < 0.05:
            self.restart()

    # ---- checks ------------------------------------------------------------------------------
    def committed_files(self) -> dict[str, list[str]]:
        """Input -> the file names the last manifest records as consumed (each at most once)."""
        m = open_circuit(str(self.circuit), self.config).store.manifest()
        out = {}
        for name in COLUMNS:
            names = [r["name"] for r in (m.consumed(name) if m else [])]
            assert len(names) == len(set(names)), f"input {name}: a file is recorded twice: {names}"
            unknown = set(names) - set(self.written[name])
            assert not unknown, f"input {name}: consumed files never written: {sorted(unknown)}"
            out[name] = names
        return out

    def check(self, where: str) -> None:
        """Every view equals the query over the committed input files."""
        committed = self.committed_files()
        want = oracle({n: [self.written[n][f] for f in files] for n, files in committed.items()})
        rt = open_circuit(str(self.circuit), self.config)
        for view, rows in want.items():
            got = view_rows(rt, view)
            assert got == rows, (f"{where}: view {view} != the query over the committed files "
                                 f"(seed {self.seed})\n only in view: {dict(got - rows)}\n"
                                 f" only in query: {dict(rows - got)}\n events: {dict(self.events)}")
        self.events["checks"] += 1

    def finish(self) -> None:
        """One clean step, then every written file is consumed exactly once and every view is right."""
        self.restart()
        run_step(self.rt)
        committed = self.committed_files()
        for name in COLUMNS:
            assert sorted(committed[name]) == sorted(self.written[name]), \
                f"input {name}: lost files {sorted(set(self.written[name]) - set(committed[name]))}"
        self.check("the end")
        self.check_published()

    def check_published(self) -> None:
        """The published Delta tables hold each view (a bag's rows as copies)."""
        from deltalake import DeltaTable

        rt = open_circuit(str(self.circuit), self.config)
        for view, cols in VIEW_COLUMNS.items():
            table = DeltaTable(str(self.data / "views" / "chaos" / view)).to_pyarrow_table()
            got = Counter(tuple(r[c] for c in cols) for r in table.to_pylist())
            assert got == view_rows(rt, view), f"the published table of {view} differs from the view"


def run(root: Path, steps: int, seed: int, subprocess_share: float = 0.06, check_every: int = 10,
        spark_share: float = 0.0, progress: Callable[[str], None] | None = None) -> Chaos:
    chaos = Chaos(root, seed, spark_share)
    start = time.time()
    for i in range(1, steps + 1):
        chaos.iteration(i, subprocess_share)
        if i % check_every == 0:
            chaos.check(f"iteration {i}")
            if progress:
                progress(f"{i}/{steps} {time.time() - start:.0f}s {dict(chaos.events)} {dict(chaos.engines)}")
    chaos.finish()
    return chaos
