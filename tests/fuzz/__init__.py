"""Differential fuzz test of the whole engine (``tests/test_fuzz.py``).

- ``sql``: the small Spark SQL expression language the fuzzer writes, with a parser, static
  types and a Python evaluator (SQL NULL semantics): the reference's expressions.
- ``reference``: a from-scratch evaluator of a loaded circuit over Python bags (Z-sets).
- ``generate``: random circuits (every YAML op) and random change streams.
- ``engine``: one case through ``run_step`` with real input files and the Parquet state store.
- ``check``: compare the two at every step; minimal reproductions (``shrink``).
"""
