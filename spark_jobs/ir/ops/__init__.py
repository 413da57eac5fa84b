"""The IR operators, one module per operator family; each module registers its ``Operator``s.

``spark_jobs.ir.operator`` imports every module of this package the first time an operator is
looked up, so a new operator needs no edit here: drop its module in this folder
(docs/contributing/adding-an-operator.md lists what it declares).
"""
