"""Keyed change inputs (`kind: cdc`) and append-only inputs, against a from-scratch evaluation.

The oracle applies every record, in order, to a Python dict (the final keyed table) and
evaluates the views on it from scratch; the engine turns the same records into Z-set changes
by looking the old rows up in the input's keyed integral. Random keyed streams mix inserts,
updates, deletes and upserts, out-of-order sequence numbers within a batch, several records
of one key in one batch, and updates/deletes of unknown keys under each policy: ``count`` and
``ignore`` skip them as the oracle does (``count`` totals them in the manifest); ``refuse`` refuses
the batch, naming each file, commits nothing, and commits the batch once it is resent without them.
"""
from __future__ import annotations

import json
import os
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.config import load_config
from spark_jobs.executor.sources import InputRefused, data_files, read_changes
from spark_jobs.executor.sources.cdc import apply_records, read_records
from spark_jobs.executor.spark.zset import from_tuples
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.inputs import keyed_trace
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text
from spark_jobs.state.arrow_read import read_view
from tests.streams import collect_all

OPS = {"c": "insert", "r": "upsert", "u": "update", "d": "delete"}


def _apply(table: dict, records: list[dict], key: tuple[str, ...], values: tuple[str, ...]) -> list[dict]:
    """The oracle: apply ``records`` in order to ``table`` (key -> values); the unknown ones."""
    unknown = []
    for r in records:
        k, kind = tuple(r[c] for c in key), OPS[r["op"]]
        if kind in ("insert", "upsert") or (kind == "update" and k in table):
            table[k] = tuple(r.get(c) for c in values)
        elif kind == "delete" and k in table:
            del table[k]
        else:
            unknown.append(r)
    return unknown


def _random_records(rng: random.Random, keys: list[tuple], n: int) -> list[dict]:
    out = []
    for _ in range(n):
        op = rng.choice("ccruudd")
        rec = {"op": op, **dict(zip(("case", "k"), rng.choice(keys)))}
        if op != "d":
            rec["v"] = rng.choice((None, rng.randint(0, 9)))
        out.append(rec)
    return out


def _write_jsonl(path, records: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)


SPEC = """
name: fold
inputs:
  t:
    schema: {{case: long, k: long, v: long, op: string{seq_col}}}
    key: [case, k]
    source: {{kind: cdc, path: inbox/t, format: {fmt}{seq}}}
nodes:
  f: {{op: filter, input: t, where: "true"}}
outputs: [f]
"""


@pytest.mark.parametrize("fmt,sequenced,before", [("jsonl", True, False), ("csv", False, False),
                                                  ("jsonl", False, True)])
