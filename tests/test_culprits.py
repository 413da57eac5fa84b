"""The right file, first: a failed check names the input files behind the offending rows, from
every input: a NULL that came from a customers snapshot read at an earlier timestep is blamed
on that snapshot, not on the orders file of the step that joined it."""
from __future__ import annotations

import pyarrow as pa

from spark_jobs.cli.main import main
from spark_jobs.examples.generators import write_csv, write_parquet

CIRCUIT = """\
name: shop
inputs:
  orders:
    schema: {order_id: long, customer_id: long, amount: double}
    source: {kind: changes, path: shop/orders, format: parquet}
  customers:
    schema: {customer_id: long, country: string}
    source: {kind: snapshots, path: shop/customers, format: csv}
nodes:
  enriched: {op: join, left: orders, right: customers, on: [customer_id]}
outputs:
  enriched:
    expectations:
      - expect_column_values_to_not_be_null: {column: country}
"""
ORDERS = pa.schema([("order_id", pa.int64()), ("customer_id", pa.int64()), ("amount", pa.float64())])


def test_a_null_from_an_earlier_snapshot_is_blamed_on_the_snapshot(tmp_path, capsys):
    circuit, data = tmp_path / "shop.yaml", tmp_path / "data"
    circuit.write_text(CIRCUIT)
    # timestep 1: customer 7 has no country (an empty CSV field is a NULL, as Spark reads it), but
    # no order of hers yet: the view holds no NULL
    write_csv(str(data / "shop" / "customers" / "0001.csv"),
              [{"customer_id": 1, "country": "FR"}, {"customer_id": 7, "country": ""}], ["customer_id", "country"])
    write_parquet(str(data / "shop" / "orders" / "b1.parquet"), [{"order_id": 1, "customer_id": 1, "amount": 5.0}], ORDERS)
    assert main(["step", str(circuit), "--data-root", str(data)]) == 0
    capsys.readouterr()
    # timestep 2: her first order joins the snapshot's NULL country: the check fails
    write_parquet(str(data / "shop" / "orders" / "b2.parquet"), [{"order_id": 2, "customer_id": 7, "amount": 9.0}], ORDERS)
    assert main(["step", str(circuit), "--data-root", str(data)]) == 3
    err = capsys.readouterr().err
    assert "quality gate failed; nothing was committed" in err
    assert "FAIL" in err and "expect_column_values_to_not_be_null" in err
    blamed = err[err.index("input files behind the failing checks:"):]
    assert "rows from 0001.csv (input customers, consumed at timestep 1)" in blamed, err
    assert "b2.parquet" not in blamed, err
    assert str(data / "shop" / "customers" / "0001.csv") in blamed
