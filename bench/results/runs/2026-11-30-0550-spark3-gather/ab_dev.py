"""Dev A/B: W1 at SF argv[1] forced onto Spark, alternating variants step by step.
Per step: wall, toArrow s, Catalyst phases, JVM CPU, stages/tasks of the step's jobs, exchanges in the plan."""
import sys, time, os, shutil, statistics, resource, subprocess
sys.path.insert(0, os.getcwd())
from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import open_circuit
from bench.workloads.w1_tpch import WORKLOAD as wl
from bench.workloads.harness import measure_step, recompute, view_matches
from pyspark.sql.classic.dataframe import DataFrame
import bench.workloads.harness as H
from contextlib import contextmanager
LASTJOBS = []
_jg = H.job_group
@contextmanager
def _job_group(spark, label):
    with _jg(spark, label) as jobs:
        yield jobs
    LASTJOBS.append(jobs)
H.job_group = _job_group

sf = float(sys.argv[1]); steps = int(sys.argv[2]); root = sys.argv[3]
variants = sys.argv[4].split(",") if len(sys.argv) > 4 else ["A", "B"]
shutil.rmtree(root, ignore_errors=True); os.makedirs(root)
cfg = load_config("/work/tmp/spark3/spark.yaml")
gen = wl.make_generator(root, sf)
rt = open_circuit(wl.circuit_path, cfg.with_data_root(root))
s = measure_step(rt, lambda: gen.initial().total, "load"); print("load", round(s.seconds, 2), flush=True)

VAR = ["A"]
import patches  # noqa: variants live there
patches.install(VAR)
import patches_py4j; patches_py4j.report = lambda label: None

qes = []
orig = DataFrame.toArrow
def toArrow(self):
    t = time.perf_counter(); out = orig(self); dt = time.perf_counter() - t
    qe = self._jdf.queryExecution()
    ph = qe.tracker().phases()
    d = {k[:3]: ph.get(k).get().durationMs() for k in ("analysis", "optimization", "planning") if ph.contains(k)}
    plan = qe.executedPlan().toString()
    qes.append((round(dt, 3), d, plan.count("Exchange"), plan.count("WholeStageCodegen") + plan.count("*(")))
    open(f"/work/tmp/spark3/plan_{VAR[0]}.txt", "w").write(qe.toString())
    return out
DataFrame.toArrow = toArrow
sc = rt.spark.sparkContext
st = sc.statusTracker()
jpid = int(subprocess.check_output(["pgrep", "-P", str(os.getpid()), "java"]).split()[0])
def jcpu():
    f = open(f"/proc/{jpid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def pcpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
JFR = os.environ.get("JFR")
if JFR:
    subprocess.run(["jcmd", str(jpid), "JFR.start", "name=ab", "settings=profile", f"filename={JFR}"], check=True, capture_output=True)
res = {v: [] for v in variants}; wall = {v: [] for v in variants}; coll = {v: [] for v in variants}
patches_py4j.STATS.clear()
for i in range(steps):
    variant = variants[i % len(variants)]; VAR[0] = variant
    j0, p0 = jcpu(), pcpu(); qes.clear()
    s = measure_step(rt, lambda: gen.change(1000).total, "step")
    jc, pc = jcpu() - j0, pcpu() - p0
    stages = []
    for jid in LASTJOBS[-1].ids:
        info = st.getJobInfo(jid)
        stages += [st.getStageInfo(x).numTasks for x in info.stageIds] if info else []
    patches_py4j.report(variant)
    res[variant].append(jc); wall[variant].append(s.seconds); coll[variant].append(qes[0][0] if qes else 0)
    print(f"{variant} step {i}: wall={s.seconds:.3f} jobs={s.jobs} engine={s.engine} jvm={jc:.3f} py={pc:.3f} "
          f"collect={qes} stages={stages} load={os.getloadavg()[0]:.1f}", flush=True)
if JFR:
    subprocess.run(["jcmd", str(jpid), "JFR.stop", "name=ab"], check=True, capture_output=True)
for v in variants:
    k = lambda xs: round(statistics.median(xs[1:] or xs), 3)
    print(v, "median jvm", k(res[v]), "wall", k(wall[v]), "toArrow", k(coll[v]), [round(x, 2) for x in wall[v]])
VAR[0] = "A"
tables = gen.snapshot(os.path.join(root, "snapshot")); out_dir = os.path.join(root, "recompute")
secs, nj, rows = recompute(rt, tables, out_dir); print("recompute", round(secs, 2), flush=True)
print("correct", view_matches(rt, out_dir, wl.view, wl.float_cols)["ok"])
