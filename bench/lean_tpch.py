"""W1's TPC-H tables at scale factor 10 without holding them in memory (numpy; no Spark).

``bench.generators.TpchGenerator`` keeps every current table in memory so a change can delete
rows that exist; at SF10 that is 76M rows of numpy columns, and the benchmark was killed by the
out-of-memory killer generating SF10 changes. Here every column of an order and of its line
items is a pure function of the order key (a counter-based hash, splitmix64), so the generator
keeps only which order keys are alive (one byte per order) and regenerates a deleted order's rows
exactly when a change deletes it. The shapes follow ``TpchGenerator``'s (1-7 items per order, the
same value ranges), not its exact values. Files are written in parts of ``PART_ORDERS`` orders,
so the load never holds more than one part.

DuckDB reads the same files: ``q3_integrated`` is Q3 over every change file with the weights
multiplied through the joins (a join is bilinear, so the unconsolidated Z-sets give the integrated
result): the reference a step's view is checked against. ``q3_tables`` is Q3 over plain tables,
what a batch recompute runs.
"""
from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.generators import (RETURN_FLAGS, SEGMENTS, TPCH_CUSTOMERS_PER_SF, TPCH_END, TPCH_ORDERS_PER_CUSTOMER,
                              TPCH_START, TpchGenerator, Written, _with_weight)

