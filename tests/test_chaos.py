"""The chaos test (tests/chaos.py): a circuit with a recursive node, joins, an aggregate and a
distinct over random streams, with random failpoints inside commits, real ``dbsp step``
subprocesses killed with SIGKILL at random moments, and random restarts. At sampled iterations
and at the end every view equals the query over the input files the manifests say were
committed, no file is recorded twice, none is lost, and the published tables hold the views.

CI runs 200 iterations in-process on Arrow (no JVM). Longer:
``DBSP_CHAOS_STEPS=2000 DBSP_CHAOS_SEED=7 DBSP_CHAOS_SPARK=0.05 pytest tests/test_chaos.py``
(``DBSP_CHAOS_SPARK``: the share of in-process steps forced onto Spark).
"""
from __future__ import annotations

import os

from tests import chaos


def test_chaos(tmp_path):
    steps = int(os.environ.get("DBSP_CHAOS_STEPS", "200"))
    seed = int(os.environ.get("DBSP_CHAOS_SEED", "27"))
    spark_share = float(os.environ.get("DBSP_CHAOS_SPARK", "0"))
    run = chaos.run(tmp_path, steps, seed, subprocess_share=0.04, check_every=20, spark_share=spark_share,
                    progress=print)
    events = run.events
    # the run did what it claims: commits, injected failures, deaths and kills, restarts, checks
    assert events["committed here"] > steps // 3
    assert sum(n for e, n in events.items() if e.startswith("failed here at")) > steps // 10
    # how many kills land before a subprocess ends depends on the machine's speed: at least one
    assert sum(n for e, n in events.items() if e.startswith(("died at", "killed -9"))) >= 1
    assert events["restarts"] >= 2 and events["checks"] >= steps // 20
    print(dict(events), dict(run.engines))
