"""The circuit keys the Airflow layer reads: `orchestration`, `schedule` on assets, `feed`."""
from __future__ import annotations

from spark_jobs.spec.loader import check_text
from spark_jobs.spec.model import DEFAULT_ORCHESTRATION_TASKS

BASE = """\
name: c1
inputs:
  orders:
    schema: {id: long}
    source: {kind: changes, path: inbox/orders, format: parquet}
  customers:
    schema: {id: long}
    source: {kind: changes, path: inbox/customers, format: parquet}
nodes:
  f: {op: filter, input: orders, where: "id > 1"}
outputs:
  f: {}
"""


def _check(extra: str, body: str = BASE):
    return check_text(body + extra, "c1.yaml")


def test_defaults_and_values():
    spec, problems = _check("")
    assert not problems
    assert spec.orchestration.tasks == DEFAULT_ORCHESTRATION_TASKS == "per_step"
    assert spec.orchestration.commit_empty is False and spec.schedule is None and spec.schedule_assets == ()
    spec, problems = _check("orchestration: {tasks: per_stage, commit_empty: true}\nschedule: on_inputs\n")
    assert not problems
    assert spec.orchestration.tasks == "per_stage" and spec.orchestration.commit_empty is True
    assert spec.schedule is None and spec.schedule_assets == ("orders", "customers")
    spec, problems = _check('schedule: {cron: "@hourly", assets: [customers, other.view_x]}\n')
    assert not problems and spec.schedule == "@hourly" and spec.schedule_assets == ("customers", "other.view_x")
    spec, problems = _check("", BASE.replace("  f: {}", "  f: {feed: true}"))
    assert not problems and spec.outputs["f"].feed is True


def test_mistakes_are_reported_with_their_line():
    _, problems = _check("orchestration: {tasks: per_task, commit: yes}\n")
    text = "\n".join(map(str, problems))
    assert "c1.yaml:13:" in text and "'per_task' is not allowed; expected one of: per_step, per_stage" in text
    assert "unknown field 'commit'" in text
    _, problems = _check("schedule: {assets: [order, c1.f]}\n")
    text = "\n".join(map(str, problems))
    assert "schedule asset 'order' is not an input of this circuit" in text and "did you mean 'orders'" in text
    assert "'c1.f' is a view of this circuit" in text
    _, problems = _check('schedule: {cron: "@hourlyy", assets: [orders]}\n')
    assert any("schedule '@hourlyy' is neither a cron string" in str(p) and "did you mean '@hourly'" in str(p)
               for p in problems), problems
    _, problems = _check("schedule: {assets: []}\n")
    assert problems  # at least one asset
    _, problems = _check("", BASE.replace("  f: {}", "  f: {feed: maybe}"))
    assert any("field 'feed'" in str(p) for p in problems), problems
