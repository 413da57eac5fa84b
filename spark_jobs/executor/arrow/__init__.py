"""Z-set kernels on pyarrow Tables: the in-process engine's library (the counterpart of
``executor/operators/`` for Spark). A table here is a Z-set like a DataFrame: data columns plus
the int64 ``_weight`` column. Nothing here imports pyspark.
"""
