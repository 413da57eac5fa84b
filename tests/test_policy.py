"""The execution policy: read from a profile (unknown keys and bad values refused by name), and the
engine each step gets."""
from __future__ import annotations

import pytest

from spark_jobs.config import load_config
from spark_jobs.policy import ExecutionPolicy, policy_from_profile


def test_a_profile_sets_every_threshold_and_nothing_else():
    p = policy_from_profile({"execution": {"engine": "spark", "narrow": {"max_keys": 7}, "recursion": {"lookup": "scan"},
                                           "arrow": {"max_change_rows": 3}},
                             "state": {"sort_min_rows": 0, "keep_timesteps": 3}})
    assert (p.engine, p.narrow.max_keys, p.recursion.lookup, p.arrow.max_change_rows) == ("spark", 7, "scan", 3)
    assert (p.state.sort_min_rows, p.state.keep_timesteps, p.state.compact_fraction) == (0, 3, 0.5)
    assert p.narrow.enabled and p.small_change_rows == ExecutionPolicy().small_change_rows


@pytest.mark.parametrize("raw, message", [
    ({"execution": {"enigne": "arrow"}}, "unknown key(s) enigne"),
    ({"execution": {"engine": "duckdb"}}, "execution.engine: 'duckdb' is not one of auto, spark, arrow"),
    ({"execution": {"narrow": {"max_keys": -1}}}, "execution.narrow.max_keys must be a whole number"),
    ({"execution": {"narrow": {"enabled": "no"}}}, "execution.narrow.enabled must be true or false"),
    ({"execution": {"recursion": {"lookup": "fast"}}}, "execution.recursion.lookup: 'fast'"),
    ({"state": {"sorted_compression": "lzo"}}, "state.sorted_compression: 'lzo' is not one of none, snappy"),
    ({"state": {"compact_fraction": "half"}}, "state.compact_fraction must be a number"),
    ({"execution": {"state": {}}}, "state settings go in the profile's top-level state: section"),
])
def test_bad_settings_are_refused_by_name(raw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        policy_from_profile(raw)


def test_the_engine_of_a_step():
    auto = ExecutionPolicy()
    small = auto.arrow.max_change_rows
    assert auto.engine_for(small, first_step=False)[0] == "arrow"
    assert auto.engine_for(small + 1, first_step=False) == (
        "spark", f"{small + 1} changed rows > execution.arrow.max_change_rows ({small})")
    assert auto.engine_for(10, first_step=True) == (  # a small load runs in-process too
        "arrow", "a load of 10 changed rows <= execution.arrow.max_change_rows")
    assert auto.engine_for(None, first_step=True) == ("spark", "the first step loads the inputs")
    assert auto.engine_for(None, first_step=False) == ("spark", "the size of the change is unknown")
    # a cluster or Connect profile whose files this process reaches runs small steps in-process;
    # one whose files only the cluster sees does not
    assert auto.engine_for(10, first_step=False, driver_reach="not here") == ("spark", "not here")
    assert auto.engine_for(10, first_step=False, unsupported="csv") == ("spark", "csv")
    forced = ExecutionPolicy(engine="arrow")
    assert forced.engine_for(10**9, first_step=True)[0] == "arrow"
    assert forced.engine_for(10, first_step=True, driver_reach="not here")[0] == "spark"
    assert forced.engine_for(1, first_step=False, unsupported="csv")[0] == "spark"
    assert ExecutionPolicy(engine="spark").engine_for(1, first_step=False)[0] == "spark"


def test_past_the_row_threshold_a_local_profile_stays_in_process_while_memory_fits():
    """No cliff at execution.arrow.max_change_rows where Spark shares this machine's cores: the
    step stays in-process while base_memory_bytes + change rows x bytes_per_change_row fits
    max_memory_bytes."""
    from dataclasses import replace

    auto = ExecutionPolicy()
    limit, per_row = auto.arrow.max_change_rows, auto.arrow.bytes_per_change_row
    fits = (auto.arrow.max_memory_bytes - auto.arrow.base_memory_bytes) // per_row
    assert fits > limit  # the default bound reaches past the row threshold (W1: 2M-row changes)
    engine, why = auto.engine_for(limit + 1, first_step=False, local_spark=True)
    assert engine == "arrow" and "in-process: Spark runs on this machine" in why and "max_memory_bytes" in why
    assert auto.engine_for(fits, first_step=False, local_spark=True)[0] == "arrow"
    engine, why = auto.engine_for(fits + 1, first_step=False, local_spark=True)
    assert engine == "spark" and "estimated memory" in why and "> execution.arrow.max_memory_bytes" in why
    # a cluster or Connect profile: past the threshold is Spark's, whatever the memory
    assert auto.engine_for(limit + 1, first_step=False, local_spark=False)[0] == "spark"
    # max_memory_bytes 0: the hard cut-off
    cut = replace(auto, arrow=replace(auto.arrow, max_memory_bytes=0))
    assert cut.engine_for(limit + 1, first_step=False, local_spark=True)[0] == "spark"
    assert cut.engine_for(limit, first_step=False, local_spark=True)[0] == "arrow"
    p = policy_from_profile({"execution": {"arrow": {"max_memory_bytes": 10, "bytes_per_change_row": 5,
                                                     "base_memory_bytes": 2}}})
    assert (p.arrow.max_memory_bytes, p.arrow.bytes_per_change_row, p.inprocess_memory(3)) == (10, 5, 17)


def test_driver_access_is_checked():
    with pytest.raises(ValueError, match="execution.driver_access"):
        policy_from_profile({"execution": {"driver_access": "sometimes"}})
    assert policy_from_profile({"execution": {"driver_access": "never"}}).driver_access == "never"


def test_the_default_profile_reads():
    assert load_config().policy == ExecutionPolicy()
