"""The floor: read a change, write it out. What every step costs before any operator works."""
from __future__ import annotations

from bench.generators import IdentityGenerator
from bench.workloads.base import Size, Workload

WORKLOAD = Workload(
    key="identity",
    title="Identity (floor)",
    circuit="identity.yaml",
    view="copy",
    float_cols=(),
    make_generator=lambda root, n: IdentityGenerator(root, int(n)),
    sizes=(Size("n100k", 100_000),),
    smoke_sizes=(Size("n1k", 1_000),),
    size_help="rows in the initial load",
)
