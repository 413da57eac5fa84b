"""Layer 1, the circuit spec: load ``circuits/*.yaml`` into typed objects and check them.

``load_circuit`` / ``load_circuit_text`` return a ``CircuitSpec`` or raise ``CircuitError``
listing every problem (file, line, node, what was expected); ``validate_file`` returns the
problems instead; ``output_columns`` gives the columns of every input and node.
"""
from .columns import body_columns, join_layout, output_columns
from .errors import CircuitError, Problem
from .loader import load_circuit, load_circuit_text, validate_file
from .model import CircuitSpec, dependency_order
from .schema import SCHEMA_PATH

__all__ = [
    "SCHEMA_PATH", "CircuitError", "CircuitSpec", "Problem", "body_columns", "dependency_order",
    "join_layout", "load_circuit", "load_circuit_text", "output_columns", "validate_file",
]
