"""Random streams with deletes through circuits whose inputs are CSV, JSON lines (plain and
gzipped), snapshots and cdc records, run on Spark, in-process on Arrow and alternating
(``tests/engines.py``): the committed view deltas agree at every step, the in-process steps read
the text files themselves (never handed to Spark), and the inputs' own traces (``snapshot:<name>``,
``keyed:<name>``) written by either engine are read by the other. The cdc and snapshot streams are
also checked against the final tables they describe, evaluated from scratch."""
from __future__ import annotations

import datetime
import decimal
import gzip
import json
import math
import os
import random
from collections import Counter

import pytest

from tests.engines import DATES, KEYS, MONEY, STRINGS, TIMES, Bag, maybe, run_both, run_steps
from spark_jobs.state.arrow_read import read_view
from spark_jobs.runtime.circuit import open_circuit
from tests.policies import config

DOUBLES = lambda r: maybe(r, [0.5, -1.25, 3.0, float("nan"), 1e300])  # noqa: E731
FLAGS = lambda r: maybe(r, [True, False])  # noqa: E731
A = ({"k": "long", "s": "string", "d": "date", "m": "decimal(10,2)", "x": "double", "b": "boolean", "ts": "timestamp"},
     {"k": KEYS, "s": STRINGS, "d": DATES, "m": MONEY, "x": DOUBLES, "b": FLAGS, "ts": TIMES})
C = ({"k": "long", "w": "long"}, {"k": KEYS, "w": KEYS})

CHANGES = """\
name: text_changes
inputs:
  a:
    schema: {k: long, s: string, d: date, m: "decimal(10,2)", x: double, b: boolean, ts: timestamp}
    source: {kind: changes, path: inbox/a, format: FMT_A}
  c:
    schema: {k: long, w: long}
    source: {kind: changes, path: inbox/c, format: FMT_C}
nodes:
  f:  {op: filter, input: a, where: "x IS NULL OR x > 0"}
  g:  {op: aggregate, input: f, group_by: [k], aggregates: {n: "count(*)", top: "max(m)", lo: "min(d)", hi: "max(ts)"}}
  j:  {op: join, left: a, right: c, on: [k]}
  dj: {op: distinct, input: j}
outputs: [g, dj]
"""


def text_of(value, fmt: str) -> str | None:
    """A value as a CSV field or a JSON value (None: an empty CSV field / a JSON null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = "NaN" if math.isnan(value) else repr(value)
        return json.dumps(text) if fmt == "json" and math.isnan(value) else text
    if isinstance(value, datetime.datetime):
        text = value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + "Z"
        return json.dumps(text) if fmt == "json" else text
    if isinstance(value, (datetime.date, decimal.Decimal, int)):
        text = value.isoformat() if isinstance(value, datetime.date) else str(value)
        return json.dumps(text) if fmt == "json" and isinstance(value, datetime.date) else text
    return json.dumps(value, ensure_ascii=False) if fmt == "json" else value


def write_text_rows(path: str, columns: list[str], rows: list[tuple], weights: list[int] | None, fmt: str,
                    rng: random.Random) -> None:
    """Rows as a CSV file (header in a random order, CRLF or LF) or JSON lines (keys in a random
    order, NULLs written or left out), gzipped when the name says so."""
    order = list(range(len(columns))) + ([len(columns)] if weights is not None else [])
    rng.shuffle(order)
    names = columns + ["_weight"]
    lines = []
    if fmt == "csv":
        lines.append(",".join(names[i] for i in order))
    for n, row in enumerate(rows):
        values = list(row) + ([weights[n]] if weights is not None else [])
        if fmt == "csv":
            lines.append(",".join(text_of(values[i], fmt) or "" for i in order))
        else:
            pairs = [(names[i], text_of(values[i], fmt)) for i in order]
            pairs = [(k, "null" if v is None else v) for k, v in pairs if v is not None or rng.random() < 0.5]
            lines.append("{" + ", ".join(f'"{k}": {v}' for k, v in pairs) + "}")
    data = (rng.choice(["\n", "\r\n"]).join(lines) + "\n").encode("utf-8")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(gzip.compress(data) if path.endswith(".gz") else data)


def change_writer(formats: dict[str, str], seed: int):
    """Each input's change as a text file of its format, weights in a ``_weight`` column."""
    rng = random.Random(seed)

    def write(root: str, name: str, t: int, bag: Bag, change: Counter) -> None:
        fmt = formats[name]
        ext = {"csv": "csv", "json": "jsonl"}[fmt] + (".gz" if t % 3 == 0 else "")
        rows = list(change)
        write_text_rows(os.path.join(root, "inbox", name, f"t{t:04d}.{ext}"), list(bag.columns), rows,
                        [change[r] for r in rows], fmt, random.Random(rng.random()))
    return write


