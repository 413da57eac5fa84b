"""Input paths stay inside the data root: '..' and outside absolute paths are refused at
validation, symbolic links that leave the data root when a step opens the folder."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.cli.main import main
from spark_jobs.config import load_config
from spark_jobs.executor.sources import InputRefused, pending_files, resolve_path
from spark_jobs.spec import load_circuit_text, validate_file
from spark_jobs.spec.model import Source

CIRCUIT = """\
name: confined
inputs:
  t:
    schema: {k: long}
    source: {kind: changes, path: PATH, format: parquet}
nodes:
  f: {op: filter, input: t, where: "k > 0"}
outputs: [f]
"""


def circuit(path: str) -> str:
    return CIRCUIT.replace("PATH", path)


@pytest.mark.parametrize("path, fragment", [
    ("../../x", "has a '..' segment"),
    ("inbox/../../x", "has a '..' segment"),
    ("inbox/..", "has a '..' segment"),
    ("/etc", "is outside the data root"),
    ("file:///etc", "is outside the data root"),
    ("s3a://bucket/x", "is outside the data root"),
])
def test_validation_refuses_paths_that_leave_the_data_root(tmp_path, path, fragment):
    f = tmp_path / "c.yaml"
    f.write_text(circuit(path))
    (problem,) = validate_file(f)
    assert (problem.line, problem.node) == (5, "t") and fragment in problem.message
    assert "inputs.allowed_roots" in problem.message or ".." in problem.message


def test_allowed_roots_let_absolute_paths_in(tmp_path):
    assert load_circuit_text(circuit("/mnt/shared/orders"), allowed_roots=["/mnt/shared"])
    assert load_circuit_text(circuit("s3a://bucket/in/x"), allowed_roots=["s3a://bucket/in"])
    with pytest.raises(Exception, match="outside the data root"):
        load_circuit_text(circuit("/mnt/sharedother/x"), allowed_roots=["/mnt/shared"])  # whole segments
    with pytest.raises(Exception, match="'..' segment"):
        load_circuit_text(circuit("/mnt/shared/../etc"), allowed_roots=["/mnt/shared"])


def test_the_profile_key_reaches_dbsp_validate(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(circuit(str(tmp_path / "outside")))
    assert main(["validate", str(f)]) == 1
    assert "outside the data root" in capsys.readouterr().out
    profile = tmp_path / "p.yaml"
    profile.write_text(f"data_root: {tmp_path / 'data'}\ninputs:\n  allowed_roots: [{tmp_path}]\n")
    assert load_config(str(profile)).allowed_input_roots == (str(tmp_path),)
    assert main(["validate", str(f), "--config", str(profile)]) == 0


def _parquet(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int64())}), path)


def _spec(path: str):
    return load_circuit_text(circuit(path)).inputs["t"]


def test_a_symlinked_folder_leading_outside_is_refused_when_the_step_lists_it(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "secret"
    _parquet(outside / "s.parquet")
    (root / "inbox").mkdir(parents=True)
    os.symlink(outside, root / "inbox" / "t")
    with pytest.raises(InputRefused) as err:
        pending_files(_spec("inbox/t"), str(root), [])
    ((path, reason),) = err.value.problems
    assert path == str(root / "inbox" / "t") and f"resolves to {outside}" in reason
    assert "outside the data root" in reason
    # the same folder is fine once the profile allows it
    assert [f.name for f in pending_files(_spec("inbox/t"), str(root), [], [str(outside)])] == ["s.parquet"]


def test_a_symlinked_file_or_subfolder_leading_outside_is_refused(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "secret"
    _parquet(outside / "s.parquet")
    _parquet(root / "inbox" / "t" / "ok.parquet")
    link = root / "inbox" / "t" / "link.parquet"
    os.symlink(outside / "s.parquet", link)
    with pytest.raises(InputRefused) as err:
        pending_files(_spec("inbox/t"), str(root), [])
    assert err.value.problems[0][0] == str(link)
    link.unlink()
    os.symlink(outside, root / "inbox" / "t" / "sub")
    with pytest.raises(InputRefused, match="outside the data root"):
        pending_files(_spec("inbox/t"), str(root), [])


def test_symlinks_inside_the_data_root_are_fine(tmp_path):
    root = tmp_path / "data"
    _parquet(root / "landing" / "a.parquet")
    (root / "inbox").mkdir(parents=True)
    os.symlink(root / "landing", root / "inbox" / "t")
    os.symlink(root / "landing" / "a.parquet", root / "landing" / "b.parquet")
    os.symlink(root / "landing" / "a.parquet", root / "c.parquet")
    os.symlink(root / "c.parquet", root / "landing" / "d.parquet")
    # b.parquet is a second name of a.parquet: each real file is listed once (test_input_links.py);
    # d.parquet leads (through c.parquet) to the same file
    assert [f.name for f in pending_files(_spec("inbox/t"), str(root), [])] == ["a.parquet"]
    _parquet(root / "elsewhere" / "e.parquet")
    os.symlink(root / "elsewhere" / "e.parquet", root / "landing" / "e.parquet")
    listed = pending_files(_spec("inbox/t"), str(root), [])
    assert [(f.name, f.linked) for f in listed] == [("a.parquet", False), ("e.parquet", True)]
    # a data root that is itself reached through a link is compared by its real path
    os.symlink(root, tmp_path / "alias")
    assert len(pending_files(_spec("inbox/t"), str(tmp_path / "alias"), [])) == 2


def test_hadoop_uri_roots_join_relative_paths_and_refuse_dotdot():
    assert resolve_path(Source("changes", "inbox/t"), "hdfs://nn:8020/dbsp") == "hdfs://nn:8020/dbsp/inbox/t"
    with pytest.raises(InputRefused, match="'..' segment"):
        resolve_path(Source("changes", "inbox/../../t"), "s3a://bucket/root")
    with pytest.raises(InputRefused, match="outside the data root"):
        resolve_path(Source("changes", "s3a://other/x"), "s3a://bucket/root")
    assert resolve_path(Source("changes", "s3a://other/x"), "s3a://bucket/root", ["s3a://other"]) == "s3a://other/x"


def test_dbsp_step_refuses_with_exit_code_2_and_commits_nothing(spark, tmp_path, capsys):
    root, outside = tmp_path / "data", tmp_path / "secret"
    _parquet(outside / "s.parquet")
    (root / "inbox").mkdir(parents=True)
    os.symlink(outside, root / "inbox" / "t")
    f = tmp_path / "c.yaml"
    f.write_text(circuit("inbox/t"))
    assert main(["step", str(f), "--data-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "input refused" in err and "outside the data root" in err and "Traceback" not in err
    assert not list((root / "_dbsp").rglob("manifests/*.json"))