PART_ORDERS = 500_000  # orders per load file (with ~2M line items): what one part holds in memory
_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def mix(keys: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of ``keys`` (int64) with ``salt``: a uniform uint64 per key, the same every run."""
    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64) * _GOLD + np.uint64(salt) * np.uint64(0xD1B54A32D192ED03)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _strings(values: np.ndarray, at: np.ndarray) -> pa.Array:
    """``values[at]`` as an Arrow string array, without a Python object per row."""
    return pa.array(values.tolist(), pa.string()).take(pa.array(at))


def _table(columns: dict[str, "np.ndarray | pa.Array"], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([pa.array(columns[f.name]).cast(f.type) for f in schema], schema=schema)


def _below(keys: np.ndarray, salt: int, n: int) -> np.ndarray:
    return (mix(keys, salt) % np.uint64(n)).astype(np.int64)


class LeanTpch:
    """The W1 inputs (customer, orders, lineitem) as change files under ``root/inbox``."""

    SCHEMAS = TpchGenerator.SCHEMAS

    def __init__(self, root: str, scale: float, seed: int = 1) -> None:
        self.root, self.scale = root, scale
        self.rng = np.random.default_rng(seed)
        self.base_customers = max(10, int(round(TPCH_CUSTOMERS_PER_SF * scale)))
        self.customers = 0
        self.alive = np.zeros(0, dtype=bool)  # alive[k - 1]: order k exists
        self.batch = 0
        self.rows = {"customer": 0, "orders": 0, "lineitem": 0}

    # ---- rows as functions of their keys ---------------------------------------------------
    def customer_rows(self, keys: np.ndarray) -> dict[str, np.ndarray]:
        digits = pc.utf8_lpad(pa.array(keys).cast(pa.string()), width=9, padding="0")
        names = pc.binary_join_element_wise("Customer#", digits, "")
        return {"c_custkey": keys, "c_name": names,
                "c_mktsegment": _strings(SEGMENTS, _below(keys, 1, len(SEGMENTS))),
                "c_nationkey": _below(keys, 2, 25)}

    def order_rows(self, keys: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Orders ``keys`` and all their line items."""
        odate = (TPCH_START + _below(keys, 4, TPCH_END - 151 - TPCH_START)).astype(np.int32)
        per = 1 + _below(keys, 5, 7)
        l_order = np.repeat(keys, per)
        starts = np.repeat(np.cumsum(per) - per, per)
        lineno = (np.arange(len(l_order)) - starts + 1).astype(np.int64)
        item = l_order * 8 + lineno  # one hash input per line item
        qty = (1 + _below(item, 6, 50)).astype(np.float64)
        price = np.round(qty * (900 + _below(item, 7, 110_000) / 100.0), 2)
        items = {"l_orderkey": l_order, "l_linenumber": lineno, "l_quantity": qty, "l_extendedprice": price,
                 "l_discount": _below(item, 8, 11) / 100.0,
                 "l_shipdate": np.repeat(odate, per) + (1 + _below(item, 9, 121)).astype(np.int32),
                 "l_returnflag": _strings(RETURN_FLAGS, _below(item, 10, len(RETURN_FLAGS)))}
        total = np.bincount(np.repeat(np.arange(len(keys)), per), weights=price, minlength=len(keys))
        orders = {"o_orderkey": keys, "o_custkey": 1 + _below(keys, 3, self.base_customers), "o_orderdate": odate,
                  "o_shippriority": np.zeros(len(keys), np.int64), "o_totalprice": np.round(total, 2)}
        return orders, items

    # ---- files -----------------------------------------------------------------------------
    def _write(self, name: str, part: int, cols: dict[str, np.ndarray], weight: np.ndarray) -> int:
        if len(weight) == 0:
            return 0
        path = os.path.join(self.root, "inbox", name, f"b{self.batch:06d}-{part:04d}.parquet")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        table = _table({**cols, "_weight": weight}, _with_weight(self.SCHEMAS[name]))
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)  # a step never sees half a file
        n = table.num_rows
        self.rows[name] += int(weight.sum())
        return n

    def _new_orders(self, n: int) -> np.ndarray:
        keys = np.arange(len(self.alive) + 1, len(self.alive) + 1 + n, dtype=np.int64)
        self.alive = np.concatenate([self.alive, np.ones(n, dtype=bool)])
        return keys

    def _parts(self, keys: np.ndarray) -> Iterator[np.ndarray]:
        for start in range(0, len(keys), PART_ORDERS):
            yield keys[start:start + PART_ORDERS]

    def initial(self) -> Written:
        """The load: every customer and order (with its items), inserted, in parts."""
        written: dict[str, int] = {}
        for part in self.initial_split():
            written.update(part.rows)
        return Written(written)

    def initial_split(self) -> Iterator[Written]:
        """The load's files in two halves, yielded after each: the customers and orders, then the
        line items (the same files ``initial`` writes). A step after each half loads SF10 in a
        process of ~7 GiB: one step over all three held the 60M line items beside the orders'
        values and took more than 9 GiB."""
        self.batch += 1
        cust = np.arange(1, self.base_customers + 1, dtype=np.int64)
        self.customers = len(cust)
        keys = self._new_orders(self.base_customers * TPCH_ORDERS_PER_CUSTOMER)
        written = {"customer": self._write("customer", 0, self.customer_rows(cust), np.ones(len(cust), np.int64)),
                   "orders": 0}
        for i, part in enumerate(self._parts(keys)):
            orders, _ = self.order_rows(part)
            written["orders"] += self._write("orders", i, orders, np.ones(len(part), np.int64))
        os.makedirs(os.path.join(self.root, "inbox", "lineitem"), exist_ok=True)  # empty: no changes yet
        yield Written(written)
        items_written = 0
        for i, part in enumerate(self._parts(keys)):
            _, items = self.order_rows(part)
            items_written += self._write("lineitem", i, items, np.ones(len(items["l_orderkey"]), np.int64))
        yield Written({"lineitem": items_written})

    def replay_initial(self) -> Written:
        """The generator's state after ``initial`` without writing a file (its files exist: a run
        that reuses a loaded data root). ``initial`` draws nothing at random, so this is exact."""
        self.batch += 1
        self.customers = self.base_customers
        keys = self._new_orders(self.base_customers * TPCH_ORDERS_PER_CUSTOMER)
        items = int((1 + _below(keys, 5, 7)).sum())
        self.rows = {"customer": self.customers, "orders": len(keys), "lineitem": items}
        return Written(dict(self.rows))

    def change(self, rows: int) -> Written:
        """About ``rows`` changed rows, shaped like ``TpchGenerator.change``: 1% new customers,
        then new orders with their items and whole existing orders deleted, half the rest each."""
        self.batch += 1
        new_cust = np.arange(self.customers + 1, self.customers + 1 + max(1, rows // 100), dtype=np.int64)
        self.customers += len(new_cust)
        budget = max(2, rows - len(new_cust))
        live = np.flatnonzero(self.alive)
        n_del = min(max(1, budget // 10), len(live) - 1)
        doomed = np.sort(self.rng.choice(live, n_del, replace=False)).astype(np.int64) + 1
        self.alive[doomed - 1] = False
        born = self._new_orders(max(1, budget // 10))
        keys = np.concatenate([born, doomed])
        sign = np.concatenate([np.ones(len(born), np.int64), -np.ones(len(doomed), np.int64)])
        orders, items = self.order_rows(keys)
        item_sign = np.repeat(sign, 1 + _below(keys, 5, 7))  # order_rows' items per order, in order
        written = {"customer": self._write("customer", 0, self.customer_rows(new_cust), np.ones(len(new_cust), np.int64)),
                   "orders": self._write("orders", 0, orders, sign),
                   "lineitem": self._write("lineitem", 0, items, item_sign)}
        return Written({k: v for k, v in written.items() if v})

    def input_rows(self) -> int:
        """Rows of the integrated inputs (every weight is +1: no tuple repeats)."""
        return sum(self.rows.values())

    def load_glob(self, name: str) -> str:
        """The load's files of ``name``: the initial tables as plain rows (``_weight`` all 1)."""
        return os.path.join(self.root, "inbox", name, "b000001-*.parquet")

    def all_glob(self, name: str) -> str:
        return os.path.join(self.root, "inbox", name, "*.parquet")


Q3_FILTER = """c.c_mktsegment = 'BUILDING' AND o.o_orderdate < DATE '1995-03-15'
          AND l.l_shipdate > DATE '1995-03-15'"""


def q3_tables(gen: LeanTpch) -> str:
    """Q3 over the load's tables as plain rows: what a batch engine recomputes (the same work as
    over the current tables, which differ from them by the changes' few rows)."""
    c, o, l_ = (gen.load_glob(n) for n in ("customer", "orders", "lineitem"))
    return f"""
        SELECT l_orderkey, o_orderdate, o_shippriority,
               sum(l_extendedprice * (1 - l_discount)) AS revenue, count(*) AS items
        FROM read_parquet('{c}') c JOIN read_parquet('{o}') o ON c.c_custkey = o.o_custkey
        JOIN read_parquet('{l_}') l ON l.l_orderkey = o.o_orderkey
        WHERE {Q3_FILTER}
        GROUP BY l_orderkey, o_orderdate, o_shippriority"""


def q3_integrated(gen: LeanTpch) -> str:
    """Q3 over the integrated inputs: every change file, weights multiplied through the joins."""
    c, o, l_ = (gen.all_glob(n) for n in ("customer", "orders", "lineitem"))
    return f"""
        SELECT l_orderkey, o_orderdate, o_shippriority,
               sum(l_extendedprice * (1 - l_discount) * (c._weight * o._weight * l._weight)) AS revenue,
               sum(c._weight * o._weight * l._weight) AS items
        FROM read_parquet('{c}') c JOIN read_parquet('{o}') o ON c.c_custkey = o.o_custkey
        JOIN read_parquet('{l_}') l ON l.l_orderkey = o.o_orderkey
        WHERE {Q3_FILTER}
        GROUP BY l_orderkey, o_orderdate, o_shippriority
        HAVING sum(c._weight * o._weight * l._weight) <> 0"""
