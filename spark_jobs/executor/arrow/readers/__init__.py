"""The in-process readers of input files, one module per format and kind, behind
``executor/arrow/inputs.read_input``: the same values and the same refusals as the Spark readers
of ``executor/sources``."""
