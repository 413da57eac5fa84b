"""Symbolic links in input folders: each real folder and file is listed once (a loop, a link to a
folder listed already, a hard link), the listing is linear in the files whatever the links, a link
into another input's folder is refused, and input retention and ``dbsp gc`` never delete through a
link. Steps run on both engines (Spark and the in-process Arrow path)."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.cli.main import main
from spark_jobs.executor.sources import InputRefused, data_files, pending_files
from spark_jobs.executor.sources import walk as walk_module
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text
from tests import oracle
from tests.policies import config

ENGINES = ["spark", "arrow"]

ONE = """\
name: NAME
inputs:
  t:
    schema: {k: long}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
  n: {op: aggregate, input: t, group_by: [], aggregates: {c: "count(*)"}}
outputs: [n]
RETENTION
"""

TWO = """\
name: two
inputs:
  t:
    schema: {k: long}
    source: {kind: changes, path: inbox/t, format: parquet}
  u:
    schema: {k: long}
    source: {kind: changes, path: inbox/u, format: parquet}
nodes:
  both: {op: union_all, inputs: [t, u]}
outputs: [both]
"""


def _parquet(path: Path, keys: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array(keys, pa.int64())}), path)


def _circuit(tmp_path: Path, name: str = "links", retention: str = "") -> Path:
    f = tmp_path / f"{name}.yaml"
    f.write_text(ONE.replace("NAME", name).replace("RETENTION", retention))
    return f


def _count(rt) -> int:  # noqa: ANN001
    rows = oracle.view_counter(rt, "n")
    return next(iter(rows))[0] if rows else 0


def _spec(text: str = ONE.replace("NAME", "x").replace("RETENTION", ""), name: str = "t"):  # noqa: ANN202
    return load_circuit_text(text).inputs[name]


def test_a_loop_and_a_link_to_the_folder_list_each_file_once(tmp_path):
    root = tmp_path / "data"
    t = root / "inbox" / "t"
    _parquet(t / "a.parquet", [1])
    _parquet(t / "sub" / "b.parquet", [2])
    os.symlink(".", t / "loop")  # 41 copies of each file before: loop/loop/.../a.parquet
    os.symlink("../t", t / "up")  # with the loop: an exponential listing before
    os.symlink("sub", t / "again")  # a second name of a folder listed already
    os.symlink("a.parquet", t / "alias.parquet")  # a second name of a file
    os.link(t / "a.parquet", t / "hard.parquet")  # a hard link: the same file
    files = data_files(str(t))
    assert [f.name for f in files] == ["a.parquet", "sub/b.parquet"]
    assert not any(f.linked for f in files)


def test_the_listing_reads_each_real_folder_once(tmp_path, monkeypatch):
    """A chain of 12 folders, each with links back to itself, its parent and the top: before,
    pyarrow's listing followed every link (3^12 paths); now one directory read per real folder."""
    t = tmp_path / "data" / "inbox" / "t"
    folder = t
    for depth in range(12):
        _parquet(folder / f"f{depth}.parquet", [depth])
        os.symlink(".", folder / "self")
        os.symlink("..", folder / "parent")
        os.symlink(str(t), folder / "top")
        folder = folder / "d"
    reads: list[str] = []
    real_scandir = os.scandir

    def counting(path):  # noqa: ANN001, ANN202
        reads.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(walk_module.os, "scandir", counting)
    files = data_files(str(t), [str(tmp_path)])
    assert len(files) == 12 and len({f.identity for f in files}) == 12
    assert len(reads) == 13  # 12 folders with files + the empty last one


@pytest.mark.parametrize("engine", ENGINES)
def test_a_step_over_a_looping_folder_counts_each_row_once(spark, tmp_path, engine):
    root = tmp_path / "data"
    t = root / "inbox" / "t"
    _parquet(t / "a.parquet", [1])
    os.symlink(".", t / "loop")
    os.symlink("../t", t / "up")
    rt = open_circuit(str(_circuit(tmp_path)), config(root, engine=engine))
    report = run_step(rt)
    assert report.engine == engine, report.engine_reason
    assert _count(rt) == 1
    assert any("symbolic link(s) not followed" in n for n in report.notes), report.notes
    consumed = rt.store.manifest().consumed("t")
    assert [r["name"] for r in consumed] == ["a.parquet"]
    _parquet(t / "b.parquet", [2])
    run_step(rt)
    assert _count(rt) == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_a_link_into_another_inputs_folder_is_refused(spark, tmp_path, engine):
    root = tmp_path / "data"
    _parquet(root / "inbox" / "t" / "a.parquet", [1])
    _parquet(root / "inbox" / "u" / "u1.parquet", [2])
    os.symlink("../u", root / "inbox" / "t" / "shared")
    f = tmp_path / "two.yaml"
    f.write_text(TWO)
    rt = open_circuit(str(f), config(root, engine=engine))
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    ((path, why),) = err.value.problems
    assert path == str(root / "inbox" / "t" / "shared" / "u1.parquet") and "of input u too" in why
    assert rt.store.manifest() is None
    os.remove(root / "inbox" / "t" / "shared")
    assert run_step(rt).engine == engine
    assert oracle.view_counter(rt, "both") == Counter({(1,): 1, (2,): 1})