def test_csv_and_json_lines_changes_agree_on_both_engines(spark, tmp_path):
    circuit = CHANGES.replace("FMT_A", "csv").replace("FMT_C", "jsonl")
    engines = run_both(tmp_path, circuit, {"a": A, "c": C}, steps=4, seed=31,
                       writer=change_writer({"a": "csv", "c": "json"}, 7))
    assert engines == ["arrow", "spark", "arrow", "spark"]


def test_json_lines_and_gzipped_csv_changes_agree_on_both_engines(spark, tmp_path):
    circuit = CHANGES.replace("FMT_A", "jsonl").replace("FMT_C", "csv")
    engines = run_both(tmp_path, circuit, {"a": A, "c": C}, steps=4, seed=32,
                       writer=change_writer({"a": "json", "c": "csv"}, 8))
    assert engines == ["arrow", "spark", "arrow", "spark"]


# ---- snapshots ----------------------------------------------------------------------------------

SNAPSHOTS = """\
name: text_snapshots
inputs:
  p:
    schema: {k: long, s: string, m: "decimal(10,2)", d: date}
    source: {kind: snapshots, path: snaps/p, format: FMT}
nodes:
  g: {op: aggregate, input: p, group_by: [k], aggregates: {n: "count(*)", top: "max(m)", lo: "min(s)"}}
  f: {op: filter, input: p, where: "k IS NOT NULL"}
outputs: [g, f]
"""
P = ({"k": "long", "s": "string", "m": "decimal(10,2)", "d": "date"}, {"k": KEYS, "s": STRINGS, "m": MONEY, "d": DATES})


def snapshot_writer(fmt: str, seed: int):
    """The whole relation after each change, as a new snapshot: a file, or a folder of two parts
    with ``_SUCCESS``."""
    rng = random.Random(seed)

    def write(root: str, name: str, t: int, bag: Bag, change: Counter) -> None:
        rows = [r for r, w in sorted(bag.rows.items(), key=repr) for _ in range(w)]
        ext = {"csv": "csv", "json": "jsonl"}[fmt]
        folder = os.path.join(root, "snaps", name)
        if t % 2:
            write_text_rows(os.path.join(folder, f"s{t:04d}.{ext}"), list(bag.columns), rows, None, fmt,
                            random.Random(rng.random()))
            return
        half = len(rows) // 2
        for part, chunk in enumerate((rows[:half], rows[half:])):
            write_text_rows(os.path.join(folder, f"s{t:04d}", f"part-{part}.{ext}"), list(bag.columns), chunk,
                            None, fmt, random.Random(rng.random()))
        open(os.path.join(folder, f"s{t:04d}", "_SUCCESS"), "w").close()
    return write


def _view(rt, view: str) -> Counter:
    table = read_view(rt.committed, view)
    cols = [c for c in table.column_names if c != "_weight"]
    return Counter({tuple(r[:-1]): r[-1] for r in zip(*[table.column(c).to_pylist() for c in cols + ["_weight"]])})


def test_snapshots_in_csv_and_json_agree_on_both_engines_and_with_the_last_snapshot(spark, tmp_path):
    for fmt, seed in (("csv", 41), ("json", 42)):
        root = tmp_path / fmt
        root.mkdir()
        bags: dict = {}

        def keep(write):
            def wrapped(r, name, t, bag, change):
                bags[name] = bag
                write(r, name, t, bag, change)
            return wrapped

        circuit = SNAPSHOTS.replace("FMT", "jsonl" if fmt == "json" else fmt)
        engines = run_both(root, circuit, {"p": P}, steps=5, seed=seed, sizes=lambda t: (8, 4),
                           writer=keep(snapshot_writer(fmt, seed)))
        assert engines == ["arrow", "spark", "arrow", "spark", "arrow"]
        rt = open_circuit(str(root / "circuit.yaml"), config(str(root / "arrow"), engine="arrow"))
        # the view f is the last snapshot (a CSV empty string reads as NULL)
        want = Counter()
        for row, w in bags["p"].rows.items():
            k, s, m, d = row
            if k is not None:
                want[(k, None if s == "" and fmt == "csv" else s, m, d)] += w
        assert _view(rt, "f") == want


