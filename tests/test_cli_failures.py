"""`dbsp` at the edges of a step (issue 19), in this process (Spark starts once):

- after a circuit edit, `show` and `status` warn that the state belongs to another version, and
  the `dbsp reset` command a refused `step` suggests works as printed (a circuit file outside
  `circuits/`, `--data-root`);
- a write that runs out of space (a real full disk: a 400 KiB tmpfs as the state root, mounted
  as root or in a user and mount namespace of the test's own) ends
  with one message naming the path and saying nothing was committed, the quality report of that
  timestep says it never committed, and the next step after space is freed commits normally;
- an aggregate value outside its exact range is refused with exit code 2 and one message.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.cli.main import main

pytestmark = pytest.mark.slow

CIRCUIT = """\
name: tags
inputs:
  items:
    schema: {id: long, tag: string, x: double}
    source: {kind: changes, path: inbox/items, format: parquet}
nodes:
  kept: {op: filter, input: items, where: "id >= 0"}
  tags: {op: distinct, input: kept}
  total: {op: aggregate, input: kept, aggregates: {s: "sum(x)", n: "count(*)"}}
outputs: [tags, total]
"""


def _items(data_root, name: str, rows: list[tuple[int, str, float]]) -> None:
    folder = os.path.join(str(data_root), "inbox", "items")
    os.makedirs(folder, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                             "tag": pa.array([r[1] for r in rows]),
                             "x": pa.array([r[2] for r in rows], pa.float64())}), os.path.join(folder, name))


def test_an_edited_circuit_warns_in_show_and_status_and_the_reset_hint_works_as_printed(spark, tmp_path, capsys):
    circuit = tmp_path / "elsewhere" / "tags.yaml"  # not in circuits/: only the path finds it
    circuit.parent.mkdir()
    circuit.write_text(CIRCUIT)
    data = tmp_path / "data"
    common = [str(circuit), "--data-root", str(data)]
    _items(data, "b1.parquet", [(1, "a", 1.5), (-1, "b", 2.0)])
    assert main(["step", *common]) == 0
    assert main(["status", *common]) == 0 and "warning" not in capsys.readouterr().err

    circuit.write_text(CIRCUIT.replace("id >= 0", "id >= -5"))  # an edit: another fingerprint
    assert main(["show", *common[:1], "tags", *common[1:]]) == 0
    err = capsys.readouterr().err
    assert "warning: the committed state of 'tags' belongs to another version of the circuit" in err
    assert main(["status", *common]) == 0
    assert "belongs to another version" in capsys.readouterr().err

    assert main(["step", *common]) == 1
    err = capsys.readouterr().err
    hint = err.split("rebuild it from the inputs with `", 1)[1].split("`", 1)[0]
    assert hint == shlex.join(["dbsp", "reset", str(circuit), "--yes", "--data-root", str(data)])
    assert main(shlex.split(hint)[1:]) == 0  # as printed
    assert main(["step", *common]) == 0
    capsys.readouterr()
    assert main(["show", *common[:1], "tags", *common[1:], "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert sorted(r["tag"] for r in json.loads(captured.out)) == ["a", "b"] and "warning" not in captured.err


_IN_NAMESPACE = "DBSP_TEST_IN_MOUNT_NAMESPACE"


def _mount_tmpfs(mount) -> str | None:
    """Mount a 400 KiB tmpfs at ``mount``; the error text if that is not permitted."""
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else done.stderr.strip() or f"mount exited {done.returncode}"


def test_a_full_disk_ends_with_one_message_and_commits_nothing(request, tmp_path, capsys):
    """On a real full file system: a 400 KiB tmpfs as the state root. Mounting needs root; without
    it the test runs itself again in a user and mount namespace of its own (``unshare -rm``), where
    it is root and may mount (one more Python and Spark start)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    refused = _mount_tmpfs(mount)
    if refused is None:
        try:
            _full_disk(request.getfixturevalue("spark"), tmp_path, mount, capsys)
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        return
    if os.environ.get(_IN_NAMESPACE) or not shutil.which("unshare"):
        pytest.fail(f"cannot mount a tmpfs, not even in a namespace of its own: {refused}")
    inner = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-m", "pytest",
                            "-q", "-p", "no:cacheprovider", f"{__file__}::{request.node.name}"],
                           env={**os.environ, _IN_NAMESPACE: "1"}, capture_output=True, text=True, timeout=900)
    assert inner.returncode == 0 and "1 passed" in inner.stdout, inner.stdout[-3000:] + inner.stderr[-3000:]


def _full_disk(spark, tmp_path, tiny_disk, capsys) -> None:
    circuit = tmp_path / "tags.yaml"
    circuit.write_text(CIRCUIT)
    data = tmp_path / "data"
    profile = tmp_path / "profile.yaml"
    profile.write_text(f"profile: tiny\ndata_root: {data}\nstate_root: {tiny_disk}\n")
    args = [str(circuit), "--config", str(profile)]
    _items(data, "b1.parquet", [(1, "a", 1.5)])
    assert main(["step", *args]) == 0
    capsys.readouterr()
    # ~30k distinct tags: about 1.2 MB of state, which cannot fit in 400 KiB
    _items(data, "b2.parquet", [(i, f"{uuid.UUID(int=i * 7919).hex}", 0.5) for i in range(30_000)])
    assert main(["step", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    message = err[-1]
    # 30k changed rows run in-process (pyarrow names the directory); Spark names file:<dir>/tags/...
    assert re.match(rf"error: no space left on the device while writing (file:)?{re.escape(str(tiny_disk))}/tags\b",
                    message), message
    assert "nothing was committed: tags is still at timestep 1" in message
    assert not [line for line in err if "at org.apache" in line or "Exception" in line], err
    report = json.loads((tiny_disk / "tags" / "quality" / "t000000000002.json").read_text())
    assert report["committed"] is False and report["passed"] is True
    assert "not committed" in (tiny_disk / "tags" / "quality" / "index.html").read_text()
    os.remove(data / "inbox" / "items" / "b2.parquet")  # space "freed": the step commits
    _items(data, "b3.parquet", [(2, "b", 2.5)])
    assert main(["step", *args]) == 0
    report = json.loads((tiny_disk / "tags" / "quality" / "t000000000002.json").read_text())
    assert report["committed"] is True


def test_an_aggregate_value_out_of_range_is_refused_with_exit_code_2(spark, tmp_path, capsys):
    circuit = tmp_path / "tags.yaml"
    circuit.write_text(CIRCUIT)
    data = tmp_path / "data"
    _items(data, "b1.parquet", [(1, "a", 1e31)])
    assert main(["step", str(circuit), "--data-root", str(data)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: refused; nothing was committed: aggregate 's' (sum(x)) of node 'total': "
                              "the value 1.0E31 is too large"), err[-1]
    assert not [line for line in err if "at org.apache" in line], err
    assert not (data / "_dbsp" / "tags" / "manifests").exists() or not os.listdir(data / "_dbsp" / "tags" / "manifests")
