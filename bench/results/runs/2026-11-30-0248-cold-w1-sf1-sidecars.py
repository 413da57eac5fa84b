"""W1 (TPC-H Q3) at SF1: a 1,000-row step in a NEW process, with and without stats sidecars (A/B on one state).

Clones growth's kept SF1 load (hard links), gives its sorted files of >= 8 row groups the sidecar
the in-process writer now writes, then alternately hides/shows all sidecars and runs one step per
new Python process (imports, open, run_step), checking the view against DuckDB after each step."""
import glob, os, subprocess, sys
from pathlib import Path
sys.path.insert(0, "/work/wt/cold")
from bench.floor import _reused, view_check
from bench.lean_tpch import LeanTpch
from spark_jobs.config import PROJECT_ROOT
from spark_jobs.state import stats_sidecar
import pyarrow.parquet as pq

root = Path("/tmp/cold2/w1sf1"); kept = Path("/tmp/growth-keep1/sf1-loaded")
circuit = str(PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml")
gen = LeanTpch(str(root), 1.0)
rt, _ = _reused(gen, circuit, root, kept)
files = glob.glob(f"{root}/_dbsp/**/part-*.parquet", recursive=True)
made = 0
for f in files:
    if pq.read_metadata(f).num_row_groups >= stats_sidecar.MIN_GROUPS and not os.path.exists(stats_sidecar.sidecar_path(f)):
        made += stats_sidecar.write(f)
groups = sum(pq.read_metadata(f).num_row_groups for f in files)
print(f"{len(files)} trace files, {groups} row groups, {made} sidecars written", flush=True)

CHILD = r'''
import time, os, sys, cProfile, pstats, io
t0 = time.perf_counter(); c0 = time.process_time()
sys.path.insert(0, "/work/wt/cold")
from bench.floor import _config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from pathlib import Path
t1 = time.perf_counter()
prof = cProfile.Profile(); prof.enable()
rt = open_circuit(sys.argv[1], _config(Path(sys.argv[2]), True, int(sys.argv[3])))
rep = run_step(rt)
prof.disable()
t2 = time.perf_counter(); c2 = time.process_time()
st = pstats.Stats(prof).stats
foot = sum(v[3] for k, v in st.items() if k[2] == "_footer" and "lookup.py" in k[0])
print(f"RESULT wall {t2-t0:.3f} cpu {c2-c0:.3f} imports {t1-t0:.3f} step {t2-t1:.3f} footers/sidecars {foot:.3f} engine {rep.engine}")
'''
def hide(off: bool) -> None:
    for f in glob.glob(f"{root}/_dbsp/**/_stats-*.arrow" + ("" if off else ".off"), recursive=True):
        os.rename(f, f + ".off" if off else f[:-4])
config_rows = 8 * 2_000_000
for r in range(3):
    for mode in ("off", "on"):
        hide(mode == "off")
        gen.change(1000)
        out = subprocess.run([sys.executable, "-c", CHILD, circuit, str(root), str(config_rows)], capture_output=True, text=True)
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")]
        print(f"sidecars {mode} run {r + 1}: {line[0] if line else out.stderr[-2000:]}  load {os.getloadavg()[0]:.1f}", flush=True)
        print("   view", view_check(rt, gen), flush=True)
hide(False)
