"""Debezium-shaped change feeds for circuits/shop_cdc.yaml: orders and customers of a shop.

Each record is one JSON line as Debezium's JSON converter writes it (without its schema part):
``{"before": {...}|null, "after": {...}|null, "op": "c|r|u|d", "ts_ms": ..., "source": {...}}``.
A batch is written as two files per table, as two Kafka partitions would deliver it (records are
split by key; each file is in order, the files together are not: ``ts_ms`` orders them).

    python -m spark_jobs.examples.shop_cdc --data-root data/shop --batches 3

Batch 1 is the initial snapshot (``r`` for customers, ``c`` for orders); later batches create
orders, pay or correct some (``u``), cancel some (``d``), move customers to another region and
sign new ones up. The generator keeps what it wrote in a hidden file next to the feeds, so later
batches update and delete rows that exist, as a real database's log does.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any

REGIONS = ("north", "south", "east", "west")
NAMES = ("ada", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo")


class ShopCdcGenerator:
    def __init__(self, data_root: str, seed: int = 3) -> None:
        self.root = os.path.join(data_root, "cdc")
        self.state_path = os.path.join(self.root, ".shop_cdc_generator.json")
        self.rng = random.Random(seed)
        self.state: dict[str, Any] = {"batch": 0, "ts_ms": 1_700_000_000_000, "lsn": 0,
                                      "orders": {}, "customers": {}}
        if os.path.exists(self.state_path):
            with open(self.state_path, encoding="utf-8") as fh:
                self.state = json.load(fh)
            self.rng.seed(self.state.pop("rng_seed"))

    def _record(self, table: str, op: str, before: dict | None, after: dict | None) -> dict:
        self.state["ts_ms"] += self.rng.randint(1, 500)
        self.state["lsn"] += 1
        return {"before": before, "after": after, "op": op, "ts_ms": self.state["ts_ms"],
                "source": {"connector": "postgresql", "db": "shop", "table": table, "lsn": self.state["lsn"]},
                "transaction": None}

    def _customer(self, cid: int) -> dict:
        return {"customer_id": cid, "name": f"{self.rng.choice(NAMES)}{cid}", "region": self.rng.choice(REGIONS)}

    def _order(self) -> dict:
        oid = 1 + max((int(k) for k in self.state["orders"]), default=self.state.get("last_order", 0))
        self.state["last_order"] = oid
        return {"order_id": oid, "customer_id": int(self.rng.choice(sorted(self.state["customers"]))),
                "amount": round(self.rng.uniform(5, 300), 2), "status": self.rng.choice(("pending", "paid", "paid"))}

    def write_batch(self, new_orders: int = 12, updates: int = 4, deletes: int = 2, moves: int = 2,
                    new_customers: int = 1) -> dict[str, int]:
        """Write one batch of records for both tables; returns how many records of each kind."""
        st, rng = self.state, self.rng
        st["batch"] += 1
        customers, orders = st["customers"], st["orders"]
        feed: dict[str, list[dict]] = {"customers": [], "orders": []}
        if not customers:  # the initial snapshot of the customers table
            for cid in range(1, 21):
                customers[str(cid)] = row = self._customer(cid)
                feed["customers"].append(self._record("customers", "r", None, row))
            new_orders *= 3
        else:
            for cid in rng.sample(sorted(customers), min(moves, len(customers))):
                old = customers[cid]
                customers[cid] = new = dict(old, region=rng.choice([r for r in REGIONS if r != old["region"]]))
                feed["customers"].append(self._record("customers", "u", old, new))
            for _ in range(new_customers):
                cid = 1 + max(int(c) for c in customers)
                customers[str(cid)] = row = self._customer(cid)
                feed["customers"].append(self._record("customers", "c", None, row))
        for _ in range(new_orders):
            row = self._order()
            orders[str(row["order_id"])] = row
            feed["orders"].append(self._record("orders", "c", None, row))
        for oid in rng.sample(sorted(orders), min(updates, len(orders))):  # pay, or correct the amount
            old = orders[oid]
            new = dict(old, status="paid") if old["status"] == "pending" else dict(old, amount=round(old["amount"] * 0.9, 2))
            orders[oid] = new
            feed["orders"].append(self._record("orders", "u", old, new))
        for oid in rng.sample(sorted(orders), min(deletes, len(orders))):  # cancelled: Debezium sends before only
            feed["orders"].append(self._record("orders", "d", orders.pop(oid), None))
        for table, records in feed.items():
            self._write(table, records)
        self._save()
        return {table: len(records) for table, records in feed.items()}

    def _write(self, table: str, records: list[dict]) -> None:
        """Two files ("partitions") per table, records split by key, each written atomically."""
        key = "order_id" if table == "orders" else "customer_id"
        folder = os.path.join(self.root, table)
        os.makedirs(folder, exist_ok=True)
        for part in (0, 1):
            mine = [r for r in records if (r["after"] or r["before"])[key] % 2 == part]
            if not mine:
                continue
            path = os.path.join(folder, f"{table}-{self.state['batch']:04d}-p{part}.jsonl")
            tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in mine)
            os.replace(tmp, path)

    def _save(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        with open(self.state_path, "w", encoding="utf-8") as fh:
            json.dump(dict(self.state, rng_seed=self.rng.random()), fh)

    def keyed_tables(self) -> dict[str, dict[str, dict]]:
        """What the feeds add up to: the tables the source database holds now."""
        return {"orders": dict(self.state["orders"]), "customers": dict(self.state["customers"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="data/shop")
    parser.add_argument("--batches", type=int, default=1)
    args = parser.parse_args(argv)
    gen = ShopCdcGenerator(args.data_root)
    for _ in range(args.batches):
        counts = gen.write_batch()
        print(f"batch {gen.state['batch']}: {counts['orders']} order records, {counts['customers']} customer "
              f"records under {gen.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
