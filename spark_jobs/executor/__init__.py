"""Layer 3, the executor: one timestep of an incremental circuit, on Z-sets, on either engine.

The layout shows the engines:

- shared by both engines: ``evaluate.py`` (the interpreter: walks the circuit, applies each
  node's kernel for the step's engine), ``loop.py`` (the fixed-point loop of a recursive scope,
  over ``LoopKernels``), ``engine.py`` (what a kernel and an engine are: ``Engine``,
  ``StateUpdate``, ``NotLocal``), ``totals.py`` (the running totals' layout and arithmetic),
  ``refusal.py`` (values refused inside a step: ``ValueRefused``), ``bag_check.py`` (no
  integrated weight below zero), ``kernels/`` (operators whose two engines' kernels share one
  module: top-k, window assignment, the stream join's sum);
- ``spark/``: the Spark engine (lazy DataFrames; its Z-set library, session, driver-side helpers);
- ``arrow/``: the in-process Arrow engine (pyarrow tables; imports no pyspark), with
  ``arrow/compiler/``, the compiler of Spark SQL expressions to Arrow compute;
- ``sources/``: input files read into changes (Spark's reader; the Arrow reader is ``arrow/inputs.py``).
"""
