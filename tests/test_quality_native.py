"""The expectations the gate evaluates without Great Expectations give GE's own result.

Differential: random Arrow tables (made into pandas as the gate does, so an integer column
with NULLs becomes float with NaN), random declarations of the served expectations; every
served one must equal ``expectations.validate`` (GE on pandas) field by field, and every
declaration ``native.accepts`` must be one GE builds. In process, no Spark; GE is imported once.
"""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from spark_jobs.quality import expectations as ge
from spark_jobs.quality import gate, native
from spark_jobs.spec.model import Expectation


def _table(rng: random.Random) -> pa.Table:
    n = rng.randint(1, 40)
    null = rng.choice([0.0, 0.2, 0.7])

    def maybe(v):  # noqa: ANN001, ANN202
        return None if rng.random() < null else v

    return pa.table({
        "i": pa.array([maybe(rng.randint(-5, 12)) for _ in range(n)], pa.int64()),
        "j": pa.array([rng.randint(-3, 3) for _ in range(n)], pa.int32()),
        "f": pa.array([maybe(rng.choice([rng.uniform(-5, 12), 0.0, 7.0])) for _ in range(n)], pa.float64()),
        "s": pa.array([maybe(rng.choice("abc")) for _ in range(n)], pa.string()),
    })


def _expectation(rng: random.Random) -> Expectation:
    kwargs: dict = {}
    if rng.random() < 0.3:
        kwargs["mostly"] = rng.choice([0, 0.5, 0.8, 0.95, 1])
    if rng.random() < 0.3:
        kwargs["column"] = rng.choice("ijs")
        return Expectation(native.NOT_NULL, kwargs, line=rng.randint(1, 9))
    if rng.random() < 0.35:
        kwargs["column"] = rng.choice("ijs")
        pool = list("abcd") if rng.random() < 0.5 else list(range(-5, 13))
        kwargs["value_set"] = rng.sample(pool, rng.randint(1, 4))
        return Expectation(native.IN_SET, kwargs)
    kwargs["column"] = rng.choice("ijf")
    low = rng.choice([None, rng.randint(-4, 6), rng.uniform(-4, 6)])
    high = rng.choice([None, rng.randint(0, 11)] if low is not None else [rng.randint(0, 11), 7.5])
    if high is not None and low is not None and low > high:
        low, high = high, low
    if low is not None:
        kwargs["min_value"] = low
    if high is not None:
        kwargs["max_value"] = high
    for k in ("strict_min", "strict_max"):
        if rng.random() < 0.3:
            kwargs[k] = rng.random() < 0.5
    return Expectation(native.BETWEEN, kwargs, policy=rng.choice(["fail", "warn"]))


def test_served_expectations_equal_great_expectations_on_random_frames() -> None:
    rng = random.Random(25)
    served = 0
    for _ in range(60):
        frame = _table(rng).to_pandas()
        exps = list({repr((e.name, sorted(e.kwargs.items()))): e  # GE drops a repeated declaration
                     for e in (_expectation(rng) for _ in range(rng.randint(1, 5)))}.values())
        assert all(native.accepts(e) for e in exps)
        ge.check_declarations("view:v", exps)  # what native accepts, GE builds
        want = ge.validate(frame, "view:v", exps)
        for e, w in zip(exps, want):
            if native.serves(e, frame):
                served += 1
                got = native.check(e, "view:v", frame)
                assert (got.name, got.target, got.policy, got.success) == (w.name, w.target, w.policy, w.success), e
                assert got.details == w.details, e
        assert gate._validate(frame, "view:v", exps) == want  # mixed served / GE, in order
    assert served > 100


@pytest.mark.parametrize("exp", [
    Expectation(native.BETWEEN, {"column": "i"}),                                   # no bound
    Expectation(native.BETWEEN, {"column": "i", "min_value": 5, "max_value": 1}),   # empty range
    Expectation(native.BETWEEN, {"column": "i", "min_value": "2020-01-01"}),        # not a number
    Expectation(native.BETWEEN, {"column": "i", "min_value": True}),
    Expectation(native.BETWEEN, {"column": "i", "min_value": 1, "row_condition": "i > 0"}),
    Expectation(native.NOT_NULL, {"column": "i", "mostly": 1.5}),
    Expectation(native.NOT_NULL, {"column": 3}),
    Expectation(native.IN_SET, {"column": "i", "value_set": []}),
    Expectation(native.IN_SET, {"column": "i", "value_set": [1, "a"]}),
    Expectation(native.IN_SET, {"column": "i", "value_set": [1.5]}),
    Expectation(native.IN_SET, {"column": "i", "value_set": [True]}),
    Expectation(native.IN_SET, {"column": "i", "value_set": "ab"}),
    Expectation("expect_column_values_to_not_be_in_set", {"column": "i", "value_set": [1]}),
])
def test_anything_else_goes_to_great_expectations(exp: Expectation) -> None:
    assert not native.accepts(exp)


def test_frames_not_served() -> None:
    frame = pa.table({"f": pa.array([1.0, None]), "s": ["a", None]}).to_pandas()
    assert not native.serves(Expectation(native.NOT_NULL, {"column": "f"}), frame)  # NaN: GE's text
    assert not native.serves(Expectation(native.NOT_NULL, {"column": "x"}), frame)  # missing column
    assert not native.serves(Expectation(native.BETWEEN, {"column": "s", "min_value": 1}), frame)
    assert not native.serves(Expectation(native.NOT_NULL, {"column": "s"}), frame.iloc[:0])
    assert native.serves(Expectation(native.NOT_NULL, {"column": "s"}), frame)
    assert not native.serves(Expectation(native.IN_SET, {"column": "s", "value_set": [1]}), frame)
    assert not native.serves(Expectation(native.IN_SET, {"column": "f", "value_set": [1]}), frame)
    dates = pa.table({"d": pa.array([0, None], pa.date32())}).to_pandas()  # object, not strings
    assert not native.serves(Expectation(native.IN_SET, {"column": "d", "value_set": ["x"]}), dates)


def test_a_repeated_declaration_gets_its_own_result() -> None:
    """GE keeps one of two equal declarations and returns no result for the other, which the gate
    then reported as failed: each copy now gets the one result, with its own policy and line."""
    frame = pa.table({"i": [1, 2, 2]}).to_pandas()
    unique = {"column": "i"}
    exps = [Expectation("expect_column_values_to_be_unique", unique, line=3),
            Expectation(native.NOT_NULL, {"column": "i"}, line=4),
            Expectation("expect_column_values_to_be_unique", dict(unique), policy="warn", line=7)]
    got = ge.validate(frame, "view:v", exps)
    assert [(r.name, r.policy, r.success, r.details["line"]) for r in got] == [
        ("expect_column_values_to_be_unique", "fail", False, 3), (native.NOT_NULL, "fail", True, 4),
        ("expect_column_values_to_be_unique", "warn", False, 7)]
    assert not any("exception" in r.details for r in got)
    assert got[0].details["unexpected_count"] == got[2].details["unexpected_count"] == 2
    assert gate._validate(frame, "view:v", exps + [exps[1]])[3].success  # native and GE side alike
    holds = Expectation("expect_column_values_to_not_be_in_set", {"column": "i", "value_set": [9]})
    assert [r.success for r in ge.validate(frame, "view:v", [holds, holds])] == [True, True]
