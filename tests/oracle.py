"""An independent oracle: the example circuits' views recomputed by DuckDB in plain SQL over every
input file of the data root (changes integrated by summing weights, snapshots = the newest one).
"""
from __future__ import annotations

import glob
import os
from collections import Counter

import duckdb


def _changes(con, name: str, folder: str, columns: str) -> None:
    files = sorted(glob.glob(os.path.join(folder, "**", "*.parquet"), recursive=True))
    if not files:
        raise AssertionError(f"no input files in {folder}")
    con.execute(f"""CREATE TEMP TABLE {name}_z AS
        SELECT {columns}, SUM(_weight)::BIGINT AS w FROM read_parquet({files!r}) GROUP BY ALL HAVING w > 0""")
    # expand multiplicities into a bag
    con.execute(f"CREATE TEMP TABLE {name} AS SELECT {columns} FROM {name}_z, range(w)")


def paper_example(data_root: str) -> dict[str, Counter]:
    con = duckdb.connect()
    _changes(con, "t", os.path.join(data_root, "inbox", "t"), "id, a, x")
    _changes(con, "r", os.path.join(data_root, "inbox", "r"), "id, s, y")
    rows = con.execute("""
        SELECT DISTINCT t1.x, t2.y FROM (SELECT x, id FROM t WHERE a > 2) t1
        JOIN (SELECT id, y FROM r WHERE s > 5) t2 ON t1.id = t2.id""").fetchall()
    return {"v": Counter({tuple(r): 1 for r in rows})}


def revenue_by_region(data_root: str) -> dict[str, Counter]:
    con = duckdb.connect()
    _changes(con, "orders", os.path.join(data_root, "inbox", "orders"), "order_id, customer_id, amount, status")
    snaps = sorted(glob.glob(os.path.join(data_root, "snapshots", "customers", "*.csv")))
    con.execute(f"""CREATE TEMP TABLE customers AS SELECT * FROM read_csv({snaps[-1]!r}, header=true,
                    columns={{'customer_id': 'BIGINT', 'name': 'VARCHAR', 'region': 'VARCHAR'}})""")
    con.execute("""CREATE TEMP TABLE enriched AS SELECT o.customer_id, o.order_id, o.amount, o.status, c.name, c.region
                   FROM orders o JOIN customers c ON o.customer_id = c.customer_id WHERE o.status = 'paid'""")
    by_region = con.execute("""SELECT region, round(SUM(amount), 6), COUNT(*), round(AVG(amount), 6)
                               FROM enriched GROUP BY region""").fetchall()
    extremes = con.execute("""SELECT region, MAX(amount), MIN(amount), COUNT(DISTINCT customer_id)
                              FROM enriched GROUP BY region""").fetchall()
    big = con.execute("SELECT DISTINCT region, name FROM enriched WHERE amount >= 100").fetchall()
    return {"by_region": Counter({tuple(r): 1 for r in by_region}),
            "order_extremes": Counter({tuple(r): 1 for r in extremes}),
            "big_spenders": Counter({tuple(r): 1 for r in big})}


def view_counter(rt, view: str, t: int | None = None, round_floats: bool = True) -> Counter:
    """A committed view of a circuit as a Counter (floats rounded like the oracle's)."""
    from spark_jobs.cli.render import collect_consolidated

    columns = rt.compiled.incremental[rt.compiled.incremental.outputs[view]].columns
    rows = collect_consolidated(rt.store.read_view(view, t), columns)
    out: Counter = Counter()
    for r in rows:
        values = tuple(round(v, 6) if round_floats and isinstance(v, float) else v for v in r[:-1])
        out[values] += r[-1]
    return out


def assert_views_close(got: dict[str, Counter], expected: dict[str, Counter], label: str = "",
                       tolerance: float = 1.5e-6) -> None:
    """Views equal up to their doubles, which may differ by one unit of the 6th decimal: both sides
    round to 6 digits, and two sums that differ in their last bits (the engine's exact sum, DuckDB's
    sum in its own order) can round to either side of a half (133.4215625 -> .421562 or .421563)."""
    assert got.keys() == expected.keys(), f"{label}: views {sorted(got)} != {sorted(expected)}"
    for view in got:
        def rows(c: Counter) -> list[tuple]:
            return sorted(((t, w) for t, w in c.items()), key=lambda tw: repr([v for v in tw[0] if not isinstance(v, float)]))
        a, b = rows(got[view]), rows(expected[view])
        ok = len(a) == len(b) and all(
            wa == wb and len(ta) == len(tb) and all(
                abs(x - y) <= tolerance if isinstance(x, float) and isinstance(y, float) else x == y
                for x, y in zip(ta, tb)) for (ta, wa), (tb, wb) in zip(a, b))
        assert ok, f"{label} {view}: {dict(got[view])} != {dict(expected[view])}"