# ---- cdc ----------------------------------------------------------------------------------------

CDC = """\
name: text_cdc
inputs:
  o:
    schema: {id: long, cust: string, amount: "decimal(10,2)", op: string, seq: long}
    key: [id]
    source: {kind: cdc, path: cdc/o, format: FMT, sequence: seq, unknown_key: count ENVELOPE}
nodes:
  per: {op: aggregate, input: o, group_by: [cust], aggregates: {n: "count(*)", top: "max(amount)"}}
  big: {op: filter, input: o, where: "amount > 10"}
outputs: [per, big]
"""


class Records:
    """Random cdc records over few keys (every op, unknown keys, several records per key per
    step, shuffled across two files: the sequence decides), and the keyed table they make."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.table: dict[int, tuple] = {}
        self.seq = 0
        self.unknown = 0

    def step(self) -> list[dict]:
        recs = []
        for _ in range(self.rng.randint(3, 9)):
            self.seq += 1
            op = self.rng.choice("ccruudd")
            rec = {"id": self.rng.randint(1, 8), "op": op, "seq": self.seq}
            if op != "d":
                rec.update(cust=self.rng.choice(["x", "y", "é"]), amount=decimal.Decimal(self.rng.randint(0, 3000)) / 100)
            recs.append(rec)
        for r in recs:  # the oracle: in sequence order
            if r["op"] in "cr" or (r["op"] == "u" and r["id"] in self.table):
                self.table[r["id"]] = (r["cust"], r["amount"], r["seq"])
            elif r["op"] == "d" and r["id"] in self.table:
                del self.table[r["id"]]
            else:
                self.unknown += 1
        self.rng.shuffle(recs)
        return recs


def cdc_files(root: str, t: int, recs: list[dict], fmt: str, envelope: bool) -> None:
    split = len(recs) // 2
    for part, chunk in enumerate((recs[:split], recs[split:])):
        name = os.path.join(root, "cdc", "o", f"b{t:04d}{'ab'[part]}.{'csv' if fmt == 'csv' else 'jsonl'}")
        os.makedirs(os.path.dirname(name), exist_ok=True)
        with open(name, "w", encoding="utf-8") as fh:
            if fmt == "csv":
                fh.write("id,cust,amount,op,seq\n")
                fh.writelines(f"{r['id']},{r.get('cust', '')},{r.get('amount', '')},{r['op']},{r['seq']}\n" for r in chunk)
            elif envelope:
                for r in chunk:
                    row = {"id": r["id"], "cust": r.get("cust"), "amount": str(r.get("amount"))}
                    after = None if r["op"] == "d" else row
                    fh.write(json.dumps({"before": {"id": r["id"]} if r["op"] in "ud" else None, "after": after,
                                         "op": r["op"], "seq": r["seq"], "source": {"db": "shop"}}) + "\n")
            else:
                fh.writelines(json.dumps({k: str(v) if isinstance(v, decimal.Decimal) else v for k, v in r.items()}) + "\n"
                              for r in chunk)


@pytest.mark.slow
def test_cdc_records_in_csv_json_and_debezium_envelopes_agree_on_both_engines_and_with_the_keyed_table(spark, tmp_path):
    for fmt, envelope, seed in (("csv", False, 51), ("jsonl", False, 52), ("jsonl", True, 53)):
        root = tmp_path / f"{fmt}{envelope}"
        root.mkdir()
        source = Records(seed)
        circuit = CDC.replace("FMT", fmt).replace(" ENVELOPE", ", after: after, before: before" if envelope else "")
        engines = run_steps(root, circuit, 6, lambda roots, t: [cdc_files(r, t, recs, fmt, envelope)
                                                               for recs in [source.step()] for r in roots])
        assert engines == ["arrow", "spark"] * 3
        for kind in ("arrow", "mixed", "spark"):
            rt = open_circuit(str(root / "circuit.yaml"), config(str(root / kind), engine="arrow"))
            assert _view(rt, "big") == Counter({(i, c, a, s): 1
                                                for i, (c, a, s) in source.table.items() if a > 10}), kind
            assert rt.committed.manifest().inputs["o"].get("unknown_keys", 0) == source.unknown, kind
        assert source.unknown > 0
