"""Synthetic, seeded data for the benchmark workloads (numpy + pyarrow; no downloads, no Spark).

Every generator keeps the *current* tables in memory as numpy columns, so that

- a change can delete rows that really exist (a Z-set deletion must name the exact tuple), and
- ``snapshot()`` can write the integrated inputs as plain Parquet tables: what a batch system
  (the full recompute in Spark, DuckDB) would read.

Change files go to ``<root>/inbox/<input>/b<batch>.parquet`` with a ``_weight`` column (+1 insert,
-1 delete), written under a hidden name and renamed, so a step never sees half a file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

Columns = dict[str, np.ndarray]

EPOCH = date(1970, 1, 1)
TPCH_START = (date(1992, 1, 1) - EPOCH).days
TPCH_END = (date(1998, 8, 2) - EPOCH).days
RETURN_FLAGS = np.array(["R", "A", "N"])  # Q10 keeps the returned items ('R')
SEGMENTS = np.array(["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"])

# TPC-H row counts at scale factor 1 (lineitem is 1-7 per order, about 4 on average).
TPCH_CUSTOMERS_PER_SF = 150_000
TPCH_ORDERS_PER_CUSTOMER = 10


def write_table(path: str, columns: Mapping[str, np.ndarray], schema: pa.Schema) -> int:
    """Write one Parquet file atomically (hidden temp name, then rename); returns its rows."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    arrays = [pa.array(columns[f.name]).cast(f.type) for f in schema]
    table = pa.Table.from_arrays(arrays, schema=schema)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return table.num_rows


def _with_weight(schema: pa.Schema) -> pa.Schema:
    return schema.append(pa.field("_weight", pa.int64()))


def _take(cols: Columns, idx: np.ndarray) -> Columns:
    return {k: v[idx] for k, v in cols.items()}


def _concat(a: Columns, b: Columns) -> Columns:
    return {k: np.concatenate([a[k], b[k]]) for k in a}


def _signed(ins: Columns, dels: Columns) -> Columns:
    """Inserted rows (+1) followed by deleted rows (-1), as one change."""
    out = _concat(ins, dels)
    n_ins, n_del = len(next(iter(ins.values()))), len(next(iter(dels.values())))
    out["_weight"] = np.concatenate([np.ones(n_ins, np.int64), -np.ones(n_del, np.int64)])
    return out


def _rows(cols: Columns) -> int:
    return len(next(iter(cols.values())))


@dataclass
class Written:
    """What one call wrote: rows per input (a change counts inserted and deleted rows)."""

    rows: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.rows.values())


class _Base:
    """Shared plumbing: batch numbering, change files, snapshots."""

    SCHEMAS: dict[str, pa.Schema] = {}

    def __init__(self, root: str, seed: int) -> None:
        self.root = root
        self.rng = np.random.default_rng(seed)
        self.batch = 0
        self.tables: dict[str, Columns] = {}

    def _write_change(self, changes: dict[str, Columns]) -> Written:
        self.batch += 1
        rows = {}
        for name, cols in changes.items():
            if _rows(cols) == 0:
                continue
            path = os.path.join(self.root, "inbox", name, f"b{self.batch:06d}.parquet")
            rows[name] = write_table(path, cols, _with_weight(self.SCHEMAS[name]))
        return Written(rows)

    def state_rows(self) -> dict[str, int]:
        return {name: _rows(cols) for name, cols in self.tables.items()}

    def snapshot(self, folder: str) -> dict[str, str]:
        """Write the current tables (the integrated inputs) as plain Parquet, one file each."""
        out = {}
        for name, cols in self.tables.items():
            path = os.path.join(folder, f"{name}.parquet")
            write_table(path, cols, self.SCHEMAS[name])
            out[name] = path
        return out


