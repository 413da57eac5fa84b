"""Time every Py4J JavaMember call by method name and Python caller (per step, printed by ab.py)."""
import time, collections, sys
import py4j.java_gateway as g
STATS = collections.defaultdict(lambda: [0, 0.0])
CALLERS = collections.defaultdict(lambda: [0, 0.0])
_orig = g.JavaMember.__call__
SKIP = {"toString"}
def _call(self, *args):
    t = time.perf_counter()
    try:
        return _orig(self, *args)
    finally:
        dt = time.perf_counter() - t
        if self.name not in SKIP:
            s = STATS[self.name]; s[0] += 1; s[1] += dt
            f = sys._getframe(1); names = []
            while f is not None and len(names) < 3:
                mod = f.f_globals.get("__name__", "")
                if mod.startswith("spark_jobs"):
                    names.append(f"{mod.rsplit('.',1)[-1]}.{f.f_code.co_name}")
                f = f.f_back
            c = CALLERS[(self.name, " < ".join(names))]; c[0] += 1; c[1] += dt
g.JavaMember.__call__ = _call
def report(label):
    tot = sum(v[1] for v in STATS.values()); n = sum(v[0] for v in STATS.values())
    items = sorted(STATS.items(), key=lambda kv: -kv[1][1])[:12]
    print(f"  py4j {label}: {n} calls {tot:.3f} s: " + ", ".join(f"{k}={v[0]}/{v[1]*1000:.0f}ms" for k, v in items), flush=True)
    for (m, c), v in sorted(CALLERS.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"     {v[1]*1000:7.1f}ms {v[0]:3d} {m:20s} {c}")
    STATS.clear(); CALLERS.clear()
