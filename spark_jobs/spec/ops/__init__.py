"""The YAML ops, one module per op or family; each module registers its ``NodeOp``s.

``spark_jobs.spec.node_ops`` imports every module of this package the first time an op is looked
up, so a new op needs no edit here: drop its module in this folder
(docs/contributing/adding-an-operator.md walks through one).
"""
