"""A published table belongs to one circuit (issue 27 item 5): publishing into another circuit's
folder, into or around another table, or next to a folder that differs only in case is refused
at the first publish, naming the owner; paths are compared normalized; two views of one circuit
in one place are refused at validation; ``dbsp reset`` never deletes another circuit's table."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.cli.main import main
from spark_jobs.publish import targets
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text, validate_file
from tests.policies import config

CIRCUIT = """\
name: NAME
inputs:
  t:
    schema: {k: long}
    source: {kind: changes, path: inbox/NAME, format: parquet}
nodes:
  v: {op: filter, input: t, where: "k > 0"}
outputs:
  v: PUBLISH
"""


def _circuit(tmp_path: Path, name: str, publish: str = "{}") -> Path:
    f = tmp_path / f"{name}.yaml"
    f.write_text(CIRCUIT.replace("NAME", name).replace("PUBLISH", publish))
    _parquet(tmp_path / "data" / "inbox" / name / "a.parquet")
    return f


def _parquet(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int64())}), path)


def _step(tmp_path: Path, f: Path):  # noqa: ANN202
    rt = open_circuit(str(f), config(tmp_path / "data", engine="arrow"))
    return rt, run_step(rt).published


def _views(tmp_path: Path) -> Path:
    return tmp_path / "data" / "views"


@pytest.mark.parametrize("a, b", [("same/x", "same/x/"), ("victim//v", "victim/v"), ("box/a", "BOX/a"),
                                  ("box", "box/inner")])
def test_two_views_of_one_circuit_in_one_place_are_refused_at_validation(tmp_path, a, b):
    text = f"""\
name: c
inputs:
  t: {{schema: {{k: long}}, source: {{kind: changes, path: inbox/t, format: parquet}}}}
nodes:
  v1: {{op: filter, input: t, where: "k > 0"}}
  v2: {{op: filter, input: t, where: "k > 1"}}
outputs:
  v1: {{publish: {{path: "{a}"}}}}
  v2: {{publish: {{path: "{b}"}}}}
"""
    f = tmp_path / "c.yaml"
    f.write_text(text)
    (problem,) = validate_file(f)
    assert problem.node == "v2" and "each view needs a place of its own" in problem.message, problem
    assert ("the same place as" in problem.message) == (b != "box/inner")


def test_paths_are_normalized(tmp_path):
    spec = load_circuit_text(CIRCUIT.replace("NAME", "c").replace("PUBLISH", '{publish: {path: "victim//v/"}}'))
    (target,) = targets(config(tmp_path), spec)
    assert target.uri == str(tmp_path / "views" / "victim" / "v")


def test_publishing_into_another_circuits_folder_is_refused_naming_it(tmp_path, capsys):
    victim = _circuit(tmp_path, "victim")
    _step(tmp_path, victim)
    squatter = _circuit(tmp_path, "squat", '{publish: {path: "victim/w"}}')
    _, published = _step(tmp_path, squatter)
    (result,) = published.failed
    assert "is the folder of circuit 'victim'" in result.error
    assert not (_views(tmp_path) / "victim" / "w").exists()
    # the CLI says so and exits 1 (the step is committed; publishing is what was refused)
    _parquet(tmp_path / "data" / "inbox" / "squat" / "b.parquet")
    profile = tmp_path / "p.yaml"
    profile.write_text(f"data_root: {tmp_path / 'data'}\nexecution: {{engine: arrow}}\n")
    assert main(["step", str(squatter), "--config", str(profile)]) == 1
    out = capsys.readouterr()
    assert "is the folder of circuit 'victim'" in out.out + out.err


def test_a_place_holding_another_table_or_inside_one_is_refused(tmp_path):
    owner = _circuit(tmp_path, "owner", '{publish: {path: "shared/v"}}')
    _step(tmp_path, owner)
    around = _circuit(tmp_path, "around", '{publish: {path: "shared"}}')
    (result,) = _step(tmp_path, around)[1].failed
    assert "already holds the table of view 'v' of circuit 'owner'" in result.error, result.error
    inside = _circuit(tmp_path, "inside", '{publish: {path: "shared/v/inner"}}')
    (result,) = _step(tmp_path, inside)[1].failed
    assert "holds the table of view 'v' of circuit 'owner': view 'v' of circuit 'inside' may not publish" in result.error
    twin = _circuit(tmp_path, "twin", '{publish: {path: "SHARED/x"}}')
    (result,) = _step(tmp_path, twin)[1].failed
    assert "differs only in case" in result.error
    assert sorted(p.name for p in _views(tmp_path).iterdir()) == ["shared"]


def test_the_owner_of_a_squatted_place_is_named(tmp_path):
    """A circuit that publishes first to a place nobody claimed owns it: the next one is refused
    with the owner's name (and keeps failing until its publish.path is changed)."""
    first = _circuit(tmp_path, "first", '{publish: {path: "common/v"}}')
    _step(tmp_path, first)
    second = _circuit(tmp_path, "second", '{publish: {path: "common/v"}}')
    (result,) = _step(tmp_path, second)[1].failed
    assert "holds the table of view 'v' of circuit 'first', not the table of view 'v' of circuit 'second'" \
        in result.error


