"""The keyed parts of a circuit: cdc sources, input and view keys, publish settings (no Spark)."""
from __future__ import annotations

import pytest

from spark_jobs.config import load_config
from spark_jobs.publish import targets
from spark_jobs.spec import CircuitError, load_circuit_text

GOOD = """\
name: shop
inputs:
  orders:
    schema: {order_id: long, amount: double, op: string, seq: long}
    key: [order_id]
    source: {kind: cdc, path: inbox/orders, format: jsonl, sequence: seq}
  clicks:
    schema: {user_id: long}
    source: {kind: append_only, path: inbox/clicks, format: parquet}
nodes:
  big: {op: filter, input: orders, where: "amount > 10"}
outputs:
  big:
    key: [order_id]
  clicks:
    publish: {path: web/clicks}
  orders:
    publish: false
"""


def test_a_cdc_input_is_its_columns_without_the_operation():
    spec = load_circuit_text(GOOD)
    orders = spec.inputs["orders"]
    assert orders.column_names == ("order_id", "amount", "seq") and orders.key == ("order_id",)
    assert orders.source.cdc.op == "op" and orders.source.cdc.sequence == "seq"
    assert orders.source.cdc.ops == {"c": "insert", "r": "upsert", "u": "update", "d": "delete"}
    assert orders.source.cdc.unknown_key == "refuse" and orders.source.reader_format == "json"
    assert spec.outputs["big"].key == ("order_id",)


def test_published_tables_live_under_the_views_root(tmp_path):
    spec = load_circuit_text(GOOD)
    found = {t.view: t for t in targets(load_config(data_root=str(tmp_path)), spec)}
    assert set(found) == {"big", "clicks"}  # orders: publish: false
    assert found["big"].uri == str(tmp_path / "views" / "shop" / "big") and found["big"].key == ("order_id",)
    assert found["clicks"].uri == str(tmp_path / "views" / "web" / "clicks")


def test_profile_views_settings(tmp_path, monkeypatch):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"data_root: {tmp_path}\nviews: {{root: {tmp_path}/tables, enabled: true}}\n")
    spec = load_circuit_text(GOOD)
    assert targets(load_config(str(profile)), spec)[0].uri == str(tmp_path / "tables" / "shop" / "big")
    profile.write_text(f"data_root: {tmp_path}\nviews: {{enabled: false}}\n")
    assert targets(load_config(str(profile)), spec) == []
    profile.write_text(f"data_root: {tmp_path}\nviews: {{enabled: maybe}}\n")
    with pytest.raises(ValueError, match="views.enabled"):
        load_config(str(profile))


def _problems(text: str) -> list[str]:
    with pytest.raises(CircuitError) as err:
        load_circuit_text(text, "c.yaml")
    return [str(p) for p in err.value.problems]


@pytest.mark.parametrize("old,new,fragments", [
    ("key: [order_id]\n    source", "key: [ordr_id]\n    source",
     ["c.yaml:5", "key column 'ordr_id' is not a column of input 'orders'", "did you mean 'order_id'"]),
    ("    key: [order_id]\n    source", "    source", ["a cdc input needs 'key: [columns]'"]),
    ("sequence: seq}", "sequence: sq}", ["sequence column 'sq' is not a column", "did you mean 'seq'"]),
    ("format: jsonl, sequence: seq}", "format: csv, sequence: seq, after: after}",
     ["'after' names a JSON object: it needs format json or jsonl"]),
    ("format: parquet}", "format: parquet, sequence: x}", ["source field 'sequence' is for kind cdc only"]),
    ("kind: append_only", "kind: apend_only", ["did you mean 'append_only'"]),
    ("sequence: seq}", "sequence: seq, unknown_key: skip}", ["'skip' is not allowed", "refuse, ignore, count"]),
    ("sequence: seq}", "sequence: seq, ops: {c: create}}", ["'create' is not allowed", "insert, update, delete, upsert"]),
    ("  big:\n    key: [order_id]", "  big:\n    key: [id]", ["key column 'id' is not a column of view 'big'"]),
    ("{path: web/clicks}", "{path: ../../etc}", ["publish.path", "leaves the views root"]),
    ("{path: web/clicks}", "{path: /tmp/x}", ["publish.path", "must be a relative path"]),
    ("{path: web/clicks}", "{path: s3://bucket/x}", ["publish.path", "must be a relative path"]),
])
def test_keyed_mistakes_are_named(old, new, fragments):
    assert old in GOOD, old
    found = "\n".join(_problems(GOOD.replace(old, new)))
    for fragment in fragments:
        assert fragment in found, found
