"""Can this process read and write a circuit's files itself, with pyarrow?

Why it matters: a small step runs fastest in the process that decides it (the CLI, an Airflow
task), with no Spark job at all, and a step on Spark is cheapest when its small results come back
to that process and pyarrow writes them. Both need the process to reach the input files and the
state. Whether Spark runs locally, on a cluster or behind Spark Connect does not decide that;
where the files are does.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from spark_jobs.state.arrow_fs import is_local, is_object_store

if TYPE_CHECKING:
    from spark_jobs.runtime.circuit import CircuitRuntime


def driver_reach(rt: "CircuitRuntime") -> str | None:
    """Why this process cannot read and write the circuit's state and input files itself (None:
    it can, whatever runs Spark: a local session, a cluster's driver or a Spark Connect client).

    ``execution.driver_access``: ``never`` sends every step to Spark; ``always`` trusts the
    process; ``auto`` accepts a data root on this machine (it exists here) and state on a local
    disk, an object store pyarrow opens, or a Hadoop file system reached through this process's
    own Spark driver (local and cluster profiles; a Connect client has none)."""
    from spark_jobs.runtime.circuit import state_root

    access = rt.config.policy.driver_access
    if access == "never":
        return "the profile sets execution.driver_access: never (the cluster reads and writes the files)"
    if access == "always":
        return None
    classic = rt.config.spark.mode != "connect"
    for what, root in (("data root", rt.config.data_root), ("state root", state_root(rt.config, rt.name))):
        if is_local(root):
            if what == "data root" and not os.path.isdir(root):
                return (f"the {what} {root} is not on this machine: the steps run on Spark (set "
                        f"execution.driver_access: never to say so, or mount it here)")
        elif not is_object_store(root) and not classic:
            return (f"the {what} {root} is reached through Spark's Hadoop file system, which a Spark Connect "
                    f"client does not have (set execution.driver_access: always where libhdfs is installed)")
    return None
