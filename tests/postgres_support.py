"""The PostgreSQL server the source and sink tests share: one pinned local server per test module
(``spark_jobs.local_postgres``), or a skip that says why it could not start. A test module
imports ``server`` to use it (pytest finds fixtures in the module's namespace)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def server():
    from spark_jobs.local_postgres import NoServer, start

    try:
        pg = start()
    except NoServer as exc:
        pytest.skip(f"no PostgreSQL server could start here: {exc}")
    yield pg
    pg.stop()
