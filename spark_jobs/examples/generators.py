"""Sample-change generators for the example circuits (no Spark needed: files are written with pyarrow).

Each generator remembers what it has inserted (in a hidden JSON file next to the inbox, which the
sources ignore) so that later batches can delete rows that really exist, as real change feeds do.
"""
from __future__ import annotations

import csv
import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

REGIONS = ("north", "south", "east", "west", "central")
NAMES = ("ada", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo", "kim", "lu", "max", "ned", "ola")
STATUSES = ("paid", "paid", "paid", "pending", "refunded")


def write_parquet(path: str, rows: list[dict[str, Any]], schema: pa.Schema) -> str:
    """Write rows atomically (temp name + rename) so a step never reads a half-written file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def write_csv(path: str, rows: list[dict[str, Any]], columns: list[str]) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


@dataclass
class _State:
    batch: int = 0
    next_order: int = 1
    orders: dict[str, dict] = field(default_factory=dict)  # order_id -> row
    customers: dict[str, dict] = field(default_factory=dict)  # customer_id -> row


class RevenueGenerator:
    """Batches of changes for circuits/revenue_by_region.yaml.

    Batch 1 is an initial load; later batches insert new orders, delete some existing ones
    (with ``_weight = -1``), and publish a new customers snapshot where a few customers moved
    region and a few new customers appeared.
    """

    ORDERS = pa.schema([("order_id", pa.int64()), ("customer_id", pa.int64()), ("amount", pa.float64()),
                        ("status", pa.string()), ("_weight", pa.int64())])

    def __init__(self, data_root: str, seed: int = 7, customers: int = 40) -> None:
        self.data_root = data_root
        self.state_path = os.path.join(data_root, "inbox", ".revenue_generator.json")
        self.rng = random.Random(seed)
        self.initial_customers = customers
        self.state = self._load()

    def _load(self) -> _State:
        if os.path.exists(self.state_path):
            with open(self.state_path, encoding="utf-8") as fh:
                raw = json.load(fh)
            self.rng.seed(raw.pop("rng_seed"))
            return _State(**raw)
        return _State()

    def _save(self) -> None:
        os.makedirs(os.path.dirname(self.state_path), exist_ok=True)
        raw = dict(self.state.__dict__, rng_seed=self.rng.random())
        with open(self.state_path, "w", encoding="utf-8") as fh:
            json.dump(raw, fh)

    def _new_customer(self, cid: int) -> dict:
        return {"customer_id": cid, "name": f"{self.rng.choice(NAMES)}{cid}", "region": self.rng.choice(REGIONS)}

    def _new_order(self) -> dict:
        oid = self.state.next_order
        self.state.next_order += 1
        cid = int(self.rng.choice(list(self.state.customers)))
        amount = round(self.rng.choice([self.rng.uniform(5, 99), self.rng.uniform(100, 400)]), 2)
        return {"order_id": oid, "customer_id": cid, "amount": amount, "status": self.rng.choice(STATUSES)}

    def write_batch(self, new_orders: int = 60, deletes: int = 10, moves: int = 3, new_customers: int = 2) -> dict:
        """Write one batch of changes; returns what was written (for the demo's narration)."""
        st = self.state
        st.batch += 1
        first = not st.customers
        if first:
            for cid in range(1, self.initial_customers + 1):
                st.customers[str(cid)] = self._new_customer(cid)
        else:
            for cid in self.rng.sample(sorted(st.customers), min(moves, len(st.customers))):
                st.customers[cid] = dict(st.customers[cid], region=self.rng.choice(REGIONS))
            top = max(int(c) for c in st.customers)
            for cid in range(top + 1, top + 1 + new_customers):
                st.customers[str(cid)] = self._new_customer(cid)
        rows = []
        doomed = [] if first else self.rng.sample(sorted(st.orders), min(deletes, len(st.orders)))
        for oid in doomed:
            rows.append(dict(st.orders.pop(oid), _weight=-1))
        for _ in range(new_orders):
            order = self._new_order()
            st.orders[str(order["order_id"])] = order
            rows.append(dict(order, _weight=1))
        tag = f"{st.batch:04d}"
        write_parquet(os.path.join(self.data_root, "inbox", "orders", f"orders-{tag}.parquet"), rows, self.ORDERS)
        write_csv(os.path.join(self.data_root, "snapshots", "customers", f"customers-{tag}.csv"),
                  sorted(st.customers.values(), key=lambda r: r["customer_id"]), ["customer_id", "name", "region"])
        self._save()
        return {"batch": st.batch, "inserted_orders": new_orders, "deleted_orders": len(doomed),
                "customers": len(st.customers)}


class PaperExampleGenerator:
    """Random inserts and deletes for circuits/paper_example.yaml (relations t and r)."""

    T = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("x", pa.string()), ("_weight", pa.int64())])
    R = pa.schema([("id", pa.int64()), ("s", pa.int64()), ("y", pa.string()), ("_weight", pa.int64())])

    def __init__(self, data_root: str, seed: int = 11) -> None:
        self.data_root = data_root
        self.rng = random.Random(seed)
        self.live: dict[str, list[dict]] = {"t": [], "r": []}  # rows this instance inserted
        # continue the numbering of earlier runs: a file name is never reused (consumed names are final)
        existing = [f for rel in ("t", "r") if os.path.isdir(d := os.path.join(data_root, "inbox", rel))
                    for f in os.listdir(d) if f.endswith(".parquet")]
        self.batch = max((int(f.rsplit("-", 1)[1].split(".")[0]) for f in existing), default=0)

    def write_batch(self, inserts: int = 20, deletes: int = 5) -> list[str]:
        """Write one file of changes per relation; returns their paths."""
        self.batch += 1
        written = []
        for rel, schema in (("t", self.T), ("r", self.R)):
            rows = []
            live = self.live[rel]
            for row in self.rng.sample(live, min(deletes, len(live))):
                live.remove(row)
                rows.append(dict(row, _weight=-1))
            for _ in range(inserts):
                if rel == "t":
                    row = {"id": self.rng.randint(1, 15), "a": self.rng.randint(0, 5), "x": self.rng.choice("pqrs")}
                else:
                    row = {"id": self.rng.randint(1, 15), "s": self.rng.randint(3, 9), "y": self.rng.choice("uvw")}
                live.append(row)
                rows.append(dict(row, _weight=1))
            written.append(write_parquet(os.path.join(self.data_root, "inbox", rel, f"{rel}-{self.batch:04d}.parquet"),
                                         rows, schema))
        return written


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_jobs.examples.generators``: write the next batch of revenue changes
    (orders under inbox/orders, a customers snapshot under snapshots/customers) into a data root:
    input files for circuits/revenue_by_region.yaml and the README's examples."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0] if main.__doc__ else None)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--orders", type=int, default=60, help="new orders in the batch")
    parser.add_argument("--deletes", type=int, default=10, help="orders of earlier batches deleted")
    args = parser.parse_args(argv)
    info = RevenueGenerator(args.data_root).write_batch(new_orders=args.orders, deletes=args.deletes)
    print(f"batch {info['batch']} in {os.path.abspath(args.data_root)}: +{info['inserted_orders']} orders, "
          f"-{info['deleted_orders']} orders, customers snapshot of {info['customers']} customers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
