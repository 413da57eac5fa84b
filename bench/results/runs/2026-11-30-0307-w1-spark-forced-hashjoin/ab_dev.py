"""Dev harness: W1 at SF (argv[1]) forced onto Spark; per step: wall, JVM planning phases of the collect, job time."""
import sys, time, os, shutil, json, urllib.request, cProfile, pstats
sys.path.insert(0, os.getcwd())
from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from bench.workloads.w1_tpch import WORKLOAD as wl
from bench.workloads.harness import measure_step
from pyspark.sql.classic.dataframe import DataFrame

sf = float(sys.argv[1]); steps = int(sys.argv[2]); root = sys.argv[3]
prof = len(sys.argv) > 4 and sys.argv[4] == "prof"
shutil.rmtree(root, ignore_errors=True); os.makedirs(root)
cfg = load_config("/work/tmp/spark/spark.yaml")
gen = wl.make_generator(root, sf)
rt = open_circuit(wl.circuit_path, cfg.with_data_root(root))
s = measure_step(rt, lambda: gen.initial().total, "load"); print("load", s.seconds, flush=True)

VAR = ["A"]
import spark_jobs.executor.spark.kernels as _k
_orig_join = _k.jn.join
def _join(left, right, *a, **kw):
    if VAR[0] == "B":
        left = left.hint("shuffle_hash")
    return _orig_join(left, right, *a, **kw)
class _JN:
    def __getattr__(self, n): return getattr(_orig_mod, n)
_orig_mod = _k.jn
_shim = _JN(); _shim.join = _join
_k.jn = _shim
qes = []
orig = DataFrame.toArrow
def toArrow(self):
    t = time.perf_counter(); out = orig(self); dt = time.perf_counter() - t
    ph = self._jdf.queryExecution().tracker().phases()
    d = {k: ph.get(k).get().durationMs() for k in ("analysis", "optimization", "planning") if ph.contains(k)}
    qes.append((round(dt, 3), d))
    open('/work/tmp/spark2/plan_%s.txt' % VAR[0] + '','w').write(self._jdf.queryExecution().toString())
    return out
DataFrame.toArrow = toArrow
sc = rt.spark.sparkContext
app = sc.applicationId; ui = sc.uiWebUrl
def jobs():
    try:
        return json.load(urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/jobs"))
    except Exception as e:
        return []
from datetime import datetime
def dur(j):
    f = "%Y-%m-%dT%H:%M:%S.%f%Z"
    a = datetime.strptime(j["submissionTime"].replace("GMT", "UTC"), f); b = datetime.strptime(j["completionTime"].replace("GMT", "UTC"), f)
    return (b - a).total_seconds()
conf = dict(kv.split("=", 1) for kv in os.environ.get("DEV_CONF", "").split(",") if kv)
res = {"A": [], "B": []}
import resource, subprocess
jpid = int(subprocess.check_output(["pgrep", "-P", str(os.getpid()), "java"]).split()[0])
def jcpu():
    f = open(f"/proc/{jpid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def pcpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
for i in range(steps):
    variant = "B" if (i % 2) else "A"; VAR[0] = variant
    for k, v in conf.items():
        if variant == "B": rt.spark.conf.set(k, v)
        else: rt.spark.conf.unset(k)
    jcpu0 = jcpu(); pcpu0 = pcpu()
    qes.clear()
    pr = cProfile.Profile() if (prof and i == steps - 1) else None
    if pr: pr.enable()
    s = measure_step(rt, lambda: gen.change(1000).total, "step")
    if pr:
        pr.disable(); pr.dump_stats("/work/tmp/spark2/step.prof")
    jc = jcpu() - jcpu0; pc = pcpu() - pcpu0
    res[variant].append(jc)
    print(f"  cpu jvm={jc:.3f} py={pc:.3f}")
    print(f"{variant} step {i}: {s.seconds:.3f} s jobs={s.jobs} engine={s.engine} collect={qes} ", flush=True)
import statistics
for k, v in res.items():
    if v: print(k, "median", round(statistics.median(v[1:] or v), 3), [round(x, 3) for x in v])
VAR[0] = "A"
for k in conf: rt.spark.conf.unset(k)
from bench.workloads.harness import recompute, view_matches
tables = gen.snapshot(os.path.join(root, "snapshot")); out_dir = os.path.join(root, "recompute")
for k in range(2):
    secs, nj, rows = recompute(rt, tables, out_dir); print("recompute", secs, flush=True)
print("correct", view_matches(rt, out_dir, wl.view, wl.float_cols)["ok"])
