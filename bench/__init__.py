"""Benchmark suite of the DBSP-on-Spark engine: `python -m bench.run` (see bench/README.md)."""
