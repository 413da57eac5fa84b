"""A sqllogictest runner for ``op: sql`` views (``python -m tests.slt DIR_OR_FILES``, ``make slt``).

``parse.py`` reads the format, ``db.py`` applies the files' CREATE TABLE / INSERT statements,
``runner.py`` turns each query into a view maintained over a stream of changes and checks it
against a batch oracle at every step. ``cases/`` holds the project's own files (CI runs them:
``tests/test_slt.py``); the public corpus is not shipped: point the runner at a copy of it.
"""
