"""A Nexmark-style event generator: people who register, open auctions and bid, in event time.

Nexmark (the online-auction benchmark of streaming systems) has three streams: persons,
auctions and bids, with event times, in proportions 1 : 3 : 46. This generator writes them as
batches of Parquet files, one batch per timestep, with what makes streams hard:

- event times advance ``batch_seconds`` of event time per batch;
- events arrive out of order: each arrives ``0 .. disorder_seconds`` after its event time, so a
  batch holds events of earlier batches' time ranges (keep ``disorder_seconds`` below the
  inputs' lateness minus ``batch_seconds`` and none of them is late);
- a fraction ``late_fraction`` of the events arrives ``late_seconds`` after its time or more:
  beyond the lateness, so the engine must drop (or refuse) them;
- bids go to open auctions, mostly recent ones (hot items), from registered people.

Nothing here needs Spark: rows are generated with ``random``/numpy and written with pyarrow,
atomically (temporary name, then rename). The generator is deterministic for a seed; a batch's
rows (``NexmarkBatch.rows``) are what a test needs to recompute views from scratch.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")
SCHEMAS = {
    "persons": pa.schema([("id", pa.int64()), ("name", pa.string()), ("city", pa.string()),
                          ("state", pa.string()), ("ts", TS)]),
    "auctions": pa.schema([("id", pa.int64()), ("seller", pa.int64()), ("category", pa.int64()),
                           ("initial_bid", pa.int64()), ("expires", TS), ("ts", TS)]),
    "bids": pa.schema([("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()),
                       ("channel", pa.string()), ("ts", TS)]),
}
# Nexmark's proportions per 50 events
PERSON_SHARE, AUCTION_SHARE, BID_SHARE = 1, 3, 46
CITIES = (("Portland", "OR"), ("Seattle", "WA"), ("Boise", "ID"), ("Phoenix", "AZ"), ("Reno", "NV"),
          ("Bend", "OR"), ("Tacoma", "WA"), ("Tucson", "AZ"))
FIRST = ("Ada", "Bo", "Cy", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kim", "Lu", "Max", "Ned")
CHANNELS = ("web", "app", "api")
CATEGORIES = 10
AUCTION_SECONDS = 600  # how long an auction takes bids


@dataclass
class NexmarkBatch:
    """The rows of one batch per stream (dicts with datetime event times), in arrival order."""

    index: int
    rows: dict[str, list[dict[str, Any]]]

    @property
    def events(self) -> int:
        return sum(len(r) for r in self.rows.values())


@dataclass
class NexmarkGenerator:
    """Batches of Nexmark-style events; see the module docstring."""

    seed: int = 1
    events_per_batch: int = 1000
    batch_seconds: int = 60
    disorder_seconds: int = 120
    late_fraction: float = 0.0
    late_seconds: int = 3600
    hot_auctions: int = 5  # bids concentrate on this many most recent auctions
    start: datetime = START
    _rng: random.Random = field(init=False, repr=False)
    _np: np.random.Generator = field(init=False, repr=False)
    _batch: int = field(default=0, init=False)
    _pending: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list, init=False, repr=False)
    _persons: list[int] = field(default_factory=list, init=False, repr=False)
    _auctions: list[tuple[int, datetime]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._np = np.random.default_rng(self.seed)

    # ---- events ------------------------------------------------------------------------------
    def _at(self, second: float) -> datetime:
        return self.start + timedelta(microseconds=int(second * 1_000_000))

    def _arrival(self, second: float) -> int:
        """The batch an event of event time ``second`` arrives in (never before its own)."""
        if self.late_fraction and self._rng.random() < self.late_fraction:
            delay = self.late_seconds * (1 + self._rng.random())
        else:
            delay = self._rng.random() * self.disorder_seconds
        return max(int((second + delay) // self.batch_seconds), int(second // self.batch_seconds))

    def _person(self, second: float) -> dict[str, Any]:
        pid = 1000 + len(self._persons)
        self._persons.append(pid)
        city, state = self._rng.choice(CITIES)
        return {"id": pid, "name": f"{self._rng.choice(FIRST)} {pid}", "city": city, "state": state,
                "ts": self._at(second)}

    def _auction(self, second: float) -> dict[str, Any]:
        aid = 1000 + len(self._auctions)
        ts = self._at(second)
        self._auctions.append((aid, ts))
        return {"id": aid, "seller": self._rng.choice(self._persons), "category": self._rng.randrange(CATEGORIES),
                "initial_bid": self._rng.randrange(1, 100), "expires": ts + timedelta(seconds=AUCTION_SECONDS),
                "ts": ts}

    def _bids(self, seconds: np.ndarray) -> list[dict[str, Any]]:
        """Bids at the given event times: mostly on the newest auctions, from any person."""
        n = len(seconds)
        recent = len(self._auctions)
        hot = self._np.random(n) < 0.7
        back = np.where(hot, self._np.integers(0, max(1, min(self.hot_auctions, recent)), n),
                        self._np.integers(0, max(1, min(100, recent)), n))
        auction = [self._auctions[recent - 1 - int(b)][0] for b in back]
        bidder = self._np.integers(0, len(self._persons), n)
        price = (self._np.pareto(1.5, n) * 100).astype(np.int64) + 1
        channel = self._np.integers(0, len(CHANNELS), n)
        return [{"auction": auction[i], "bidder": self._persons[int(bidder[i])], "price": int(price[i]),
                 "channel": CHANNELS[int(channel[i])], "ts": self._at(float(seconds[i]))} for i in range(n)]

    def next_batch(self) -> NexmarkBatch:
        """The events that arrive in the next batch (new ones and earlier ones delayed)."""
        b = self._batch
        self._batch += 1
        lo = b * self.batch_seconds
        n = self.events_per_batch
        seconds = np.sort(lo + self._np.random(n) * self.batch_seconds)
        kind = self._np.integers(0, PERSON_SHARE + AUCTION_SHARE + BID_SHARE, n)
        if not self._persons:  # the first events: someone to sell and bid
            kind[:2] = 0
            kind[2:4] = 1
        events: list[tuple[float, str, dict[str, Any] | None]] = []
        bid_seconds = []
        for s, k in zip(seconds, kind):
            if k < PERSON_SHARE:
                events.append((s, "persons", self._person(float(s))))
            elif k < PERSON_SHARE + AUCTION_SHARE and self._persons:
                events.append((s, "auctions", self._auction(float(s))))
            else:
                bid_seconds.append(s)
        if not self._auctions and bid_seconds:  # no auction yet to bid on
            s = bid_seconds.pop(0)
            events.append((s, "auctions", self._auction(float(s))))
        events += [(s, "bids", r) for s, r in zip(bid_seconds, self._bids(np.array(bid_seconds)))]
        for s, stream, row in events:
            self._pending.append((self._arrival(float(s)), stream, row))
        now = [(stream, row) for at, stream, row in self._pending if at <= b]
        self._pending = [p for p in self._pending if p[0] > b]
        rows: dict[str, list[dict[str, Any]]] = {k: [] for k in SCHEMAS}
        for stream, row in now:
            rows[stream].append(row)
        return NexmarkBatch(b, rows)

    # ---- files -------------------------------------------------------------------------------
    def write_batch(self, data_root: str, folder: str = "inbox/nexmark") -> NexmarkBatch:
        """Write the next batch as ``<folder>/<stream>/b<index>.parquet`` (streams without an event
        in this batch get no file, but their folder exists: a step refuses a missing one); returns
        the batch."""
        batch = self.next_batch()
        for stream, rows in batch.rows.items():
            os.makedirs(os.path.join(data_root, folder, stream), exist_ok=True)
            if rows:
                write_rows(os.path.join(data_root, folder, stream, f"b{batch.index:06d}.parquet"), rows,
                           SCHEMAS[stream])
        return batch


def write_rows(path: str, rows: list[dict[str, Any]], schema: pa.Schema) -> str:
    """Write rows atomically (a hidden temporary name, then a rename): a step never reads half a file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    """Write batches for the Nexmark example circuits (``circuits/nexmark_*.yaml``): batch i is
    generated from the seed, so a second run with more batches writes only the new files."""
    parser = argparse.ArgumentParser(description="Write Nexmark-style event batches (persons, auctions, bids).")
    parser.add_argument("--data-root", default="data/nexmark")
    parser.add_argument("--batches", type=int, default=10, help="batches 0 .. N-1 (one timestep each)")
    parser.add_argument("--events", type=int, default=1000, help="events per batch")
    parser.add_argument("--batch-seconds", type=int, default=60, help="event time per batch")
    parser.add_argument("--disorder-seconds", type=int, default=120, help="arrivals up to this late")
    parser.add_argument("--late-fraction", type=float, default=0.01, help="events beyond the lateness")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    gen = NexmarkGenerator(seed=args.seed, events_per_batch=args.events, batch_seconds=args.batch_seconds,
                           disorder_seconds=args.disorder_seconds, late_fraction=args.late_fraction,
                           late_seconds=600)
    folder = os.path.join(args.data_root, "inbox", "nexmark")
    written = 0
    for _ in range(args.batches):
        batch = gen.next_batch()
        for stream, rows in batch.rows.items():
            path = os.path.join(folder, stream, f"b{batch.index:06d}.parquet")
            if rows and not os.path.exists(path):  # a consumed file is never rewritten
                write_rows(path, rows, SCHEMAS[stream])
                written += 1
    print(f"{args.batches} batches of ~{args.events} events under {folder} ({written} new files)")
    return 0


__all__ = ["NexmarkBatch", "NexmarkGenerator", "SCHEMAS", "START", "main", "write_rows"]


if __name__ == "__main__":
    sys.exit(main())