class TpchGenerator(_Base):
    """W1: TPC-H-like customer / orders / lineitem, with TPC-H refresh-function-style changes.

    ``scale`` is the TPC-H scale factor: customers = 150,000 x SF, orders = 10 per customer,
    lineitems 1-7 per order (about 6M x SF). Changes insert new orders with their line items
    (RF1), delete whole existing orders with their line items (RF2), and add a few customers.
    """

    SCHEMAS = {
        "customer": pa.schema([("c_custkey", pa.int64()), ("c_name", pa.string()),
                               ("c_mktsegment", pa.string()), ("c_nationkey", pa.int64())]),
        "orders": pa.schema([("o_orderkey", pa.int64()), ("o_custkey", pa.int64()),
                             ("o_orderdate", pa.date32()), ("o_shippriority", pa.int64()),
                             ("o_totalprice", pa.float64())]),
        "lineitem": pa.schema([("l_orderkey", pa.int64()), ("l_linenumber", pa.int64()),
                               ("l_quantity", pa.float64()), ("l_extendedprice", pa.float64()),
                               ("l_discount", pa.float64()), ("l_shipdate", pa.date32()),
                               ("l_returnflag", pa.string())]),
    }

    def __init__(self, root: str, scale: float, seed: int = 1) -> None:
        super().__init__(root, seed)
        self.scale = scale
        self.n_customers = max(10, int(round(TPCH_CUSTOMERS_PER_SF * scale)))
        self.next_custkey = 1
        self.next_orderkey = 1

    # ---- row makers ----------------------------------------------------------------------
    def _customers(self, n: int) -> Columns:
        keys = np.arange(self.next_custkey, self.next_custkey + n, dtype=np.int64)
        self.next_custkey += n
        return {"c_custkey": keys,
                "c_name": np.array([f"Customer#{k:09d}" for k in keys], dtype=object),
                "c_mktsegment": SEGMENTS[self.rng.integers(0, len(SEGMENTS), n)].astype(object),
                "c_nationkey": self.rng.integers(0, 25, n, dtype=np.int64)}

    def _orders(self, n: int) -> tuple[Columns, Columns]:
        """n new orders (of existing customers) and their 1-7 line items each."""
        rng = self.rng
        keys = np.arange(self.next_orderkey, self.next_orderkey + n, dtype=np.int64)
        self.next_orderkey += n
        custs = self.tables["customer"]["c_custkey"] if "customer" in self.tables else None
        cust = custs[rng.integers(0, len(custs), n)] if custs is not None else None
        odate = rng.integers(TPCH_START, TPCH_END - 151, n).astype(np.int32)
        per = rng.integers(1, 8, n)
        l_order = np.repeat(keys, per)
        l_date = np.repeat(odate, per) + rng.integers(1, 122, len(l_order)).astype(np.int32)
        starts = np.repeat(np.cumsum(per) - per, per)
        lineno = (np.arange(len(l_order)) - starts + 1).astype(np.int64)
        qty = rng.integers(1, 51, len(l_order)).astype(np.float64)
        price = np.round(qty * rng.uniform(900, 2000, len(l_order)), 2)
        items = {"l_orderkey": l_order, "l_linenumber": lineno, "l_quantity": qty,
                 "l_extendedprice": price,
                 "l_discount": rng.integers(0, 11, len(l_order)) / 100.0,
                 "l_shipdate": l_date,
                 "l_returnflag": RETURN_FLAGS[rng.integers(0, len(RETURN_FLAGS), len(l_order))].astype(object)}
        total = np.bincount(np.repeat(np.arange(n), per), weights=price, minlength=n)
        orders = {"o_orderkey": keys, "o_custkey": cust, "o_orderdate": odate,
                  "o_shippriority": np.zeros(n, np.int64), "o_totalprice": np.round(total, 2)}
        return orders, items

    # ---- what the harness calls ----------------------------------------------------------
    def initial(self) -> Written:
        """The initial load: every table, inserted at once (one file per input)."""
        self.tables["customer"] = self._customers(self.n_customers)
        orders, items = self._orders(self.n_customers * TPCH_ORDERS_PER_CUSTOMER)
        self.tables["orders"], self.tables["lineitem"] = orders, items
        return self._write_change({name: _signed(cols, _take(cols, np.arange(0)))
                                   for name, cols in self.tables.items()})

    def change(self, rows: int) -> Written:
        """About ``rows`` changed rows: 1% new customers, then new orders (with their items)
        and deleted orders (with all their items), half the remaining rows each."""
        new_cust = self._customers(max(1, rows // 100))
        self.tables["customer"] = _concat(self.tables["customer"], new_cust)
        budget = max(2, rows - _rows(new_cust))
        # an order is 1 + 4 line items on average: ~5 rows
        n_ins = max(1, budget // 10)
        n_del = min(max(1, budget // 10), _rows(self.tables["orders"]) - 1)
        orders, lines = self.tables["orders"], self.tables["lineitem"]
        doomed = self.rng.choice(_rows(orders), n_del, replace=False)
        gone = np.zeros(_rows(orders), bool)
        gone[doomed] = True
        gone_items = np.isin(lines["l_orderkey"], orders["o_orderkey"][doomed])
        new_orders, new_items = self._orders(n_ins)
        del_orders, del_items = _take(orders, gone), _take(lines, gone_items)
        self.tables["orders"] = _concat(_take(orders, ~gone), new_orders)
        self.tables["lineitem"] = _concat(_take(lines, ~gone_items), new_items)
        empty = _take(new_cust, np.arange(0))
        return self._write_change({"customer": _signed(new_cust, empty),
                                   "orders": _signed(new_orders, del_orders),
                                   "lineitem": _signed(new_items, del_items)})


class ZipfGenerator(_Base):
    """W2: events whose user_id follows a Zipf law, and a set of blocked users.

    ``events`` rows; users = events / 10, user k drawn with probability ~ 1 / k**s. Items carry
    a fixed price, so a user buying an item twice makes an exact duplicate (distinct matters).
    Changes: half new events, half deletions of existing ones, and 1% block/unblock toggles.
    """

    SCHEMAS = {
        "events": pa.schema([("user_id", pa.int64()), ("item_id", pa.int64()), ("price", pa.int64())]),
        "blocked": pa.schema([("user_id", pa.int64())]),
    }
    ITEMS = 2_000

    def __init__(self, root: str, events: int, seed: int = 2, s: float = 1.1) -> None:
        super().__init__(root, seed)
        self.n_events = max(100, int(events))
        self.n_users = max(10, self.n_events // 10)
        p = 1.0 / np.arange(1, self.n_users + 1) ** s
        self.cdf = np.cumsum(p / p.sum())

    def _events(self, n: int) -> Columns:
        users = np.searchsorted(self.cdf, self.rng.random(n)).astype(np.int64) + 1
        users = np.minimum(users, self.n_users)
        items = self.rng.integers(1, self.ITEMS + 1, n, dtype=np.int64)
        return {"user_id": users, "item_id": items, "price": (items * 37) % 1000 + 1}

    def initial(self) -> Written:
        self.tables["events"] = self._events(self.n_events)
        blocked = self.rng.choice(np.arange(1, self.n_users + 1), max(1, self.n_users // 100), replace=False)
        self.tables["blocked"] = {"user_id": np.sort(blocked).astype(np.int64)}
        none = np.arange(0)
        return self._write_change({name: _signed(cols, _take(cols, none)) for name, cols in self.tables.items()})

    def change(self, rows: int) -> Written:
        toggles = max(1, rows // 100)
        budget = max(2, rows - toggles)
        n_ins, n_del = budget // 2, budget - budget // 2
        ev = self.tables["events"]
        n_del = min(n_del, _rows(ev) - 1)
        doomed = np.zeros(_rows(ev), bool)
        doomed[self.rng.choice(_rows(ev), n_del, replace=False)] = True
        new = self._events(n_ins)
        dels = _take(ev, doomed)
        self.tables["events"] = _concat(_take(ev, ~doomed), new)
        # toggle users: blocked ones are unblocked, others blocked (a deletion must exist)
        blocked = self.tables["blocked"]["user_id"]
        users = self.rng.choice(np.arange(1, self.n_users + 1), toggles, replace=False).astype(np.int64)
        was = np.isin(users, blocked)
        self.tables["blocked"] = {"user_id": np.sort(np.concatenate([blocked[~np.isin(blocked, users)],
                                                                     users[~was]]))}
        return self._write_change({
            "events": _signed(new, dels),
            "blocked": _signed({"user_id": users[~was]}, {"user_id": users[was]}),
        })


class IdentityGenerator(_Base):
    """The floor: rows (k, v, s); changes insert new rows and delete existing ones, half each."""

    SCHEMAS = {"rows": pa.schema([("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())])}

    def __init__(self, root: str, rows: int, seed: int = 3) -> None:
        super().__init__(root, seed)
        self.n_rows = max(10, int(rows))
        self.next_key = 1

    def _new(self, n: int) -> Columns:
        keys = np.arange(self.next_key, self.next_key + n, dtype=np.int64)
        self.next_key += n
        return {"k": keys, "v": np.round(self.rng.uniform(0, 1000, n), 3),
                "s": np.array([f"s{k % 9973}" for k in keys], dtype=object)}

    def initial(self) -> Written:
        self.tables["rows"] = self._new(self.n_rows)
        rows = self.tables["rows"]
        return self._write_change({"rows": _signed(rows, _take(rows, np.arange(0)))})

    def change(self, rows: int) -> Written:
        cur = self.tables["rows"]
        n_del = min(rows // 2, _rows(cur) - 1)
        doomed = np.zeros(_rows(cur), bool)
        doomed[self.rng.choice(_rows(cur), n_del, replace=False)] = True
        new = self._new(rows - n_del)
        dels = _take(cur, doomed)
        self.tables["rows"] = _concat(_take(cur, ~doomed), new)
        return self._write_change({"rows": _signed(new, dels)})
