"""The Spark engine: every operator's kernel on lazy DataFrames, and what it needs around them.

- ``kernels.py`` (``SparkEngine`` and the built-in operators' kernels), ``loop_kernels.py`` (the
  fixed-point loop with one Spark job per iteration);
- the Z-set library the kernels call: ``zset.py`` (Z-sets as DataFrames), ``linear.py``,
  ``join.py``, ``distinct.py``, ``aggregate.py`` with ``exact_sum.py``, ``stream.py``. These are
  pure functions from Z-set DataFrames to Z-set DataFrames: they never collect or count, they
  only build Spark plans, so a timestep runs as few jobs as its writes need;
- on the driver: ``narrow.py`` (state narrowed to a small change before Spark sees it),
  ``local_relations.py`` (small DataFrames made driver-local in one job), ``session.py`` (the
  SparkSession), ``parse_check.py`` (expressions parsed again by Catalyst before a step),
  ``memory_state.py`` (an in-memory state store for tests).
"""
