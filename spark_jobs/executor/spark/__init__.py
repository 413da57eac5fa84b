"""Operator kernels: pure functions from Z-set DataFrames to Z-set DataFrames, one family per module.

They never collect or count: they only build Spark plans, so a timestep runs as few jobs as its
writes need.
"""