def test_records_fold_into_the_changes_of_the_final_keyed_table(spark, tmp_path, fmt, sequenced, before):
    """40 independent cases (the key holds the case number) in one batch of two files: random old
    rows, random records; with a sequence column they apply in its order (shuffled in the files),
    without one in file order, then line order. With ``before:`` a delete names its key there only."""
    seq_col, seq = (", seq: long", ", sequence: seq") if sequenced else ("", "")
    seq += ", before: before" if before else ""
    spec = load_circuit_text(SPEC.format(fmt=fmt, seq_col=seq_col, seq=seq)).inputs["t"]
    rng = random.Random(5 if sequenced else 6)
    values = ("v", "seq") if sequenced else ("v",)  # the sequence is a column of the relation
    old_rows, records, expected, unknown = [], [[], []], Counter(), Counter()
    for case in range(40):
        keys = [(case, k) for k in range(1, 5)]
        old = {(case, k): (rng.choice((None, rng.randint(0, 9))),) + ((-1,) if sequenced else ())
               for _, k in rng.sample(keys, rng.randint(0, 3))}
        old_rows += [(c, k) + v + (1,) for (c, k), v in old.items()]
        recs = _random_records(rng, keys, rng.randint(1, 8))
        final = dict(old)
        if sequenced:  # sequence numbers give the order; the files list them shuffled
            for i, r in enumerate(recs):
                r["seq"] = 100 * case + i
            ordered = list(recs)
            rng.shuffle(recs)
            split = rng.randint(0, len(recs))
            records[0] += recs[:split]
            records[1] += recs[split:]
        else:  # file order, then line order
            split = rng.randint(0, len(recs))
            records[0] += recs[:split]
            records[1] += recs[split:]
            ordered = recs
        bad = _apply(final, ordered, ("case", "k"), values)
        unknown.update((r["case"], r["k"], r["op"]) for r in bad)
        expected.update({(c, k) + v: 1 for (c, k), v in final.items()})
        expected.subtract({(c, k) + v: 1 for (c, k), v in old.items()})
    for i, recs in enumerate(records):
        path = tmp_path / "inbox" / "t" / f"b{i}.{'jsonl' if fmt == 'jsonl' else 'csv'}"
        if before:  # {"op": "d", "before": {"case": .., "k": ..}}: no top-level key
            recs = [{"op": "d", "before": {"case": r["case"], "k": r["k"]}} if r["op"] == "d" else r for r in recs]
        if fmt == "jsonl":
            _write_jsonl(path, recs)
        else:
            os.makedirs(path.parent, exist_ok=True)
            path.write_text("case,k,v,op\n" + "".join(f"{r['case']},{r['k']},{'' if r.get('v') is None else r['v']},"
                                                       f"{r['op']}\n" for r in recs))
    raw = read_records(spark, spec, data_files(str(tmp_path / "inbox" / "t")))
    old_df = from_tuples(spark, old_rows, "case long, k long, v long, " + ("seq long, " if sequenced else "") + "_weight long")
    delta, unknown_df = apply_records(spec, raw, old_df)
    got = collect_all({"delta": delta, "unknown": unknown_df.select("__op", "__key")})
    assert Counter({r[:-1]: r[-1] for r in got["delta"]}) == Counter({k: v for k, v in expected.items() if v})
    assert Counter((json.loads(key)["case"], json.loads(key)["k"], op) for op, key in got["unknown"]) == unknown
    assert sum(unknown.values()) > 5 and any(v < 0 for v in expected.values())  # both cases occurred


CIRCUIT = """
name: shop
inputs:
  orders:
    schema: {order_id: long, customer: string, amount: double, op: string, ts: long}
    key: [order_id]
    source: {kind: cdc, path: inbox/orders, format: jsonl, sequence: ts, after: after, before: before,
             unknown_key: POLICY}
nodes:
  per_customer:
    op: aggregate
    input: orders
    group_by: [customer]
    aggregates: {n: "count(*)", total: "sum(amount)"}
outputs:
  orders: {key: [order_id]}
  per_customer: {key: [customer]}
"""


def _envelope(r: dict) -> dict:
    """A record as Debezium writes it (before/after objects, op, ts_ms-like sequence, source)."""
    row = {c: r[c] for c in ("order_id", "customer", "amount") if c in r}
    after = None if r["op"] == "d" else row
    before = {"order_id": r["order_id"]} if r["op"] in ("u", "d") else None
    return {"before": before, "after": after, "op": r["op"], "ts": r["ts"], "source": {"db": "shop"}}


def _views(table: dict) -> dict[str, Counter]:
    """From scratch, over the final keyed table."""
    groups: dict = {}
    for (oid,), (cust, amount, _ts) in table.items():
        n, s = groups.get(cust, (0, 0.0))
        groups[cust] = (n + 1, s + amount)
    return {"orders": Counter({(oid, c, a, ts): 1 for (oid,), (c, a, ts) in table.items()}),
            "per_customer": Counter({(c, n, round(s, 6)): 1 for c, (n, s) in groups.items()})}


def _shown(rt, view: str) -> Counter:
    table = read_view(rt.committed, view)
    if table is None:  # no timestep committed yet
        return Counter()
    cols = [c for c in table.column_names if c != "_weight"]
    rows = zip(*[table.column(c).to_pylist() for c in cols + ["_weight"]])
    return Counter({tuple(round(v, 6) if isinstance(v, float) else v for v in r[:-1]): r[-1] for r in rows})