def test_reset_never_deletes_another_circuits_table(tmp_path, capsys):
    box = _circuit(tmp_path, "box", '{publish: {path: "box_place"}}')
    rt, _ = _step(tmp_path, box)
    table = _views(tmp_path) / "box_place"
    assert DeltaTable(str(table)).version() >= 1
    # a table nested inside box's folder (made before places were checked, or by hand)
    write_deltalake(str(table / "inner"), pa.table({"x": [1]}))
    code = main(["reset", str(box), "--data-root", str(tmp_path / "data"), "--yes"])
    err = capsys.readouterr().err
    assert code == 1 and "refusing to reset box" in err and "nothing was deleted" in err, err
    assert DeltaTable(str(table / "inner")).to_pyarrow_table().num_rows == 1
    assert rt.store.manifest() is not None  # the state is untouched too
    # another circuit's table at box's place: reset of box leaves it alone
    (table / "inner").rename(tmp_path / "inner")
    assert main(["reset", str(box), "--data-root", str(tmp_path / "data"), "--yes"]) == 0
    assert not table.exists()
    victim = _circuit(tmp_path, "victim")
    _step(tmp_path, victim)
    thief = _circuit(tmp_path, "thief", '{publish: {path: "victim/v"}}')
    assert main(["reset", str(thief), "--data-root", str(tmp_path / "data"), "--yes"]) == 0
    assert DeltaTable(str(_views(tmp_path) / "victim" / "v")).to_pyarrow_table().num_rows == 2


def test_reset_refuses_a_state_folder_that_is_a_link(tmp_path, capsys):
    """A circuit's state folder made a link to another circuit's: reset deletes nothing."""
    import os

    victim = _circuit(tmp_path, "victim")
    _step(tmp_path, victim)
    other = _circuit(tmp_path, "other")
    state = tmp_path / "data" / "_dbsp"
    os.symlink(state / "victim", state / "other")
    code = main(["reset", str(other), "--data-root", str(tmp_path / "data"), "--yes"])
    err = capsys.readouterr().err
    assert code == 1 and "is a symbolic link" in err and "Traceback" not in err, err
    assert (state / "victim" / "manifests").is_dir()


def test_the_leftover_of_an_interrupted_create_is_not_a_squatter(tmp_path):
    """A create killed before its first commit leaves an empty _delta_log: the view's next publish
    creates its table there (it does not refuse its own leftover forever)."""
    owner = _circuit(tmp_path, "owner")
    (_views(tmp_path) / "owner" / "v" / "_delta_log").mkdir(parents=True)
    _, published = _step(tmp_path, owner)
    assert not published.failed and published.results[0].after == 1
