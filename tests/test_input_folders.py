"""Nothing silent about inputs: a folder that does not exist fails a step (exit code 2, naming the
input and the path) and `dbsp validate --data-root`; an empty folder is "no changes"; two
circuits that read one folder differently get a warning from `dbsp validate`."""
from __future__ import annotations

import os
from collections import Counter

import pytest

from spark_jobs.cli.main import main
from spark_jobs.executor.sources.checks import InputRefused
from spark_jobs.runtime.input_folders import missing_folders
from spark_jobs.runtime.inputs import choose_inputs, refuse_missing_folders
from spark_jobs.spec import load_circuit, load_circuit_text
from spark_jobs.spec.shared_inputs import shared_folder_warnings
from tests.engines import write_change

CIRCUIT = """\
name: folders
inputs:
  orders:
    schema: {order_id: long, amount: double}
    source: {kind: changes, path: shop/inbox/orders, format: parquet}
  customers:
    schema: {customer_id: long, region: string}
    source: {kind: snapshots, path: shop/snapshots/customers, format: csv}
nodes:
  big: {op: filter, input: orders, where: "amount > 10"}
outputs: [big]
"""


def _write(tmp_path, text: str = CIRCUIT, name: str = "folders.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_missing_folder_is_named_with_a_close_existing_one(tmp_path):
    root = tmp_path / "data"
    (root / "shop" / "inbox" / "orders").mkdir(parents=True)
    spec = load_circuit_text(CIRCUIT.replace("shop/inbox/orders", "shop/inbox/ordrs"))
    missing = {m.input.name: m for m in missing_folders(spec.inputs, str(root))}
    assert set(missing) == {"orders", "customers"}
    assert missing["orders"].suggestion == "shop/inbox/orders"
    assert missing["orders"].folder == str(root / "shop" / "inbox" / "ordrs")
    assert "input 'orders' reads folder 'shop/inbox/ordrs', which does not exist (did you mean " \
           "'shop/inbox/orders'?)" in missing["orders"].reason()
    assert missing["customers"].suggestion == ""


def test_a_missing_folder_refuses_the_step_and_an_empty_one_is_no_changes(tmp_path):
    root = tmp_path / "data"
    spec = load_circuit_text(CIRCUIT)
    (root / "shop" / "inbox" / "orders").mkdir(parents=True)
    for full_refresh in (False, True):
        with pytest.raises(InputRefused) as refused:
            choose_inputs(spec.inputs, str(root), None, full_refresh=full_refresh)
        assert refused.value.input_name == "customers" and refused.value.exit_code == 2
        [(path, reason)] = refused.value.problems
        assert path == str(root / "shop" / "snapshots" / "customers")
        assert reason.startswith("input 'customers' reads folder 'shop/snapshots/customers', which does not exist")
    (root / "shop" / "snapshots" / "customers").mkdir(parents=True)
    chosen = choose_inputs(spec.inputs, str(root), None)  # both empty: no changes, nothing to say
    assert chosen.files == {"orders": [], "customers": []} and chosen.notes() == []
    refuse_missing_folders(spec.inputs, str(root))


def test_dbsp_step_refuses_a_missing_input_folder_with_exit_code_2(tmp_path, capsys):
    root = tmp_path / "data"
    path = _write(tmp_path, CIRCUIT.replace("shop/inbox/orders", "shop/inbox/ordrs"))
    write_change(str(root / "shop"), "orders", 1, {"order_id": "long", "amount": "double"},
                 Counter({(1, 20.0): 1}))
    (root / "shop" / "snapshots" / "customers").mkdir(parents=True)
    assert main(["step", path, "--data-root", str(root)]) == 2
    err = capsys.readouterr().err
    said = "input 'orders' reads folder 'shop/inbox/ordrs', which does not exist (did you mean 'shop/inbox/orders'?)"
    assert said in err and str(root / "shop" / "inbox" / "ordrs") in err, err
    assert "reading inputs" not in err, err


def test_validate_with_a_data_root_checks_the_folders(tmp_path, capsys):
    root = tmp_path / "data"
    path = _write(tmp_path)
    assert main(["validate", path]) == 0  # without a data root: the file only
    assert main(["validate", path, "--data-root", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:5: node 'orders': input 'orders' reads folder 'shop/inbox/orders', which does not exist" in out
    assert f"{path}:8: node 'customers':" in out
    (root / "shop" / "inbox" / "orders").mkdir(parents=True)
    (root / "shop" / "snapshots" / "customers").mkdir(parents=True)
    assert main(["validate", path, "--data-root", str(root)]) == 0
    assert f"{path}: ok" in capsys.readouterr().out


OTHER = """\
name: other
inputs:
  orders:
    schema: {order_id: bigint, amount: double}
    source: {kind: changes, path: shop/inbox/orders/, format: parquet}
nodes:
  all: {op: filter, input: orders, where: "amount > 0"}
outputs: [all]
"""


def test_circuits_reading_one_folder_alike_are_fine_and_differently_are_warned(tmp_path):
    a = ("a.yaml", load_circuit_text(CIRCUIT))
    same = ("b.yaml", load_circuit_text(OTHER))  # bigint is long; a trailing slash is the same folder
    assert shared_folder_warnings([a, same]) == []
    csv = ("c.yaml", load_circuit_text(OTHER.replace("format: parquet", "format: csv")))
    typed = ("d.yaml", load_circuit_text(OTHER.replace("amount: double", "amount: string")))
    snap = ("e.yaml", load_circuit_text(OTHER.replace("kind: changes", "kind: snapshots")))
    warnings = shared_folder_warnings([a, csv, typed, snap], checked=["c.yaml", "d.yaml", "e.yaml"])
    assert len(warnings) == 6  # every pair differs
    first = next(w for w in warnings if "a.yaml" in w and "c.yaml" in w)
    assert first.startswith("warning: a.yaml:5: circuit 'folders' input 'orders' and c.yaml:5: circuit 'other' "
                            "input 'orders' read the same folder 'shop/inbox/orders' differently (format parquet vs csv)")
    assert any("amount is double vs string" in w for w in warnings)
    assert any("kind changes vs snapshots" in w for w in warnings)
    assert shared_folder_warnings([a, csv], checked=["x.yaml"]) == []  # neither is being validated


def test_validate_warns_about_a_neighbour_in_the_circuits_folder(tmp_path, capsys):
    """The new circuit is checked against the profile's other circuits: they share the data root."""
    circuits = tmp_path / "circuits"
    circuits.mkdir()
    (circuits / "folders.yaml").write_text(CIRCUIT)
    profile = tmp_path / "profile.yaml"
    profile.write_text(f"spark: {{mode: local}}\ndata_root: {tmp_path / 'data'}\ncircuits_dir: {circuits}\n")
    new = _write(tmp_path, OTHER.replace("format: parquet", "format: csv"), "new.yaml")
    assert main(["validate", new, "--config", str(profile)]) == 0  # a warning, not an error
    out = capsys.readouterr().out
    assert f"{new}: ok" in out
    assert "warning:" in out and "folders.yaml:5: circuit 'folders' input 'orders'" in out and "format csv vs parquet" in out


def test_the_shipped_circuits_keep_their_inputs_apart():
    from tests.test_docs import ROOT

    files = sorted((ROOT / "circuits").glob("*.yaml")) + sorted((ROOT / "circuits" / "examples").glob("*.yaml"))
    assert shared_folder_warnings([(str(f), load_circuit(str(f))) for f in files]) == []


def test_a_step_says_when_an_input_moved_since_the_state_was_built(tmp_path):
    """The manifest records the folder each input read; a step of the circuit with another path
    says so before it reads anything (and a missing new folder is refused, naming the old one)."""
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step
    from tests.policies import config

    root = tmp_path / "data"
    text = CIRCUIT.replace("kind: snapshots, path: shop/snapshots/customers, format: csv",
                           "kind: changes, path: shop/inbox/customers, format: parquet")
    path = _write(tmp_path, text)
    write_change(str(root / "shop"), "orders", 1, {"order_id": "long", "amount": "double"}, Counter({(1, 20.0): 1}))
    write_change(str(root / "shop"), "customers", 1, {"customer_id": "long", "region": "string"}, Counter({(1, "eu"): 1}))
    rt = open_circuit(path, config(str(root), engine="arrow"))
    run_step(rt)
    manifest = rt.store.manifest()
    assert manifest.inputs["orders"]["path"] == "shop/inbox/orders"
    spec = load_circuit_text(text)
    assert choose_inputs(spec.inputs, str(root), manifest).notes() == []  # unchanged: nothing to say

    moved = load_circuit_text(text.replace("shop/inbox/orders", "shop/v2/orders"))
    with pytest.raises(InputRefused) as refused:  # the new folder does not exist yet
        choose_inputs(moved.inputs, str(root), manifest)
    assert "(the state was built from 'shop/inbox/orders')" in str(refused.value)
    (root / "shop" / "v2" / "orders").mkdir(parents=True)
    [note] = choose_inputs(moved.inputs, str(root), manifest).notes()
    assert note.startswith("input 'orders' now reads folder 'shop/v2/orders', but the state (timestep 1) was built "
                           "from 'shop/inbox/orders'")

    (tmp_path / "folders.yaml").write_text(text.replace("shop/inbox/orders", "shop/v2/orders"))
    said: list[str] = []
    rt = open_circuit(path, config(str(root), engine="arrow"))
    run_step(rt, progress=said.append)
    assert any("now reads folder 'shop/v2/orders'" in line for line in said), said
    assert rt.store.manifest().inputs["orders"]["path"] == "shop/v2/orders"  # recorded: said once