@pytest.mark.slow
def test_debezium_stream_steps_match_the_final_keyed_table(spark, tmp_path):
    """Two committed steps of Debezium-shaped records (count policy), then the same state run
    with the refuse and ignore policies (the policy is not part of the circuit's fingerprint)."""
    path = tmp_path / "shop.yaml"
    path.write_text(CIRCUIT.replace("POLICY", "count"))
    rt = open_circuit(str(path), load_config(data_root=str(tmp_path)))
    rng = random.Random(11)
    table: dict = {}
    ts, counted = 0, 0
    for t in range(1, 3):
        recs = []
        for _ in range(12 if t == 1 else 10):
            oid = rng.randint(1, 12)
            op = "c" if t == 1 else rng.choice("cruudd")
            ts += 1
            recs.append({"order_id": oid, "customer": rng.choice("xyz"), "amount": float(rng.randint(1, 50)),
                         "op": op, "ts": ts})
        shuffled = list(recs)
        rng.shuffle(shuffled)  # out of order within the batch: the sequence decides
        counted += len(_apply(table, recs, ("order_id",), ("customer", "amount", "ts")))
        _write_jsonl(tmp_path / "inbox" / "orders" / f"b{t:02d}.jsonl", [_envelope(r) for r in shuffled])
        report = run_step(rt)
        want = _views(table)
        assert _shown(rt, "orders") == want["orders"], f"timestep {t}"
        assert _shown(rt, "per_customer") == want["per_customer"], f"timestep {t}"
        assert not report.published.failed
    assert counted > 0, "no update or delete of an unknown key: the policy was not exercised"
    manifest = rt.committed.manifest()
    assert manifest.inputs["orders"]["unknown_keys"] == counted
    assert manifest.traces[keyed_trace("orders")].sort_by == ("order_id",)
    from deltalake import DeltaTable  # the published keyed table is the final keyed table too

    published = DeltaTable(str(tmp_path / "views" / "shop" / "orders")).to_pyarrow_table()
    assert Counter(zip(*[published.column(c).to_pylist() for c in ("order_id", "customer", "amount", "ts")])) \
        == _views(table)["orders"]

    missing = max(k for (k,) in table) + 100
    _write_jsonl(tmp_path / "inbox" / "orders" / "b90.jsonl",
                 [_envelope({"order_id": missing, "op": "d", "ts": ts + 1})])
    path.write_text(CIRCUIT.replace("POLICY", "refuse"))
    strict = open_circuit(str(path), load_config(data_root=str(tmp_path)))
    with pytest.raises(InputRefused) as refused:
        run_step(strict)
    (file, why), = refused.value.problems
    assert file.endswith("b90.jsonl") and f'{{"order_id":{missing}}}' in why and "unknown_key: refuse" in why
    assert strict.committed.last_committed() == 2

    path.write_text(CIRCUIT.replace("POLICY", "ignore"))
    lenient = open_circuit(str(path), load_config(data_root=str(tmp_path)))
    report = run_step(lenient)
    assert report.timestep == 3 and report.inputs[0].unknown_keys == 0
    assert _shown(lenient, "orders") == _views(table)["orders"]



