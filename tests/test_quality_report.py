"""Gate reports: summary text, JSON files, the HTML index, and the exception message."""
from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from html.parser import HTMLParser

import pytest

from spark_jobs.quality import CheckResult, GateReport, QualityGateFailed, enforce
from spark_jobs.quality.report import jsonable, list_reports, load_report, mark_committed, write_report


def sample(timestep: int = 7) -> GateReport:
    return GateReport(timestep=timestep, elapsed_s=1.25, results=[
        CheckResult("dbsp_delta_is_consolidated", "view:by_region", "fail", True,
                    {"delta_rows": 3, "distinct_tuples": 3, "duplicated_tuples": 0,
                     "zero_weight_rows": 0}, builtin=True),
        CheckResult("expect_column_values_to_not_be_null", "view:by_region", "fail", False,
                    {"kwargs": {"column": "region"}, "line": 12, "element_count": 10,
                     "unexpected_count": 2, "partial_unexpected_list": [None, None]}),
        CheckResult("expect_column_values_to_be_between", "input:orders", "warn", False,
                    {"kwargs": {"column": "amount", "min_value": 0}, "line": 5,
                     "element_count": 4, "unexpected_count": 1,
                     "partial_unexpected_list": ["<script>alert(1)</script>"]}),
    ])


class _Table(HTMLParser):
    """Collects the text of each table row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_failed_warnings_and_summary():
    report = sample()
    assert [r.name for r in report.failed] == ["expect_column_values_to_not_be_null"]
    assert [r.name for r in report.warnings] == ["expect_column_values_to_be_between"]
    assert not report.passed
    lines = report.summary().splitlines()
    assert lines[0] == "quality gate t=7: 3 checks, 1 failed, 1 warnings (1.25s)"
    assert lines[1].split()[:3] == ["PASS", "view:by_region", "dbsp_delta_is_consolidated"]
    assert lines[2].split()[0] == "FAIL" and "column=region" in lines[2]
    assert "2 of 10 rows unexpected" in lines[2]
    assert lines[3].split()[:2] == ["WARN", "input:orders"]


def test_enforce_raises_only_for_failed_fail_checks():
    with pytest.raises(QualityGateFailed) as info:
        enforce(sample())
    assert info.value.report.timestep == 7
    message = str(info.value)
    assert "timestep 7" in message and "expect_column_values_to_not_be_null" in message
    assert "view:by_region" in message and "amount" not in message  # the warning is not listed
    warn_only = GateReport(7, [r for r in sample().results if r.policy == "warn" or r.success])
    enforce(warn_only)


def test_write_report_json_and_index(tmp_path):
    directory = str(tmp_path / "reports")
    path = write_report(sample(7), directory)
    assert path == os.path.join(directory, "t000000000007.json")
    data = json.loads(open(path, encoding="utf-8").read())
    assert data["timestep"] == 7 and data["passed"] is False and data["failed"] == 1
    assert load_report(path) == sample(7)

    write_report(GateReport(12, [sample().results[0]]), directory)
    assert list_reports(directory) == [(7, "t000000000007.json"), (12, "t000000000012.json")]
    assert sorted(os.listdir(directory)) == ["index.html", "t000000000007.json",
                                             "t000000000012.json"]  # no temp files left

    page = open(os.path.join(directory, "index.html"), encoding="utf-8").read()
    assert "<script>" not in page  # values are escaped
    table = _Table()
    table.feed(page)
    header, *rows = table.rows
    assert header == ["timestep", "check", "target", "policy", "status", "details"]
    assert rows[0][0] == "12not committed"  # newest first; the gate writes before the commit
    assert [r[4] for r in rows] == ["PASS", "PASS", "FAIL", "WARN"]
    assert rows[3][2] == "input:orders" and rows[3][3] == "warn"


def test_a_report_says_whether_its_timestep_committed(tmp_path):
    directory = str(tmp_path)
    path = write_report(sample(4), directory)
    assert json.loads(open(path, encoding="utf-8").read())["committed"] is False
    mark_committed(directory, 4)
    assert load_report(path).committed is True
    table = _Table()
    table.feed(open(os.path.join(directory, "index.html"), encoding="utf-8").read())
    assert table.rows[1][0] == "4"
    mark_committed(directory, 5)  # no report for that timestep: nothing to do
    assert list_reports(directory) == [(4, "t000000000004.json")]
    old = {k: v for k, v in sample(3).to_dict().items() if k != "committed"}  # written before the flag
    with open(os.path.join(directory, "t000000000003.json"), "w", encoding="utf-8") as fh:
        json.dump(old, fh)
    assert load_report(os.path.join(directory, "t000000000003.json")).committed is True


def test_rewriting_a_timestep_replaces_its_report(tmp_path):
    directory = str(tmp_path)
    write_report(sample(3), directory)
    write_report(GateReport(3, []), directory)
    assert load_report(os.path.join(directory, "t000000000003.json")).results == []
    assert "(no checks)" in open(os.path.join(directory, "index.html"), encoding="utf-8").read()


def test_jsonable_values():
    value = {"d": dt.date(2024, 1, 2), "x": decimal.Decimal("1.50"), "f": float("nan"),
             "b": b"\x00\x01", "t": (1, 2)}
    assert json.loads(json.dumps(jsonable(value))) == {
        "d": "2024-01-02", "x": "1.50", "f": "nan", "b": "AAE=", "t": [1, 2]}
