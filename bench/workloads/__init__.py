"""Benchmark workloads: W1 (TPC-H Q3- and Q10-style join + aggregate), W2 (distinct/antijoin/min-max on
Zipf keys), W4 (TPC-H Q13 as an SQL node: a left outer join) and the identity circuit (the floor)."""
from __future__ import annotations

from bench.workloads import identity, w1_tpch, w2_zipf, w4_sql
from bench.workloads.base import Size, Workload

WORKLOADS: dict[str, Workload] = {w.key: w for w in (w1_tpch.WORKLOAD, w1_tpch.WORKLOAD_Q10, w2_zipf.WORKLOAD,
                                                     w4_sql.WORKLOAD, identity.WORKLOAD)}

__all__ = ["WORKLOADS", "Size", "Workload"]