def _refusal(recs: list[dict]) -> str:
    """What a refusal names for a file's records of unknown keys: their number and the least
    (op, kind, key, sequence) as Spark orders them (strings)."""
    op, kind, key, seq = min((r["op"], OPS[r["op"]], f'{{"order_id":{r["order_id"]}}}', str(r["ts"])) for r in recs)
    return f"{len(recs)} change(s) to keys the input does not hold (unknown_key: refuse), " \
           f"e.g. op '{op}' ({kind}) of key {key}, ts {seq}"


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["count", "ignore", "refuse"])
def test_random_keyed_streams_under_each_unknown_key_policy(spark, tmp_path, policy):
    """Eight committed steps of random Debezium records (c, r = upsert, u, d) over few keys: several
    records of one key per batch, shuffled across two files (the sequence decides), updates and
    deletes of keys that do not exist. At every step the views equal the from-scratch evaluation
    over the final keyed table; ``count`` totals the unknown-key records in the manifest, ``ignore``
    counts none; ``refuse`` refuses a batch holding one (naming each file, how many and a key) and
    commits nothing, then commits the same batch without them."""
    path = tmp_path / "shop.yaml"
    path.write_text(CIRCUIT.replace("POLICY", policy))
    rt = open_circuit(str(path), load_config(data_root=str(tmp_path)))
    rng = random.Random({"count": 21, "ignore": 22, "refuse": 23}[policy])
    inbox = tmp_path / "inbox" / "orders"
    table: dict = {}
    ts, counted, refused_steps, clean_steps, ops = 0, 0, 0, 0, set()
    for t in range(1, 9):
        keys = rng.sample(range(1, 9), 3)  # 4 to 6 records over 3 keys: some key gets several
        recs = []
        for _ in range(rng.randint(4, 6)):
            ts += rng.randint(1, 3)
            recs.append({"order_id": rng.choice(keys), "customer": rng.choice("xyz"),
                         "amount": float(rng.randint(1, 50)), "op": rng.choice("ccrruudd"), "ts": ts})
        ops.update(r["op"] for r in recs)
        before = _views(table)
        unknown = [id(r) for r in _apply(table, recs, ("order_id",), ("customer", "amount", "ts"))]
        rng.shuffle(recs)  # out of order within the batch and across its files
        split = rng.randint(1, len(recs) - 1)
        files = {inbox / f"b{t:02d}a.jsonl": recs[:split], inbox / f"b{t:02d}b.jsonl": recs[split:]}
        for file, part in files.items():
            _write_jsonl(file, [_envelope(r) for r in part])
        if policy == "refuse" and unknown:
            with pytest.raises(InputRefused) as refused:
                run_step(rt)
            bad = {file.name: [r for r in part if id(r) in unknown] for file, part in files.items()}
            assert {os.path.basename(f): why for f, why in refused.value.problems} \
                == {name: _refusal(rs) for name, rs in bad.items() if rs}, f"timestep {t}"
            assert rt.committed.last_committed() == t - 1
            assert {v: _shown(rt, v) for v in before} == before, f"timestep {t}: the refused batch changed a view"
            for file, part in files.items():  # the producer resends the batch without them
                _write_jsonl(file, [_envelope(r) for r in part if id(r) not in unknown])
            refused_steps += 1
        clean_steps += not unknown
        report = run_step(rt)
        assert report.timestep == t and not report.published.failed
        assert {v: _shown(rt, v) for v in before} == _views(table), f"timestep {t}"
        counted += len(unknown)
        recorded = rt.committed.manifest().inputs["orders"].get("unknown_keys", 0)
        if policy == "count":
            assert (report.inputs[0].unknown_keys, recorded) == (len(unknown), counted), f"timestep {t}"
        else:  # ignore: none counted; refuse: none left in what was committed
            assert (report.inputs[0].unknown_keys, recorded) == (0, 0), f"timestep {t}"
    assert ops == set("crud") and counted > 3 and clean_steps, "the stream did not exercise every case"
    assert policy != "refuse" or refused_steps > 1


def test_refused_files_name_what_is_wrong(spark, tmp_path):
    """append_only refuses a delete; cdc refuses an unknown op code and a missing key, naming the
    file; nothing is read."""
    spec = load_circuit_text("""
name: refusals
inputs:
  clicks:
    schema: {user_id: long}
    source: {kind: append_only, path: inbox/clicks, format: parquet}
  orders:
    schema: {order_id: long, amount: double}
    key: [order_id]
    source: {kind: cdc, path: inbox/orders, format: json, op: kind, ops: {I: insert, D: delete}}
nodes: {}
outputs: [clicks, orders]
""")
    clicks = tmp_path / "inbox" / "clicks"
    os.makedirs(clicks)
    pq.write_table(pa.table({"user_id": [1, 2], "_weight": pa.array([1, 3], pa.int64())}), clicks / "ok.parquet")
    pq.write_table(pa.table({"user_id": [1, 2], "_weight": pa.array([1, -1], pa.int64())}), clicks / "bad.parquet")
    with pytest.raises(InputRefused) as refused:
        read_changes(spark, spec.inputs["clicks"], data_files(str(clicks)))
    (file, why), = refused.value.problems
    assert file.endswith("bad.parquet") and "append_only" in why and "delete" in why
    _write_jsonl(tmp_path / "inbox" / "orders" / "a.jsonl", [{"order_id": 1, "amount": 2.0, "kind": "X"}])
    _write_jsonl(tmp_path / "inbox" / "orders" / "b.jsonl", [{"amount": 2.0, "kind": "I"}])
    with pytest.raises(InputRefused) as refused:
        read_records(spark, spec.inputs["orders"], data_files(str(tmp_path / "inbox" / "orders")))
    problems = dict(refused.value.problems)
    assert "not one of I, D" in problems[next(p for p in problems if p.endswith("a.jsonl"))]
    assert "order_id is a key column but has 1 null" in problems[next(p for p in problems if p.endswith("b.jsonl"))]
