"""A tiny TPC-H-shaped data set and its refresh changes, for the SQL TPC-H circuit's tests.

Rows follow ``circuits/tpch_sql.yaml``'s schemas. Values are drawn so that every query's filters
select something (dates around 1993-1996, ASIA, SAUDI ARABIA, BUILDING, PROMO parts, returned
items, late receipts, orders of many items for Q18). A change inserts new orders with their line
items and deletes whole existing orders with all their line items (TPC-H's refresh functions),
and adds a customer now and then.
"""
from __future__ import annotations

import datetime
import random
from collections import Counter

NATIONS = [(0, "ALGERIA", 0), (1, "CHINA", 2), (2, "JAPAN", 2), (3, "SAUDI ARABIA", 4), (4, "FRANCE", 3),
           (5, "INDIA", 2)]
REGIONS = [(0, "AFRICA"), (1, "AMERICA"), (2, "ASIA"), (3, "EUROPE"), (4, "MIDDLE EAST")]
SEGMENTS = ["BUILDING", "AUTOMOBILE", "MACHINERY"]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "5-LOW"]
MODES = ["MAIL", "SHIP", "AIR", "TRUCK"]
COMMENTS = ["quick deposits", "special packages requests", "regular accounts", "pending special requests"]


class TinyTpch:
    def __init__(self, seed: int = 7, customers: int = 12, suppliers: int = 6, parts: int = 8) -> None:
        self.rng = random.Random(seed)
        self.orders: dict[int, tuple] = {}
        self.items: dict[int, list[tuple]] = {}
        self.n_customers, self.n_suppliers, self.n_parts = customers, suppliers, parts
        self.next_order = 1
        self.next_customer = customers + 1

    def _date(self, lo: str = "1993-06-01", days: int = 1100) -> datetime.date:
        return datetime.date.fromisoformat(lo) + datetime.timedelta(days=self.rng.randrange(days))

    def _customer(self, key: int) -> tuple:
        r = self.rng
        return (key, f"Customer#{key:03d}", f"addr{key}", r.choice([1, 1, 2, 2, 3, 0, 4, 5]), f"1{key % 9}-555",
                round(r.uniform(-100, 900), 2), r.choice(SEGMENTS), r.choice(COMMENTS))

    def _order(self) -> tuple[tuple, list[tuple]]:
        r = self.rng
        key = self.next_order
        self.next_order += 1
        date = self._date()
        big = r.random() < 0.15  # Q18: orders of more than 300 units
        items = []
        for line in range(1, r.randint(2, 7) + 1):
            qty = float(r.randint(45, 50) if big else r.randint(1, 30))
            ship = date + datetime.timedelta(days=r.randint(1, 60))
            commit = date + datetime.timedelta(days=r.randint(20, 60))
            receipt = ship + datetime.timedelta(days=r.randint(1, 30))
            items.append((key, r.randint(1, self.n_parts), r.randint(1, self.n_suppliers), line, qty,
                          round(qty * r.uniform(900, 1100), 2), r.choice([0.0, 0.04, 0.05, 0.06, 0.07, 0.1]),
                          r.choice([0.0, 0.02, 0.08]), r.choice("RAN"), r.choice("OF"), ship, commit, receipt,
                          r.choice(MODES)))
        status = r.choice("FFOP")
        order = (key, r.randint(1, self.next_customer - 1), status, round(sum(i[5] for i in items), 2), date,
                 r.choice(PRIORITIES), 0, r.choice(COMMENTS))
        return order, items

    def initial(self, orders: int = 60) -> dict[str, Counter]:
        out = {
            "region": Counter(REGIONS), "nation": Counter(NATIONS),
            "supplier": Counter((k, f"Supplier#{k:03d}", (1, 2, 3, 1, 3, 2)[k % 6]) for k in range(1, self.n_suppliers + 1)),
            "part": Counter((k, self.rng.choice(["PROMO BRUSHED", "STANDARD PLATED", "PROMO ANODIZED", "ECONOMY"]))
                            for k in range(1, self.n_parts + 1)),
            "customer": Counter(self._customer(k) for k in range(1, self.n_customers + 1)),
        }
        out["orders"], out["lineitem"] = Counter(), Counter()
        for _ in range(orders):
            o, items = self._order()
            self.orders[o[0]], self.items[o[0]] = o, items
            out["orders"][o] += 1
            out["lineitem"].update(items)
        return out

    def change(self, inserts: int = 3, deletes: int = 2) -> dict[str, Counter]:
        """New orders with their items, deleted orders with all their items, maybe a customer."""
        out = {"orders": Counter(), "lineitem": Counter(), "customer": Counter()}
        for key in self.rng.sample(sorted(self.orders), min(deletes, len(self.orders))):
            out["orders"][self.orders.pop(key)] -= 1
            out["lineitem"].subtract(Counter(self.items.pop(key)))
        if self.rng.random() < 0.3:
            out["customer"][self._customer(self.next_customer)] += 1
            self.next_customer += 1
        for _ in range(inserts):
            o, items = self._order()
            self.orders[o[0]], self.items[o[0]] = o, items
            out["orders"][o] += 1
            out["lineitem"].update(items)
        return out
