"""Variant B: gather (the change under test); variant A: without it."""
def install(VAR):
    from spark_jobs.runtime.step_engines import SparkSteps
    orig = SparkSteps._all_local
    def _all_local(self):
        got = orig(self)
        print(f"    all_local={got}", flush=True)
        return VAR[0] == "B" and got
    SparkSteps._all_local = _all_local
