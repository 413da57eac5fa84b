"""The Nexmark example circuits (``circuits/nexmark_*.yaml``) over long generated event streams
(``tests/time_streams.py``): 100+ committed timesteps with out-of-order arrivals inside the
lateness and some late rows; at every step each view equals a from-scratch DuckDB evaluation over
the rows that were not late, the late rows are counted exactly, and the state stays bounded.
Steps run in-process on Arrow, every 30th on Spark (both engines read the state the other wrote).
"""
from __future__ import annotations

from spark_jobs.examples.nexmark import NexmarkGenerator
from tests.conftest import ROOT
from tests.time_streams import NexmarkRun

STEPS = 120


def _generator(**kw) -> NexmarkGenerator:
    """Small batches: 1-minute batches of ~30 events, arriving up to 2 minutes late (inside the
    5-minute lateness), and 3% of them an hour or more late (dropped)."""
    return NexmarkGenerator(seed=kw.pop("seed", 5), events_per_batch=30, batch_seconds=60, disorder_seconds=120,
                            late_fraction=0.03, late_seconds=3600, **kw)


BIDS_ON_ARRIVAL = {
    "priced": """SELECT b.auction, b.bidder, b.price, b.channel, b.ts, a.id, a.seller, a.category, a.initial_bid,
                        a.expires, a.ts FROM bids b JOIN auctions a ON b.auction = a.id AND a._step <= b._step""",
    "per_category": """SELECT a.category, count(*), max(b.price), sum(b.price)
                       FROM bids b JOIN auctions a ON b.auction = a.id AND a._step <= b._step GROUP BY a.category""",
}


def test_bids_joined_on_arrival_over_a_long_stream(spark, tmp_path):
    """Each bid joined once, in the step it arrives, with the auctions accepted by then (a bid
    that arrives before its auction is never joined); the bids keep no state, the aggregate one
    row per category."""
    run = NexmarkRun(tmp_path, str(ROOT / "circuits" / "nexmark_bids_on_arrival.yaml"), _generator(), spark_every=30)
    for t in range(1, STEPS + 1):
        run.step()
        for view, sql in BIDS_ON_ARRIVAL.items():
            got, want = run.view(view), run.duckdb_view(sql)
            assert got == want, f"step {t} {view}: only got {dict(got - want)}; only expected {dict(want - got)}"
        assert run.late_totals() == {n: truth.late for n, truth in run.truth.items()}, t
        assert set(run.state_rows[-1]) == {"I(auctions)", "per_category"}, run.state_rows[-1]  # no bids
        assert run.state_rows[-1]["per_category"] <= 3 * 10  # one row per category (10), before compaction
    assert sum(t.late for t in run.truth.values()) > 0 and run.view("priced")
    unjoined = len(run.truth["bids"].accepted) - sum(run.view("priced").values())
    assert unjoined > 0  # some bids arrived before their auction: never joined (on-arrival semantics)
