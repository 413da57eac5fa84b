"""The in-process Arrow engine: every operator's kernel on pyarrow Tables, no Spark job.

The counterpart of ``executor/spark/``. A table here is a Z-set like a DataFrame: data columns
plus the int64 ``_weight`` column. No module here imports pyspark or ``executor/spark/``.

- ``kernels.py`` (``ArrowEngine`` and the built-in operators' kernels), ``loop_kernels.py`` (the
  fixed-point loop in this process);
- its Z-set library: ``zsets.py``, ``distinct.py``, ``aggregate.py``, ``expressions.py``
  (``select``/``filter`` expressions, through ``compiler/``), ``lateness.py``;
- ``inputs.py``: a step's input files read with pyarrow, with the checks Spark's reader applies;
- ``compiler/``: Spark SQL row expressions compiled to Arrow compute, with Spark's types and ANSI
  errors (its own package: a separate job, tested against Spark on random data).
"""