def test_dbsp_step_names_the_other_input_with_exit_code_2(spark, tmp_path, capsys):
    root = tmp_path / "data"
    _parquet(root / "inbox" / "u" / "u1.parquet", [2])
    (root / "inbox" / "t").mkdir(parents=True)
    os.symlink("../u", root / "inbox" / "t" / "shared")
    f = tmp_path / "two.yaml"
    f.write_text(TWO)
    assert main(["step", str(f), "--data-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "input refused" in err and "of input u too" in err and "Traceback" not in err, err
    assert not list((root / "_dbsp").rglob("manifests/*.json"))


def test_nested_input_folders_are_refused_too(tmp_path):
    from spark_jobs.runtime.inputs import scan_inputs

    root = tmp_path / "data"
    _parquet(root / "inbox" / "t" / "u" / "x.parquet", [1])
    spec = load_circuit_text(TWO.replace("path: inbox/u", "path: inbox/t/u"))
    with pytest.raises(InputRefused) as err:
        scan_inputs(spec.inputs, str(root), None)
    assert err.value.problems == [(str(root / "inbox" / "t" / "u" / "x.parquet"),
                                   err.value.problems[0][1])]
    assert "input t too" in err.value.problems[0][1]


def test_a_link_inside_a_followed_folder_that_leaves_the_root_is_refused(tmp_path):
    """confine checked only links below the folder itself; a link followed to elsewhere in the
    data root can hold a link out of it."""
    root, outside = tmp_path / "data", tmp_path / "secret"
    _parquet(outside / "s.parquet", [9])
    _parquet(root / "landing" / "ok.parquet", [1])
    os.symlink(outside, root / "landing" / "out")
    (root / "inbox" / "t").mkdir(parents=True)
    os.symlink(root / "landing", root / "inbox" / "t" / "land")
    with pytest.raises(InputRefused) as err:
        pending_files(_spec(), str(root), [])
    assert err.value.problems[0][0] == str(root / "inbox" / "t" / "land" / "out")
    assert "outside the data root" in err.value.problems[0][1]


@pytest.mark.parametrize("engine", ENGINES)
def test_retention_never_deletes_through_a_link(spark, tmp_path, engine):
    """Issue 27 item 3: circuit A's folder holds a link to circuit B's folder (outside A's input
    folders, so it is read, once, as A's); A's input retention removes A's own consumed files and
    never B's file, which B has not consumed yet."""
    root = tmp_path / "data"
    a_dir, b_dir = root / "inbox" / "t", root / "inbox" / "b"
    _parquet(b_dir / "u1.parquet", [100])
    _parquet(a_dir / "a1.parquet", [1])
    os.symlink("../b", a_dir / "shared")
    rt_a = open_circuit(str(_circuit(tmp_path, "a", 'settings: {retention: {inputs: "1 timesteps"}}')),
                        config(root, engine=engine))
    for t in range(2, 5):
        _parquet(a_dir / f"a{t}.parquet", [t])
        report = run_step(rt_a)
        assert report.engine == engine, report.engine_reason
    assert _count(rt_a) == 5  # a1..a4 and u1, each once
    consumed = {r["name"] for r in rt_a.store.manifest().consumed("t")}
    assert "shared/u1.parquet" in consumed
    assert (b_dir / "u1.parquet").exists()  # consumed by A through the link, never removed by A
    assert sorted(os.listdir(a_dir)) == ["a4.parquet", "shared"]  # A's own old files went


def test_retention_keeps_a_file_that_is_not_the_one_consumed(spark, tmp_path):
    """A consumed name whose file was replaced (another size or time) is not the consumed file:
    retention leaves it (the step refuses it as changed, naming it)."""
    from spark_jobs.runtime.retention import prune_inputs
    from spark_jobs.spec.time import Retention

    root = tmp_path / "data"
    t = root / "inbox" / "t"
    _parquet(t / "a1.parquet", [1])
    rt = open_circuit(str(_circuit(tmp_path)), config(root, engine="arrow"))
    run_step(rt)
    _parquet(t / "a2.parquet", [2])
    run_step(rt)
    _parquet(t / "a1.parquet", [1, 1, 1])  # replaced under its consumed name
    found = prune_inputs(rt, rt.store, Retention(timesteps=1), now=__import__("datetime").datetime.now())
    assert found == {}
    assert (t / "a1.parquet").exists()


def test_gc_never_deletes_a_store_folder_reached_through_a_link(spark, tmp_path):
    """A state root whose view-delta or trace folder is a symbolic link (to another circuit's
    folder): retention and cleanup leave the link's target alone."""
    from spark_jobs.runtime.retention import apply_retention

    root = tmp_path / "data"
    _parquet(root / "inbox" / "t" / "a1.parquet", [1])
    rt = open_circuit(str(_circuit(tmp_path, "g", 'settings: {retention: {view_deltas: "1 timesteps"}}')),
                      config(root, engine="arrow"))
    run_step(rt)
    victim = tmp_path / "victim"
    (victim / "t1-0000").mkdir(parents=True)
    (victim / "t1-0000" / "part.parquet").write_bytes(b"theirs")
    outputs = Path(rt.store.layout.abs("outputs"))
    os.symlink(victim, outputs / "stolen")
    traces = Path(rt.store.layout.abs("traces"))
    os.symlink(victim, traces / "stolen")
    for t in range(2, 5):
        _parquet(root / "inbox" / "t" / f"a{t}.parquet", [t])
        run_step(rt)
    apply_retention(rt)
    rt.store.recover()
    assert (victim / "t1-0000" / "part.parquet").read_bytes() == b"theirs"
