"""Layer 2, the IR and the incrementalizer: the engine-free operator graph of a circuit
(``graph``), one definition per operator (``operator``, ``ops/``), and ``Q -> Q^Δ``
(``incrementalize``). Imports no engine: ``tests/test_registry.py`` checks it."""
