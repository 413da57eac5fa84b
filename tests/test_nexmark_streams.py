"""The Nexmark example circuits (``circuits/nexmark_*.yaml``) over a long generated event stream
(``tests/time_streams.py``): 105 committed timesteps with out-of-order arrivals inside the
lateness and some late rows, all four examples in one circuit (one step per batch serves every
view). At every step of the first 12 and every 3rd after, each view equals a from-scratch DuckDB
evaluation over the rows that were not late; late rows are counted exactly at every step; the
state of the windowed aggregates, the top-k and the windowed join stays within a constant factor
of one window's worth, and the stream join keeps no state of the bids. Steps run in-process on
Arrow, step 60 on Spark (both engines read the state the other wrote).
"""
from __future__ import annotations

from collections import Counter

from spark_jobs.examples.nexmark import NexmarkGenerator
from tests.conftest import ROOT
from tests.time_streams import NexmarkRun, combined_circuit

STEPS = 105
EXAMPLES = ["nexmark_bids_on_arrival", "nexmark_hot_items", "nexmark_highest_bid", "nexmark_new_sellers"]
MINUTE_US = 60_000_000


def windows(size_min: int, slide_min: int, table: str, columns: str) -> str:
    """``table``'s rows, each once per window of ``size``/``slide`` minutes it falls in, as Spark's
    ``window()`` assigns them (aligned on the epoch), with ``window_start``/``window_end``."""
    size, slide = size_min * MINUTE_US, slide_min * MINUTE_US
    return f"""(SELECT make_timestamp(ws) AS window_start, make_timestamp(ws + {size}) AS window_end, {columns}
               FROM (SELECT *, (floor(epoch_us(ts) / {slide})::BIGINT - k) * {slide} AS ws
                     FROM {table} CROSS JOIN range({size // slide}) AS r(k)))"""


ON_ARRIVAL = "FROM bids b JOIN auctions a ON b.auction = a.id AND a._step <= b._step"
ORACLE = {  # each view from scratch over the accepted rows (tables named as the inputs, with _step)
    "priced": f"""SELECT b.auction, b.bidder, b.price, b.channel, b.ts, a.id, a.seller, a.category, a.initial_bid,
                         a.expires, a.ts {ON_ARRIVAL}""",
    "per_category": f"SELECT a.category, count(*), max(b.price), sum(b.price) {ON_ARRIVAL} GROUP BY a.category",
    "hot_items": f"""SELECT window_start, window_end, auction, n FROM (
                         SELECT *, rank() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) AS r
                         FROM (SELECT window_start, window_end, auction, count(*) AS n
                               FROM {windows(10, 2, "bids", "auction")} GROUP BY ALL)) WHERE r <= 1""",
    "highest_bid": f"""SELECT window_start, window_end, auction, bidder, price, channel, ts FROM (
                           SELECT *, rank() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS r
                           FROM {windows(10, 10, "bids", "auction, bidder, price, channel, ts")}) WHERE r <= 1""",
    "new_seller_names": f"""SELECT p.window_start, p.window_end, p.id, p.name, a.n
                            FROM (SELECT DISTINCT window_start, window_end, id, name
                                  FROM {windows(10, 10, "persons", "id, name")}) p
                            JOIN (SELECT window_start, window_end, seller, count(*) AS n
                                  FROM {windows(10, 10, "auctions", "seller")} GROUP BY ALL) a
                              ON p.window_start = a.window_start AND p.id = a.seller""",
}
# the windowed state, and the view whose one-window rows bound it
BOUNDED = {"bids_per_auction": "bids_per_auction", "I(bids_per_auction)": "bids_per_auction",
           "registered": "registered", "I(registered)": "registered", "selling": "selling", "I(selling)": "selling"}


def _generator() -> NexmarkGenerator:
    """1-minute batches of ~40 events arriving up to 2 minutes late (inside the 5-minute
    lateness), and 3% of them 10 to 20 minutes late (beyond it: dropped)."""
    return NexmarkGenerator(seed=5, events_per_batch=40, batch_seconds=60, disorder_seconds=120,
                            late_fraction=0.03, late_seconds=600)


def _check_views(run: NexmarkRun, t: int) -> None:
    for view, sql in ORACLE.items():
        got, want = run.view(view), run.duckdb_view(sql)
        assert got == want, f"step {t} {view}: only got {dict(got - want)}; only expected {dict(want - got)}"


def test_nexmark_examples_over_a_long_stream(spark, tmp_path):
    path = tmp_path / "nexmark_all.yaml"
    path.write_text(combined_circuit([str(ROOT / "circuits" / f"{name}.yaml") for name in EXAMPLES]))
    run = NexmarkRun(tmp_path, str(path), _generator(), spark_every=60)
    for t in range(1, STEPS + 1):
        run.step()
        if t <= 12 or t % 3 == 0:
            _check_views(run, t)
        assert run.late_totals() == {n: truth.late for n, truth in run.truth.items()}, t
        kept = run.state_rows[-1]
        assert not any("bids)" in trace or trace == "I(bids)" for trace in kept), kept  # no state of the bids
        assert "I(highest_bid.window)" not in kept  # q7's top-k of an append-only input: its top rows only
    assert run.truth["bids"].late > 0 and run.truth["auctions"].late > 0
    unjoined = len(run.truth["bids"].accepted) - sum(run.view("priced").values())
    assert unjoined > 0  # some bids arrived before their auction: never joined (on-arrival semantics)
    _assert_bounded(run)


def _assert_bounded(run: NexmarkRun) -> None:
    """After the first windows close, each windowed trace holds at most a constant number of
    windows' worth of rows (a window's worth: the most groups one window of it ever had), while
    the windows seen so far keep adding up."""
    per_window = {name: max(Counter((r["window_start"]) for r in rows).values())
                  for name, rows in _window_rows(run).items()}
    for trace, source in BOUNDED.items():
        series = [rows.get(trace, 0) for rows in run.state_rows]
        worth = per_window[source]
        assert max(series[30:]) <= 12 * worth, (trace, worth, series)
        assert max(series[-30:]) <= 2 * max(series[30:60]) + worth, (trace, series)  # not growing


def _window_rows(run: NexmarkRun) -> dict[str, list[dict]]:
    """The rows of each windowed aggregate over the accepted rows (DuckDB), for its window's worth."""
    sql = {"bids_per_auction": f"SELECT window_start, auction FROM {windows(10, 2, 'bids', 'auction')} GROUP BY ALL",
           "registered": f"SELECT window_start, id FROM {windows(10, 10, 'persons', 'id, name')} GROUP BY ALL",
           "selling": f"SELECT window_start, seller FROM {windows(10, 10, 'auctions', 'seller')} GROUP BY ALL"}
    return {name: [{"window_start": row[0]} for row in run.duckdb_view(q).elements()] for name, q in sql.items()}
