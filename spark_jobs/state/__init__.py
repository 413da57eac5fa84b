"""Layer 1, the state store: checkpointed Parquet traces with atomic per-timestep manifests.

Below the executor: nothing here imports spark_jobs.ir, .spec or .executor.
"""
from spark_jobs.state.failpoints import InjectedFailure, arm, armed, disarm, failpoint
from spark_jobs.state.lease import Lease, LeaseHeld, LeaseLost
from spark_jobs.state.manifest import FileStat, Manifest, OutputEntry, TraceEntry
from spark_jobs.state.store import (ConcurrentCommit, FingerprintMismatch, StateStore,
                                    TimestepNotRetained, Transaction, TransactionClosed,
                                    view_trace_id)
from spark_jobs.state.trace import WEIGHT, consolidate

__all__ = [
    "StateStore", "Transaction", "Manifest", "TraceEntry", "OutputEntry", "FileStat",
    "FingerprintMismatch", "TimestepNotRetained", "ConcurrentCommit", "TransactionClosed",
    "InjectedFailure", "failpoint", "arm", "armed", "disarm", "view_trace_id", "consolidate",
    "WEIGHT", "Lease", "LeaseHeld", "LeaseLost",
]
