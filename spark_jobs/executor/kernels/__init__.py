"""Kernels of operators that keep both engines' kernels in one module, beside their IR definition.

An operator defined in ``ir/ops/<op>.py`` names its kernels by string (``KERNELS``), so the IR
imports no engine; the built-in operators' kernels are the functions of ``executor/spark/kernels.py``
and ``executor/arrow/kernels.py`` instead. The interface every kernel keeps is ``executor/engine.py``.
"""
