"""What publishing does with what it cannot write (issue 27): a keyless view holding a row of
weight 2^31 - 1 is not expanded into 2^31 table rows; that view's publish fails with a message
(the step is committed and says the table is behind), it never blocks later steps, and once the
view no longer holds the row the table is rebuilt from the view (``dbsp publish`` or the next
step). ``dbsp show`` renders a timestamp Python cannot hold instead of a traceback."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.cli.render import table_rows
from spark_jobs.publish import publish_views
from spark_jobs.publish.delta import MAX_COPIES
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.policies import config, make_input_folders

CIRCUIT = """\
name: bags
inputs:
  a: {schema: {k: long}, source: {kind: changes, path: inbox/a, format: parquet}}
nodes:
  v: {op: select, input: a, columns: [k]}
outputs: [v]
"""


def _write(root: str, t: int, rows: dict[int, int]) -> None:
    folder = os.path.join(root, "inbox", "a")
    pq.write_table(pa.table({"k": pa.array(list(rows), pa.int64()), "_weight": pa.array(list(rows.values()), pa.int64())}),
                   os.path.join(folder, f"t{t}.parquet"))


def _table_rows(rt) -> list:  # noqa: ANN001
    import deltalake

    uri = next(r.uri for r in publish_views(rt).results)
    return sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("k").to_pylist())


def test_a_huge_bag_is_not_expanded_and_does_not_block_later_steps(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT)
    root = str(tmp_path / "data")
    rt = open_circuit(str(path), config(root, engine="arrow"))
    make_input_folders(rt)
    _write(root, 1, {1: 2**31 - 1, 2: 1})
    report = run_step(rt)  # committed; the view's publish fails with a message, no 16 GiB expansion
    assert rt.committed.last_committed() == 1
    failed = report.published.failed
    assert [f.view for f in failed] == ["v"], report.published.summary()
    assert str(MAX_COPIES) in failed[0].error and "2147483647" in failed[0].error, failed[0].error
    assert "behind" in report.published.summary()

    _write(root, 2, {3: 1})  # a later step still commits; the table stays behind, saying why
    report = run_step(rt)
    assert rt.committed.last_committed() == 2 and [f.view for f in report.published.failed] == ["v"]

    _write(root, 3, {1: -(2**31 - 1)})  # once the view can be written, the table catches up
    report = run_step(rt)
    assert not report.published.failed, report.published.summary()
    assert "rebuilt from the view at 3" in report.published.summary()
    assert _table_rows(rt) == [2, 3]


def test_show_renders_a_time_python_cannot_hold():
    t = pa.table({"ts": pa.array([253402300800 * 10**6], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                  "_weight": pa.array([1], pa.int64())})
    assert table_rows(t, ("ts",)) == [("10000-01-01T00:00:00.000000", 1)]
